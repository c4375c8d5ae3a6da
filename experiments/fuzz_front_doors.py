"""Fuzz the front doors with Hypothesis: the Relay text parser and type checker, the ONNX importer
(mutated protobufs of small models) and the JSONL importer of the tuning log.

A front door may refuse its input only with a documented error — an `autorelay.AutoRelayError`
subclass or a `tuning_db.TuningDBError` — and must answer within `HANG_S`. Anything else (another
exception, a hang) is a finding. The test suite runs a few hundred inputs
(tests/experiments/test_fuzz_front_doors.py); this script runs for as long as asked:

    python experiments/fuzz_front_doors.py --minutes 5

and prints, per front door, how many inputs it tried and every distinct finding (kind, exception
type and where it was raised), with one input that triggers it.
"""

from __future__ import annotations

import argparse
import io
import json
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autorelay.errors import AutoRelayError
from tuning_db import TuningDBError

HANG_S = 10.0  # an input that takes longer than this is a hang
EXAMPLES = Path(__file__).resolve().parents[1] / "autorelay" / "examples"
DOCUMENTED = (AutoRelayError, TuningDBError)


class Hang(Exception):
    """Raised by the alarm in the input under test."""


@dataclass
class Tally:
    """Inputs tried and distinct findings of one front door."""

    tried: int = 0
    findings: dict[str, str] = field(default_factory=dict)  # signature -> a repro (repr, cut)

    def check(self, run: Callable[[], object], shown: object) -> None:
        """Run one input; note it when it raises something undocumented or hangs."""
        self.tried += 1
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            run()
        except DOCUMENTED:
            pass
        except Hang:
            self.findings.setdefault("hang", repr(shown)[:300])
        except Exception as e:  # the finding: anything else out of a front door
            frame = traceback.extract_tb(e.__traceback__)[-1]
            sig = f"{type(e).__name__} at {Path(frame.filename).name}:{frame.lineno}"
            self.findings.setdefault(sig, f"{repr(shown)[:300]} -> {str(e)[:200]}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)


def _alarm(*_: object) -> None:
    raise Hang()


# ---- mutations (drawn by Hypothesis) ----------------------------------------------------------


def mutated(seeds: list, alphabet: st.SearchStrategy) -> st.SearchStrategy:
    """A seed (str or bytes) with a few edits: delete, insert, duplicate or replace a span."""

    @st.composite
    def build(draw: st.DrawFn) -> object:
        s = draw(st.sampled_from(seeds))
        for _ in range(draw(st.integers(0, 6))):
            n = len(s)
            i = draw(st.integers(0, n))
            j = min(n, i + draw(st.integers(0, 16)))
            op = draw(st.sampled_from(["delete", "insert", "duplicate", "replace", "truncate"]))
            if op == "delete":
                s = s[:i] + s[j:]
            elif op == "insert":
                s = s[:i] + draw(alphabet) + s[i:]
            elif op == "duplicate":
                s = s[:j] + s[i:j] * draw(st.integers(1, 50)) + s[j:]
            elif op == "replace":
                s = s[:i] + draw(alphabet) + s[j:]
            else:
                s = s[:i]
        return s

    return build()


# ---- Relay text --------------------------------------------------------------------------------

RELAY_SEEDS = [p.read_text() for p in sorted(EXAMPLES.glob("*.relay"))] + [
    '#[version = "0.0.5"]\ndef @main(%x: Tensor[(2, 3), float32]) { let %y = add(%x, %x); (%y, %y.0) }',
    '#[version = "0.0.5"]\ndef @f(%a: int32) -> int32 { if (%a) { 1 } else { %a } }',
    '#[version = "0.0.5"]\ntype L[A] { C(A, L[A]), N }\n'
    'def @main(%l: L[int32]) { match (%l) { C(%h, _) => %h, N => 0 } }',
]
RELAY_TOKENS = st.sampled_from(
    ["(", ")", "{", "}", "[", "]", ",", ";", "%x", "@main", "fn", "let", "=", "if", "else", "match", "=>",
     "Tensor[(1, 2), float32]", "meta[relay.Constant][0]", "-1", "1e999", "?", "nn.conv2d", "add",
     ".0", "\n", "\"", "#[", "/*", "//", "\x00", "é", "(((((((((((", "9" * 40]
) | st.text(max_size=8)


def relay_retyped(seeds: list[str]) -> st.SearchStrategy:
    """Well-formed programs with wrong types: numbers (shapes, attributes, units) and dtypes swapped,
    so the input gets past the parser and exercises the type checker."""
    import re

    @st.composite
    def build(draw: st.DrawFn) -> str:
        text = draw(st.sampled_from(seeds))
        numbers = list(re.finditer(r"\b\d+\b", text))
        for _ in range(draw(st.integers(1, 4))):
            if numbers and draw(st.booleans()):
                m = draw(st.sampled_from(numbers))
                value = str(draw(st.integers(0, 2**31) | st.integers(0, 9)))
                text = text[: m.start()] + value.rjust(len(m.group()), " ")[-len(m.group()):] + text[m.end():]
            else:
                old, new = draw(st.sampled_from(["float32", "int32", "bool", "float16", "int8"])), draw(
                    st.sampled_from(["float32", "int32", "bool", "float16", "int8", "uint64"]))
                text = text.replace(old, new, 1)
        return text

    return build()


def relay_door(text: str) -> None:
    from autorelay.text_format import parse
    from autorelay.typing import infer_types

    infer_types(parse(text, source="<fuzz>"))


# ---- ONNX --------------------------------------------------------------------------------------


def onnx_seeds() -> list[bytes]:
    """A few small models: a conv with weights, an elementwise graph, a reshape with a shape input."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype("float32"), "w")
    conv = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], strides=[1, 1]),
         helper.make_node("Relu", ["y"], ["z"])], "conv",
        [helper.make_tensor_value_info("x", f, [1, 3, 8, 8])], [helper.make_tensor_value_info("z", f, None)],
        initializer=[w])
    elem = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"]), helper.make_node("Sigmoid", ["c"], ["d"]),
         helper.make_node("MatMul", ["d", "m"], ["e"])], "elem",
        [helper.make_tensor_value_info("a", f, [2, 4]), helper.make_tensor_value_info("b", f, [2, 4])],
        [helper.make_tensor_value_info("e", f, None)],
        initializer=[numpy_helper.from_array(np.eye(4, dtype="float32"), "m")])
    shape = helper.make_graph(
        [helper.make_node("Reshape", ["x", "s"], ["y"]),
         helper.make_node("Transpose", ["y"], ["t"], perm=[1, 0])],
        "shape", [helper.make_tensor_value_info("x", f, [2, 6])],
        [helper.make_tensor_value_info("t", f, None)],
        initializer=[numpy_helper.from_array(np.array([3, 4], dtype="int64"), "s")])
    out = []
    for g in (conv, elem, shape):
        out.append(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]).SerializeToString())
    return out


def onnx_door(data: bytes) -> None:
    import warnings

    from autorelay.frontend import from_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from_onnx(data)


def onnx_structural(seeds: list[bytes]) -> st.SearchStrategy:
    """Valid protobufs with wrong contents: attribute ints, dims, op types and input names changed."""

    @st.composite
    def build(draw: st.DrawFn) -> bytes:
        import onnx

        m = onnx.ModelProto()
        m.ParseFromString(draw(st.sampled_from(seeds)))
        g = m.graph
        big = st.integers(-(2**40), 2**40) | st.integers(-3, 9)
        for _ in range(draw(st.integers(1, 4))):
            what = draw(st.sampled_from(["attr", "dim", "op", "input", "opset", "init_dim", "drop_node"]))
            if what == "attr" and g.node:
                node = draw(st.sampled_from(list(g.node)))
                for a in node.attribute:
                    for k in range(len(a.ints)):
                        a.ints[k] = draw(big)
            elif what == "dim" and g.input:
                vi = draw(st.sampled_from(list(g.input)))
                for d in vi.type.tensor_type.shape.dim:
                    d.dim_value = max(0, draw(big))
            elif what == "op" and g.node:
                draw(st.sampled_from(list(g.node))).op_type = draw(st.sampled_from(
                    ["Conv", "Add", "Relu", "Reshape", "Gemm", "Concat", "Slice", "Pad", "Resize", "Nope"]))
            elif what == "input" and g.node:
                node = draw(st.sampled_from(list(g.node)))
                if node.input:
                    k = draw(st.integers(0, len(node.input) - 1))
                    node.input[k] = draw(st.sampled_from(["x", "", "zz"]))
            elif what == "opset":
                m.opset_import[0].version = draw(st.integers(-2, 30))
            elif what == "init_dim" and g.initializer:
                t = draw(st.sampled_from(list(g.initializer)))
                if t.dims:
                    t.dims[draw(st.integers(0, len(t.dims) - 1))] = draw(big)
            elif what == "drop_node" and g.node:
                del g.node[draw(st.integers(0, len(g.node) - 1))]
        return m.SerializeToString()

    return build()


# ---- JSONL -------------------------------------------------------------------------------------


def jsonl_seed() -> str:
    import tuning_db

    db = tuning_db.open("sqlite://")
    db.record("dense-16", "llvm -mcpu=x", {"template": "dense", "knobs": {"tile": 4}}, [1e-3, 1.1e-3],
              workload={"family": "dense", "shapes": [[16, 32], [24, 32]], "dtypes": ["float32"] * 2})
    db.record("dense-16", "llvm -mcpu=x", {"template": "dense", "knobs": {"tile": 8}}, [], error="timeout",
              error_kind="timeout")
    with tempfile.TemporaryDirectory() as d:
        db.export_jsonl(Path(d) / "x.jsonl")
        text = (Path(d) / "x.jsonl").read_text()
    db.close()
    return text


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=10),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=6)


def jsonl_field_edits(seed: str) -> st.SearchStrategy:
    """The seed's lines with some fields replaced by arbitrary JSON values or dropped."""

    @st.composite
    def build(draw: st.DrawFn) -> str:
        lines = [json.loads(x) for x in seed.splitlines() if x.strip()]
        for _ in range(draw(st.integers(1, 4))):
            row = draw(st.sampled_from(lines))
            key = draw(st.sampled_from(sorted(row)))
            if draw(st.booleans()):
                row[key] = draw(JSON_VALUES)
            else:
                row.pop(key)
        return "\n".join(json.dumps(x, allow_nan=True) for x in lines) + "\n"

    return build()


def jsonl_door(text: str | bytes, folder: str) -> None:
    import tuning_db

    path = Path(folder) / "in.jsonl"
    path.write_bytes(text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text)
    with tuning_db.open("sqlite://") as db:
        db.import_jsonl(path)  # bad lines reported, good ones imported
    with tuning_db.open("sqlite://") as db:
        db.import_jsonl(path, strict=True)  # any bad line: JSONLImportError, nothing imported


# ---- running -----------------------------------------------------------------------------------


def doors() -> dict[str, tuple[st.SearchStrategy, Callable[[object], None]]]:
    """name -> (inputs, door)."""
    byte_edit = st.binary(max_size=8)
    folder = tempfile.mkdtemp(prefix="autorelay-fuzz-")
    ox = onnx_seeds()
    seed = jsonl_seed()
    return {
        "relay text": (mutated(RELAY_SEEDS, RELAY_TOKENS) | relay_retyped(RELAY_SEEDS)
                       | st.text(max_size=200), relay_door),
        "onnx": (mutated(ox, byte_edit) | onnx_structural(ox) | st.binary(max_size=200), onnx_door),
        "jsonl": (mutated([seed], st.text(max_size=8)) | jsonl_field_edits(seed)
                  | st.binary(max_size=200), lambda x: jsonl_door(x, folder)),
    }


def fuzz(name: str, strategy: st.SearchStrategy, door: Callable[[object], None], tally: Tally,
         examples: int, seed: int | None = None) -> None:
    """Run `examples` Hypothesis-drawn inputs through `door`, noting findings in `tally`."""

    @settings(max_examples=examples, deadline=None, database=None, derandomize=seed is None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def one(x: object) -> None:
        tally.check(lambda: door(x), x)

    if seed is not None:
        from hypothesis import seed as with_seed

        one = with_seed(seed)(one)
    one()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=1.0, help="how long to fuzz, all doors together")
    ap.add_argument("--batch", type=int, default=200, help="inputs per Hypothesis run")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.batch < 1:
        ap.error("--minutes must be > 0 and --batch >= 1")
    tallies = {name: Tally() for name in doors()}
    table = doors()
    end = time.monotonic() + args.minutes * 60
    round_ = 0
    while time.monotonic() < end:
        for name, (strategy, door) in table.items():
            fuzz(name, strategy, door, tallies[name], args.batch, seed=round_)
            if time.monotonic() >= end:
                break
        round_ += 1
        print(f"[{args.minutes * 60 - (end - time.monotonic()):.0f} s] "
              + ", ".join(f"{n}: {t.tried} inputs, {len(t.findings)} findings" for n, t in tallies.items()),
              flush=True)
    out = io.StringIO()
    for name, t in tallies.items():
        print(f"{name}: {t.tried} inputs tried, {len(t.findings)} distinct findings", file=out)
        for sig, repro in t.findings.items():
            print(f"  {sig}\n    e.g. {repro}", file=out)
    print(out.getvalue(), end="")
    return 1 if any(t.findings for t in tallies.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
