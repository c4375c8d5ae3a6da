"""AutoRelay: an autotuning deep-learning compiler with a Relay-style typed functional IR.

The public names below are imported lazily, so `import autorelay` stays fast and a user of the
text format does not pay for LLVM.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

from autorelay.errors import (
    AutoRelayError,
    InterpreterError,
    ParseError,
    RuntimeError,
    ScheduleError,
    TypeCheckError,
)

_LAZY = {
    "parse": "autorelay.text_format",
    "parse_expr": "autorelay.text_format",
    "astext": "autorelay.ir.printer",
    "structural_equal": "autorelay.ir.structural",
    "structural_hash": "autorelay.ir.structural",
    "assert_structural_equal": "autorelay.ir.structural",
    "infer_types": "autorelay.typing",
    "infer_expr": "autorelay.typing",
    "evaluate": "autorelay.runtime.interpreter",
    "Interpreter": "autorelay.runtime.interpreter",
    "gradient": "autorelay.transform.gradient",
    "load_prelude": "autorelay.text_format",
    "build": "autorelay.build_module",
    "load": "autorelay.runtime.executable",
}


# Subpackages reachable as attributes (`autorelay.frontend.from_onnx`, `autorelay.transform.pipeline`),
# as `tvm.relay.frontend` is, imported on first use.
_SUBPACKAGES = ("codegen", "frontend", "ir", "lower", "op", "runtime", "schedule", "target", "te", "tir",
                "transform", "typing")


def __getattr__(name: str) -> Any:
    if name in _SUBPACKAGES:
        return importlib.import_module(f"autorelay.{name}")
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'autorelay' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "AutoRelayError", "InterpreterError", "ParseError", "RuntimeError", "ScheduleError",
    "TypeCheckError", *_LAZY,
]
