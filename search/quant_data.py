"""Calibration and validation data for quantization: batches of model inputs read from a folder, or
seeded random ones.

A folder holds either
  * `.npy` files (single-input models) or `.npz` files keyed by input name (any model): each file is
    one batch with exactly the input's shape, or a stack of batches along the first axis
    (`(k * B, ...)` for an input of shape `(B, ...)`); files are read in natural name order; or
  * ONNX test data: `input_K.pb` tensors (the K-th model input, or the input the tensor names),
    directly in the folder or in `test_data_set_*` subfolders, one batch per folder.
A validation folder may add `labels.npy`: one integer class per sample, in file order; with labels
the search scores top-1 accuracy, without them the output error relative to the fp32 model.

Everything wrong with a folder is a `ValueError` of one line that names the folder and the file,
because the user fixes a folder by reading the message, not a traceback.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from autorelay.frontend.zoo import input_types
from search.models import Model

LABELS = "labels.npy"


@dataclass
class DataSet:
    """Input batches (each a dict input name -> array of the model's input shape), and the class
    labels of their samples in order when known."""

    batches: list[dict[str, np.ndarray]]
    labels: np.ndarray | None
    source: str  # where it came from, for reports and the log

    @property
    def samples(self) -> int:
        return sum(next(iter(b.values())).shape[0] if b else 0 for b in self.batches)


def input_specs(model: Model) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Each model input's (shape, dtype), in the order of `@main`'s parameters."""
    return {n: (tuple(int(d) for d in t.concrete_shape), np.dtype(t.dtype))
            for n, t in input_types(model.mod, model.params).items()}


def random_batches(model: Model, n: int, seed: int = 0, *, source: str | None = None) -> DataSet:
    """`n` batches of standard-normal inputs (seeded: the same `n` and `seed` give the same data)."""
    if n < 1:
        raise ValueError(f"need at least one random batch, got {n}")
    rng = np.random.default_rng(seed)
    batches = [{name: rng.standard_normal(shape).astype(dtype) for name, (shape, dtype) in
                input_specs(model).items()} for _ in range(n)]
    return DataSet(batches, None, source or f"random({n}, seed={seed})")


def _natural(p: Path) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]


class _Folder:
    """Reads one folder against one model's input specs; `fail` raises the one-line error."""

    def __init__(self, path: Path, model: Model, what: str) -> None:
        self.path, self.what = path, what
        self.specs = input_specs(model)

    def fail(self, msg: str) -> ValueError:
        return ValueError(f"{self.what} folder {self.path}: {msg}")

    def split(self, name: str, arr: np.ndarray, where: str) -> list[np.ndarray]:
        """`arr` as batches of input `name`: its exact shape, or a stack of them on axis 0."""
        shape, dtype = self.specs[name]
        if arr.dtype.kind not in "fiu" or (dtype.kind in "iu" and arr.dtype.kind == "f"):
            raise self.fail(f"{where} holds {arr.dtype} values; input {name!r} is {dtype}")
        if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
            raise self.fail(f"{where} holds NaN or infinite values")
        arr = arr.astype(dtype, copy=False)
        if arr.shape == shape:
            return [arr]
        b = shape[0] if shape else 0
        if arr.ndim == len(shape) and b and arr.shape[1:] == shape[1:] and arr.shape[0] % b == 0:
            return [arr[i:i + b] for i in range(0, arr.shape[0], b)]
        raise self.fail(f"{where} has shape {tuple(arr.shape)}, but input {name!r} takes {shape}"
                        + (" (or a stack of such batches on axis 0)" if shape else ""))

    def load_npy(self, f: Path) -> np.ndarray | dict[str, np.ndarray]:
        with open(f, "rb") as fh:
            magic = fh.read(6)
        if magic != b"\x93NUMPY" and magic[:4] != b"PK\x03\x04":  # (np.load would try unpickling it)
            raise self.fail(f"cannot read {f.name}: not a NumPy .npy/.npz file")
        try:
            data = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError) as e:
            raise self.fail(f"cannot read {f.name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                            ) from None
        if isinstance(data, np.lib.npyio.NpzFile):
            with data:
                return {k: data[k] for k in data.files}
        return data

    def assemble(self, parts: dict[str, list[np.ndarray]], where: str) -> list[dict[str, np.ndarray]]:
        """Batches from each input's list of batches (every input must hold as many)."""
        missing = [n for n in self.specs if n not in parts]
        if missing:
            raise self.fail(f"{where} has no array for input(s) {', '.join(map(repr, missing))}")
        counts = {len(v) for v in parts.values()}
        if len(counts) != 1:
            raise self.fail(f"{where}: its inputs hold different numbers of batches")
        return [{n: parts[n][i] for n in self.specs} for i in range(counts.pop())]

    def batches_from_arrays(self, files: Sequence[Path]) -> list[dict[str, np.ndarray]]:
        out: list[dict[str, np.ndarray]] = []
        names = list(self.specs)
        for f in files:
            data = self.load_npy(f)
            if isinstance(data, np.ndarray):
                if len(names) != 1:
                    raise self.fail(f"{f.name} is one array, but the model has inputs {', '.join(names)}: "
                                    "use .npz files keyed by input name")
                data = {names[0]: data}
            parts = {n: self.split(n, data[n], f"{f.name}[{n}]" if len(names) > 1 else f.name)
                     for n in names if n in data}
            out += self.assemble(parts, f.name)
        return out

    def batches_from_pb(self, sets: Sequence[Path]) -> list[dict[str, np.ndarray]]:
        try:
            import onnx
            from onnx import numpy_helper
        except ImportError:
            raise self.fail("reading input_*.pb files needs the onnx package (pip install onnx)") from None
        names = list(self.specs)
        out = []
        for folder in sets:
            here = "the folder" if folder == self.path else folder.name
            parts: dict[str, list[np.ndarray]] = {}
            for f in sorted(folder.glob("input_*.pb"), key=_natural):
                where = f.name if folder == self.path else f"{folder.name}/{f.name}"
                t = onnx.TensorProto()
                try:
                    t.ParseFromString(f.read_bytes())
                    arr = numpy_helper.to_array(t)
                except Exception as e:  # protobuf raises its own DecodeError; any failure is "cannot read"
                    msg = str(e).splitlines()[0] if str(e) else "not a TensorProto"
                    raise self.fail(f"cannot read {where}: {msg}") from None
                m = re.fullmatch(r"input_(\d+)", f.stem)
                k = int(m.group(1)) if m else -1
                name = t.name if t.name in self.specs else (names[k] if 0 <= k < len(names) else None)
                if name is None:
                    raise self.fail(f"{where}: the model has no input {t.name!r} and no input number {k}")
                parts[name] = self.split(name, arr, where)
            out += self.assemble(parts, here)
        return out

    def labels(self, samples: int) -> np.ndarray | None:
        f = self.path / LABELS
        if not f.is_file():
            return None
        arr = self.load_npy(f)
        if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.ndim != 1:
            raise self.fail(f"{LABELS} must be a 1-d array of integer classes")
        if arr.shape[0] != samples:
            raise self.fail(f"{LABELS} holds {arr.shape[0]} labels for {samples} samples")
        return arr.astype(np.int64)


def load_folder(path: str | Path, model: Model, *, what: str = "calibration") -> DataSet:
    """The batches (and labels) of a calibration or validation folder; see the module docstring."""
    folder = _Folder(Path(path), model, what)
    p = folder.path
    if not p.exists():
        raise folder.fail("does not exist")
    if not p.is_dir():
        raise folder.fail("is not a directory")
    arrays = sorted((f for f in p.iterdir() if f.suffix in (".npy", ".npz") and f.name != LABELS
                     and f.is_file()), key=_natural)
    sets = sorted((d for d in p.glob("test_data_set_*") if d.is_dir()), key=_natural)
    if any(p.glob("input_*.pb")):
        sets = [p, *sets]
    if arrays and sets:
        raise folder.fail("mixes .npy/.npz files with ONNX input_*.pb test data; use one kind")
    if not arrays and not sets:
        raise folder.fail("holds no .npy/.npz files and no ONNX test data (input_*.pb)")
    batches = folder.batches_from_arrays(arrays) if arrays else folder.batches_from_pb(sets)
    data = DataSet(batches, None, str(p))
    data.labels = folder.labels(data.samples)
    return data


__all__ = ["LABELS", "DataSet", "input_specs", "load_folder", "random_batches"]
