"""The ONNX importer: `from_onnx(path_or_model) -> (IRModule, params)`. Needs the optional `onnx` package."""

from autorelay.frontend.onnx.converters import SUPPORTED_OPS
from autorelay.frontend.onnx.errors import (
    OnnxImportError,
    OnnxModelError,
    OnnxNodeError,
    OnnxStaticValueError,
    UnsupportedOnnxOpsError,
)
from autorelay.frontend.onnx.importer import from_onnx

__all__ = [
    "SUPPORTED_OPS",
    "OnnxImportError",
    "OnnxModelError",
    "OnnxNodeError",
    "OnnxStaticValueError",
    "UnsupportedOnnxOpsError",
    "from_onnx",
]
