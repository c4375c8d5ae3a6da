"""Run the ONNX backend node test cases shipped in the `onnx` wheel through the importer.

Each case is a folder `onnx/backend/test/data/node/test_*/` holding `model.onnx` and
`test_data_set_0/{input,output}_*.pb`. A case runs as: import, `infer_types`, the reference
interpreter, then comparison with the expected outputs (floats to rtol/atol 1e-4, others exactly).
Used by the pytest suite and by `experiments/onnx_node_report.py`.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autorelay.frontend.onnx.converters import SUPPORTED_OPS
from autorelay.frontend.onnx.errors import OnnxStaticValueError
from autorelay.frontend.onnx.function_ops import expandable

RTOL = ATOL = 1e-4
FP16_TOL = 2e-3


def node_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


@dataclass(frozen=True)
class Case:
    name: str
    path: Path
    op_types: tuple[str, ...]
    tests: tuple[str, ...] = ()  # the op(s) the case is about (set by `cases_testing`)


def supported_cases() -> list[Case]:
    """Every node case whose op types (default domain) the importer converts or expands (an op ONNX
    defines as a function, `function_ops`)."""
    import onnx

    out = []
    for d in sorted(node_dir().iterdir()):
        model_path = d / "model.onnx"
        if not model_path.is_file():
            continue
        m = onnx.load(str(model_path), load_external_data=False)
        ops = tuple(sorted({n.op_type for n in m.graph.node}))
        opset = max([o.version for o in m.opset_import if o.domain in ("", "ai.onnx")] or [1])
        if (
            ops
            and all(n.op_type in SUPPORTED_OPS or expandable(onnx, n, opset, SUPPORTED_OPS)
                    for n in m.graph.node)
            and all(n.domain in ("", "ai.onnx") for n in m.graph.node)
        ):
            out.append(Case(d.name, d, ops))
    return out


def cases_testing(ops: frozenset[str] | set[str]) -> list[Case]:
    """Every node case that tests one of `ops`, whether or not the importer converts its graph.

    The op a case tests is the op type of its plain model (each plain case is one node type); an
    `_expanded` case is that op's ONNX function body, so it tests the op of its plain twin even though
    its graph holds other ops; that op is the case's `tests`, `op_types` stays the graph's own.
    """
    import onnx

    graphs: dict[str, tuple[Path, tuple[str, ...]]] = {}
    for d in sorted(node_dir().iterdir()):
        if (d / "model.onnx").is_file():
            m = onnx.load(str(d / "model.onnx"), load_external_data=False)
            graphs[d.name] = (d, tuple(sorted({n.op_type for n in m.graph.node})))
    out = []
    for name, (path, op_types) in graphs.items():
        plain = re.sub(r"_expanded(_ver\d+)?$", "", name)
        tested = graphs.get(plain, (path, op_types))[1]
        if set(tested) & set(ops):
            out.append(Case(name, path, op_types, tested))
    return out


def _read_tensors(folder: Path, prefix: str, kinds: list[str] | None = None) -> list[Any]:
    """The case's `prefix` (input/output) values: arrays, or lists of arrays where `kinds` (the
    graph's declared value kinds, in order) says `sequence_type`."""
    import onnx
    from onnx import numpy_helper

    values: list[Any] = []
    files = sorted(folder.glob(f"{prefix}_*.pb"), key=lambda p: int(p.stem.split("_")[-1]))
    for k, f in enumerate(files):
        if kinds is not None and k < len(kinds) and kinds[k] == "sequence_type":
            s = onnx.SequenceProto()
            s.ParseFromString(f.read_bytes())
            values.append(numpy_helper.to_list(s))
            continue
        t = onnx.TensorProto()
        t.ParseFromString(f.read_bytes())
        values.append(numpy_helper.to_array(t))
    return values


def run_case(case: Case) -> tuple[bool, str]:
    """(passed, message). Import errors propagate, so callers see the one-line importer error."""
    import onnx

    import autorelay
    from autorelay.frontend.onnx.importer import from_onnx

    model = onnx.load(str(case.path / "model.onnx"))
    init = {t.name for t in model.graph.initializer}
    names = [vi.name for vi in model.graph.input if vi.name not in init]
    for vi in list(model.graph.input) + list(model.graph.output):
        if vi.type.WhichOneof("value") not in ("tensor_type", "sequence_type"):  # optionals, maps
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                from_onnx(model)  # raises the importer's own error for the non-tensor value
    data = case.path / "test_data_set_0"
    graph_inputs = [vi for vi in model.graph.input if vi.name not in init]
    inputs = _read_tensors(data, "input", [vi.type.WhichOneof("value") for vi in graph_inputs])
    expected = _read_tensors(data, "output", [vi.type.WhichOneof("value") for vi in model.graph.output])
    feeds = dict(zip(names, inputs))
    constants: dict[str, np.ndarray] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(len(names) + 1):  # bind inputs that the importer needs statically, one by one
            try:
                mod, params = from_onnx(
                    model,
                    constants=constants,
                    shape={n: [a.shape for a in v] if isinstance(v, list) else v.shape
                           for n, v in feeds.items() if n not in constants},
                )
                break
            except OnnxStaticValueError as err:
                if err.input_name not in feeds or err.input_name in constants:
                    raise
                constants[err.input_name] = feeds[err.input_name]
    typed = autorelay.infer_types(mod)
    # @main takes the graph inputs first, a sequence as its tensors
    bound = [feeds[n] for n in names if n not in constants]
    dynamic = [a for v in bound for a in (v if isinstance(v, list) else [v])]
    args = dynamic + [params[p.name_hint] for p in mod["main"].params[len(dynamic) :]]
    out = autorelay.evaluate(typed, *args)
    outs = list(out) if len(model.graph.output) > 1 else [out]
    if len(outs) != len(expected):
        return False, f"{len(outs)} outputs, expected {len(expected)}"
    pairs = []
    for i, (got, want) in enumerate(zip(outs, expected)):
        if isinstance(want, list):  # a sequence: its tensors in order
            if not isinstance(got, tuple) or len(got) != len(want):
                return False, f"output {i}: {got!r:.80} for a sequence of {len(want)} tensors"
            pairs += [(f"{i}[{k}]", g, w) for k, (g, w) in enumerate(zip(got, want))]
        else:
            pairs.append((str(i), got, want))
    for i, got, want in pairs:
        got = np.asarray(got)
        if got.shape != want.shape:
            return False, f"output {i}: shape {got.shape}, expected {want.shape}"
        if want.dtype.kind == "f":
            tol = FP16_TOL if want.dtype == np.float16 else RTOL  # half precision: ~3 significant digits
            if not np.allclose(
                got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol, equal_nan=True
            ):
                err = np.max(np.abs(got.astype(np.float64) - want))
                return False, f"output {i}: max abs error {err:.3g}"
        elif not np.array_equal(got, want):
            return False, f"output {i}: values differ ({got.dtype} vs {want.dtype})"
        if got.dtype != want.dtype:
            return False, f"output {i}: dtype {got.dtype}, expected {want.dtype}"
    return True, "ok"
