"""Reading an ONNX model: bytes or file or ModelProto, the opset, initializer values (also from
external data files, as `torch.onnx.export` writes for large models), graph input types, names.

Every failure is a one-line `OnnxModelError` saying what is wrong with the file.
"""

from __future__ import annotations

import os
import re
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autorelay.frontend.onnx.context import ONNX_DTYPES
from autorelay.frontend.onnx.errors import OnnxImportError, OnnxModelError
from autorelay.ir.types import AnyDim, SymDim, TensorType

# 9-26 is the range the tests target. Opsets 22-26 changed the converted ops only by element types
# the IR cannot hold (bfloat16, float4/8, int2/4: refused by name) and by attributes the converters
# read: QuantizeLinear's `precision` and DequantizeLinear's `output_dtype` (23), Attention's
# `nonpad_kv_seqlen` (24, refused). Opset 27's Range `stash_type` matters only for 16-bit floats.
MIN_OPSET, MAX_TESTED_OPSET = 7, 26
DEFAULT_DOMAINS = ("", "ai.onnx")


def require_onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise OnnxImportError(
            "the ONNX importer needs the 'onnx' package: pip install 'autorelay[onnx]'"
        ) from None
    return onnx


def load_model(onnx: Any, model: Any, base_dir: str | os.PathLike | None) -> tuple[Any, str | None]:
    folder = str(base_dir) if base_dir is not None else None
    if isinstance(model, (str, os.PathLike)):
        path = Path(model)
        if not path.is_file():
            raise OnnxModelError(f"{path}: no such file")
        data = path.read_bytes()
        folder = folder or str(path.parent)
        label = str(path)
    elif isinstance(model, (bytes, bytearray)):
        data, label = bytes(model), "<bytes>"
    elif isinstance(model, onnx.ModelProto):
        check_model(model, "<ModelProto>")
        return model, folder
    else:
        raise OnnxModelError(f"from_onnx takes a path, bytes or onnx.ModelProto, got {type(model).__name__}")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except Exception as err:  # protobuf's DecodeError; message is often empty
        raise OnnxModelError(
            f"{label}: not a valid ONNX model (truncated or not ONNX: "
            f"{type(err).__name__}{': ' + str(err) if str(err) else ''})"
        ) from None
    check_model(proto, label)
    return proto, folder


def check_model(proto: Any, label: str) -> None:
    """Random bytes sometimes parse as a protobuf; a real model has an IR version and an opset."""
    if proto.ir_version <= 0 or not proto.opset_import or not proto.HasField("graph"):
        raise OnnxModelError(f"{label}: not an ONNX model (no IR version, opset import or graph)")


def default_opset(proto: Any) -> int:
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        raise OnnxModelError("the model imports no version of the default ONNX operator set")
    opset = max(versions)
    if opset < MIN_OPSET:
        raise OnnxModelError(
            f"opset {opset} is older than the oldest supported opset {MIN_OPSET}; "
            "convert the model with onnx.version_converter first"
        )
    if opset > MAX_TESTED_OPSET:
        warnings.warn(
            f"ONNX opset {opset} is newer than {MAX_TESTED_OPSET}; importing it with the "
            "semantics of the newest op versions the importer knows",
            stacklevel=3,
        )
    return opset


def tensor_value(onnx: Any, t: Any, folder: str | None) -> np.ndarray:
    from onnx import numpy_helper

    if t.data_type not in ONNX_DTYPES:
        dt = onnx.TensorProto.DataType.Name(t.data_type)
        raise OnnxModelError(f"initializer {t.name!r} has element type {dt}, which AutoRelay cannot hold")
    if t.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in t.external_data}
        if folder is None:
            raise OnnxModelError(
                f"initializer {t.name!r} is stored in external file {info.get('location')!r}; "
                "pass base_dir= (the folder holding it) or a file path"
            )
        loc = _external_path(folder, t.name, info.get("location", ""))
        if not loc.is_file():
            raise OnnxModelError(f"initializer {t.name!r}: external data file {str(loc)!r} not found")
        offset, length = int(info.get("offset", 0)), int(info.get("length", -1) or -1)
        with open(loc, "rb") as f:
            f.seek(offset)
            raw = f.read(length if length >= 0 else -1)
        dtype = np.dtype(ONNX_DTYPES[t.data_type])
        shape = tuple(int(d) for d in t.dims)
        expected = int(np.prod(shape)) * dtype.itemsize
        if len(raw) != expected:
            raise OnnxModelError(
                f"initializer {t.name!r}: external data {str(loc)!r} holds {len(raw)} bytes "
                f"at offset {offset}, expected {expected} for shape {shape} {dtype}"
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    try:
        return np.asarray(numpy_helper.to_array(t))
    except Exception as err:
        raise OnnxModelError(f"initializer {t.name!r} cannot be decoded: {err}") from None


def _external_path(folder: str, name: str, location: str) -> Path:
    """The external data file of initializer `name`, which must lie inside the model's folder: a
    model file is untrusted input, and `../../etc/passwd` or an absolute path would let it read (and
    echo into weights) any file the user can read."""
    root = Path(folder).resolve()
    loc = (root / location).resolve()
    if not location or Path(location).is_absolute() or not loc.is_relative_to(root):
        raise OnnxModelError(
            f"initializer {name!r}: external data location {location!r} is outside the model's folder"
        )
    return loc


def input_type(vi: Any, override: Sequence[int] | None, default_dtype: str) -> TensorType:
    """The type of tensor graph input `vi`, with `override` (from_onnx's `shape=`) for its shape."""
    if not vi.type.HasField("tensor_type"):
        kind = vi.type.WhichOneof("value") or "untyped"
        raise OnnxModelError(f"graph input {vi.name!r} has type {kind.removesuffix('_type')}, not tensor "
                             "(graph inputs may be tensors or sequences of tensors; an optional input's "
                             "presence is known only at run time)")
    return _tensor_type(vi.name, vi.type.tensor_type, override, default_dtype)


def is_sequence_input(vi: Any) -> bool:
    return vi.type.HasField("sequence_type")


def sequence_input_types(vi: Any, override: Sequence[Sequence[int]] | None,
                         default_dtype: str) -> list[TensorType]:
    """The types of the tensors of sequence graph input `vi`: a sequence is held as a tuple of its
    tensors, so its length must be known at import, and `override` (from_onnx's `shape=`) gives it:
    the shape of each tensor, in order."""
    elem = vi.type.sequence_type.elem_type
    if not elem.HasField("tensor_type"):
        raise OnnxModelError(f"graph input {vi.name!r} is a sequence of {elem.WhichOneof('value')}, not of "
                             "tensors")
    if override is None or any(isinstance(d, (int, np.integer)) for d in override):
        raise OnnxModelError(f"graph input {vi.name!r} is a sequence, whose length the model does not fix: "
                             f"pass shape={{{vi.name!r}: [shape of each tensor, ...]}} to take it as that "
                             "many tensors")
    return [_tensor_type(f"{vi.name}[{k}]", elem.tensor_type, shape, default_dtype)
            for k, shape in enumerate(override)]


def _tensor_type(name: str, tt: Any, override: Sequence[int] | None, default_dtype: str) -> TensorType:
    if tt.elem_type == 0:
        dtype = default_dtype
    elif tt.elem_type in ONNX_DTYPES:
        dtype = ONNX_DTYPES[tt.elem_type]
    else:
        raise OnnxModelError(
            f"graph input {name!r} has an element type AutoRelay cannot hold (ONNX type {tt.elem_type})"
        )
    dims: list = []
    for d in tt.shape.dim:
        if d.HasField("dim_value") and d.dim_value > 0:
            dims.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param:
            dims.append(SymDim(re.sub(r"[^A-Za-z0-9_]", "_", d.dim_param)))
        elif d.HasField("dim_value") and d.dim_value == 0:
            dims.append(0)
        else:  # no value, or a negative one (some exporters write -1 for "unknown")
            dims.append(AnyDim())
    if override is not None:
        override = tuple(int(x) for x in override)
        if tt.HasField("shape") and len(override) != len(dims):
            raise OnnxModelError(f"shape= gives {override} for input {name!r} of rank {len(dims)}")
        for have, want in zip(dims, override):
            if isinstance(have, int) and have != want:
                raise OnnxModelError(
                    f"shape= gives {override} for input {name!r}, which the model "
                    f"declares as {tuple(str(d) for d in dims)}"
                )
        dims = list(override)
    elif not tt.HasField("shape"):
        raise OnnxModelError(f"graph input {name!r} declares no shape; pass shape={{{name!r}: …}}")
    return TensorType(tuple(dims), dtype)


class NameTable:
    """Printable, unique parameter names (`conv1.weight` -> `conv1_weight`)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def fresh(self, name: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
        if base[0].isdigit():
            base = "v" + base
        out, k = base, 1
        while out in self.used:
            out, k = f"{base}_{k}", k + 1
        self.used.add(out)
        return out
