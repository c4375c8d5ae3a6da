"""Frontends: the model zoo (`autorelay.frontend.zoo`) and the ONNX importer (`from_onnx`).

`from_onnx` is imported lazily so that `import autorelay.frontend` does not need the optional
`onnx` package.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    if name == "from_onnx":
        from autorelay.frontend.onnx import from_onnx

        return from_onnx
    raise AttributeError(f"module 'autorelay.frontend' has no attribute {name!r}")


__all__ = ["from_onnx"]
