"""Errors of the ONNX importer. Each is one line and names the node (index, name, op type) it is about."""

from __future__ import annotations

from autorelay.errors import AutoRelayError


class OnnxImportError(AutoRelayError):
    """Base of every error the ONNX importer raises on purpose."""


class OnnxModelError(OnnxImportError):
    """The input is not a readable ONNX model: not ONNX, truncated, missing external data, bad opset."""


class OnnxNodeError(OnnxImportError):
    """One node could not be converted: an unsupported variant, a bad attribute, a shape contradiction."""

    def __init__(self, where: str, message: str):
        self.where = where
        self.message = message
        super().__init__(f"{where}: {message}")


class OnnxStaticValueError(OnnxNodeError):
    """A node needs the value of an input at import time (a shape, axes, pads) but it is a graph input.

    `input_name` names that input so a caller can bind it with `from_onnx(..., constants={...})`.
    """

    def __init__(self, where: str, message: str, input_name: str):
        self.input_name = input_name
        super().__init__(where, message)


class UnsupportedOnnxOpsError(OnnxImportError):
    """Every operator type of the graph that has no converter, each with the nodes that use it.

    Raised once, before any conversion, so a user sees the whole list instead of one op per run.
    """

    def __init__(self, unsupported: dict[str, list[str]]):
        self.unsupported = unsupported
        parts = [f"{op} (nodes: {', '.join(nodes)})" for op, nodes in sorted(unsupported.items())]
        super().__init__(f"unsupported ONNX operator(s): {'; '.join(parts)}")
