"""Dynamic ops (`dyn.reshape`, `dyn.strided_slice`, `dyn.pad`): references against NumPy, type
relations (rank known, extents `?`, errors naming op and argument), ops after them type-checking
with `?` extents, and the VM's specialising kernel (compiled per shape, cached, LRU-bounded)."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.errors import TypeCheckError
from autorelay.ir.expr import Function, Tuple, Var, const
from autorelay.ir.types import AnyDim, SymDim, TensorType
from autorelay.op.check import infer_op_type, run_op
from autorelay.op.dynamic import DynamicValueError
from autorelay.op.registry import call
from autorelay.runtime.vm.specializing_kernel import SpecializingKernel, specialize
from autorelay.typing.module import infer_expr

Q = AnyDim()
rng = np.random.default_rng(5)


def tt(*shape, dtype="float32"):
    return TensorType(shape, dtype)


def i64(*v):
    return np.array(v, dtype="int64")


# ---- references ---------------------------------------------------------------------------


@pytest.mark.parametrize("shape, target, want", [
    ((2, 3, 4), (4, 6), (4, 6)),
    ((2, 3, 4), (0, -1), (2, 12)),
    ((2, 3, 4), (-1,), (24,)),
    ((2, 0, 4), (0, 0, -1), None),  # -1 next to a zero extent cannot be inferred
])
def test_reshape_reference(shape, target, want):
    x = rng.standard_normal(shape).astype("float32")
    if want is None:
        with pytest.raises(DynamicValueError, match=r"dyn\.reshape: cannot infer -1"):
            run_op("dyn.reshape", x, i64(*target))
        return
    np.testing.assert_array_equal(run_op("dyn.reshape", x, i64(*target)), x.reshape(want))


def test_reshape_reference_allowzero():
    x = np.zeros((0, 3), "float32")
    assert run_op("dyn.reshape", x, i64(3, 0), allowzero=True).shape == (3, 0)


def _onnx_slice(x, starts, ends, steps):
    """ONNX Slice written out per element (the spec's clamping rules), as an independent oracle."""
    idx = []
    for d, b, e, s in zip(x.shape, starts, ends, steps):
        b, e = b + d if b < 0 else b, e + d if e < 0 else e
        if s > 0:
            b, e = min(max(b, 0), d), min(max(e, 0), d)
            idx.append(list(range(b, e, s)))
        else:
            b, e = min(max(b, -1), d - 1), min(max(e, -1), d - 1)
            idx.append(list(range(b, e, s)))
    return x[np.ix_(*[np.array(i, dtype=int) for i in idx])]


@pytest.mark.parametrize("starts, ends, steps", [
    ((1, -3), (100, -1), (1, 1)),
    ((-1, 4), (-100, -7), (-1, -2)),
    ((3, 0), (-5, 5), (-2, 3)),
    ((0, 10), (2, 20), (2, 1)),
    ((-9, 2), (2**63 - 1, -2**63), (1, -1)),
])
def test_strided_slice_reference(starts, ends, steps):
    x = np.arange(20, dtype="float32").reshape(4, 5)
    got = run_op("dyn.strided_slice", x, i64(*starts), i64(*ends), i64(*steps))
    np.testing.assert_array_equal(got, _onnx_slice(x, starts, ends, steps))


def test_strided_slice_zero_step():
    with pytest.raises(DynamicValueError, match="step 0 on axis 1"):
        run_op("dyn.strided_slice", np.zeros((2, 3)), i64(0, 0), i64(2, 3), i64(1, 0))


@pytest.mark.parametrize("pads, mode", [
    ((1, 0, 2, 3), "constant"), ((0, 2, 1, 0), "edge"), ((1, 1, 1, 1), "reflect"),
    ((-1, 1, 0, -2), "constant"),
])
def test_pad_reference(pads, mode):
    x = rng.standard_normal((3, 4)).astype("float32")
    got = run_op("dyn.pad", x, i64(*pads), np.array(2.5, "float32"), pad_mode=mode)
    width = [(max(pads[0], 0), max(pads[2], 0)), (max(pads[1], 0), max(pads[3], 0))]
    kw = {"constant_values": 2.5} if mode == "constant" else {}
    want = np.pad(x, width, mode=mode, **kw)
    rows = slice(max(-pads[0], 0), want.shape[0] - max(-pads[2], 0))
    want = want[rows, max(-pads[1], 0): want.shape[1] - max(-pads[3], 0)]
    np.testing.assert_array_equal(got, want)


# ---- type relations --------------------------------------------------------------------------


def test_types_keep_the_rank():
    assert infer_op_type("dyn.reshape", [tt(2, 3), tt(3, dtype="int64")]) == tt(Q, Q, Q)
    assert infer_op_type("dyn.reshape", [tt(2, 3), tt(1, dtype="int32")]) == tt(6)  # one extent: static
    assert infer_op_type("dyn.strided_slice", [tt(2, 3)] + [tt(2, dtype="int64")] * 3) == tt(Q, Q)
    assert infer_op_type("dyn.pad", [tt(2, 3), tt(4, dtype="int64"), tt()]) == tt(Q, Q)


@pytest.mark.parametrize("name, args, pattern", [
    ("dyn.reshape", [tt(2, 3), tt(2, 1, dtype="int64")], r"dyn.reshape: argument shape must be a 1-D int"),
    ("dyn.reshape", [tt(2, 3), tt(2)], r"dyn.reshape: argument shape .*, got .*float32"),
    ("dyn.reshape", [tt(2, 3), tt(SymDim("k"), dtype="int64")], r"argument shape must have a static"),
    ("dyn.strided_slice", [tt(2, 3), tt(2, dtype="int64"), tt(1, dtype="int64"), tt(2, dtype="int64")],
     r"dyn.strided_slice: argument end must have 2 entries"),
    ("dyn.pad", [tt(2, 3), tt(2, dtype="int64"), tt()], r"dyn.pad: argument pads must have 4 entries"),
    ("dyn.pad", [tt(2, 3), tt(4, dtype="int64"), tt(dtype="int32")], r"dyn.pad: pad_value must be a float32"),
])
def test_type_errors_name_op_and_argument(name, args, pattern):
    with pytest.raises(TypeCheckError, match=pattern):
        infer_op_type(name, args)


def test_ops_after_dynamic_extents_type_check():
    x = tt(Q, Q)
    assert infer_op_type("add", [x, tt(1, 4)]) == tt(Q, 4)
    assert infer_op_type("exp", [x]) == x
    assert infer_op_type("nn.dense", [tt(Q, 4), tt(5, 4)]) == tt(Q, 5)
    out = infer_op_type("nn.conv2d", [tt(1, 3, Q, Q), tt(8, 3, 3, 3)], padding=(1, 1))
    assert out.shape[:2] == (1, 8) and out.ndim == 4


# ---- the specialising kernel ------------------------------------------------------------------


def _slice_then_exp():
    x = Var("x", tt(4, 5))
    b, e, s = (Var(n, tt(2, dtype="int64")) for n in "bes")
    y = call("exp", call("dyn.strided_slice", x, b, e, s))
    return Function((x, b, e, s), y)


def test_specialize_makes_the_function_static():
    fn = _slice_then_exp()
    infer_expr(fn)
    static = specialize(fn, [np.zeros((4, 5), "float32"), i64(1, 0), i64(3, 5), i64(1, 2)])
    assert static.body.checked_type == tt(2, 3)
    assert "dyn." not in static.astext()


def test_cache_hits_lru_bound_and_growth():
    x = Var("x", tt(Q, 3))
    prim = Function((x,), call("exp", x))
    infer_expr(prim)
    compiled: list[int] = []

    def compile_static(f):
        compiled.append(f.params[0].type_annotation.shape[0])
        return (lambda a: np.exp(a)), "default"

    def run(rows):
        for n in rows:
            a = rng.standard_normal((n, 3)).astype("float32")
            np.testing.assert_allclose(k(a), np.exp(a))

    k = SpecializingKernel(prim, compile_static, max_entries=2, most_entries=4)
    run([1, 2, 1, 3, 4])  # 1, 2 compiled; 1 hit; 3 evicts 2, 4 evicts 1
    assert compiled == [1, 2, 3, 4] and len(k.cache) == 2 and k.max_entries == 2
    run([2])  # an evicted shape came back: compiled again, and the cache grows to 4
    assert compiled[4:] == [2] and k.max_entries == 4 and len(k.cache) == 3
    run([3, 4, 2, 1])  # 3, 4, 2 hit; 1 (evicted too) compiled and kept
    assert compiled[5:] == [1] and len(k.cache) == 4 and k.max_entries == 4
    run([5, 6, 7, 8, 1, 2, 3, 4] * 2)  # 8 shapes in turn: the cache stays at its ceiling
    assert k.max_entries == 4 and len(k.cache) == 4 and k.compiled == len(compiled) == 6 + 16
    assert f"{k.compiled} compiled" in k.detail


def test_vm_compiles_each_shape_once():
    fn = _slice_then_exp()
    exe = autorelay.build(fn)
    x = rng.standard_normal((4, 5)).astype("float32")
    for b, e, s in [((0, 0), (4, 5), (1, 1)), ((-1, 4), (-100, 0), (-1, -2)), ((0, 0), (4, 5), (1, 1))]:
        got = exe(x, i64(*b), i64(*e), i64(*s))
        np.testing.assert_allclose(got, np.exp(_onnx_slice(x, b, e, s)), rtol=1e-6)
    # the slice for two value sets, exp for its two result shapes (4, 5) and (4, 3); the repeat: none
    assert sum(k.compiled for k in exe.provider.specializing) == 4
    assert not exe.report.fallbacks


def test_call_sites_of_one_function_share_its_specialisations():
    """Two slices of two inputs by the same run-time bounds: the same primitive functions (equal
    structure and constants) at two call sites, each specialised once per shape, not once per site
    (a run-time NonZero's binary search is 32 rounds of the same four functions)."""
    x, y = Var("x", tt(4, 5)), Var("y", tt(4, 5))
    b, e, s = (Var(n, tt(2, dtype="int64")) for n in "bes")
    first, second = (call("exp", call("dyn.strided_slice", v, b, e, s)) for v in (x, y))
    exe = autorelay.build(Function((x, y, b, e, s), call("add", first, second)))
    xs, ys = rng.standard_normal((2, 4, 5)).astype("float32")
    for bounds in [((0, 0), (4, 5), (1, 1)), ((1, 0), (3, 5), (1, 2)), ((0, 0), (4, 5), (1, 1))]:
        got = exe(xs, ys, *(i64(*v) for v in bounds))
        want = np.exp(_onnx_slice(xs, *bounds)) + np.exp(_onnx_slice(ys, *bounds))
        np.testing.assert_allclose(got, want, rtol=1e-6)
    slices = [k for k in exe.provider.specializing if k.values]  # the kernels reading bounds
    # one slice kernel for both sites, compiled for the two bound values
    assert len(slices) == 1 and slices[0].compiled == 2, [k.detail for k in exe.provider.specializing]
    assert not exe.report.fallbacks


def test_shape_of():
    x = np.zeros((3, 0, 2), "float32")
    np.testing.assert_array_equal(run_op("shape_of", x), np.array(x.shape))
    assert run_op("shape_of", x).dtype == np.int64
    assert infer_op_type("shape_of", [tt(SymDim("n"), Q, 4)]) == tt(3, dtype="int64")


def test_vm_shape_of_and_symbolic_inputs():
    # (n, 4) -> reshape to (2n, 2) through shape_of arithmetic; the kernels specialise per n
    x = Var("x", tt(SymDim("n"), 4))
    n2 = call("multiply", call("strided_slice", call("shape_of", x), begin=(0,), end=(1,)), const(i64(2)))
    target = call("concatenate", Tuple((n2, const(i64(2)))), axis=0)
    y = call("exp", call("dyn.reshape", x, target))
    exe = autorelay.build(Function((x,), y))
    for n in (1, 3, 1):
        a = rng.standard_normal((n, 4)).astype("float32")
        np.testing.assert_allclose(exe(a), np.exp(a.reshape(2 * n, 2)), rtol=1e-6)
    assert not exe.report.fallbacks


def test_broadcast_to_reference_and_type():
    x = rng.standard_normal((3, 1)).astype("float32")
    np.testing.assert_array_equal(run_op("dyn.broadcast_to", x, i64(2, 1, 4)), np.broadcast_to(x, (2, 3, 4)))
    with pytest.raises(DynamicValueError, match=r"dyn\.broadcast_to: shape \[2\] does not broadcast"):
        run_op("dyn.broadcast_to", np.zeros((3,)), i64(2))
    # extents of data other than 1 stay static; 1s and new leading axes become ?
    assert infer_op_type("dyn.broadcast_to", [tt(3, 1), tt(3, dtype="int64")]) == tt(Q, 3, Q)


def test_vm_bad_runtime_value_names_the_op():
    x, s = Var("x", tt(2, 3)), Var("s", tt(2, dtype="int64"))
    exe = autorelay.build(Function((x, s), call("dyn.reshape", x, s)))
    with pytest.raises(DynamicValueError, match=r"dyn\.reshape: reshape of data \(2, 3\) to \[4, 4\]"):
        exe(np.zeros((2, 3), "float32"), i64(4, 4))
    np.testing.assert_array_equal(exe(np.ones((2, 3), "float32"), i64(3, 2)), np.ones((3, 2)))


def test_a_constant_fill_of_a_run_time_shape_compiles_no_kernel():
    """A zero canvas of each box's size (Mask R-CNN's paste loop) is `np.full`, not a kernel
    compiled per size; the fill is a fresh array at every call."""
    s = Var("s", tt(2, dtype="int64"))
    exe = autorelay.build(Function((s,), call("dyn.full", const(np.float32(0.25)), s)))
    first = exe(i64(3, 4))
    np.testing.assert_array_equal(first, np.full((3, 4), 0.25, "float32"))
    first[:] = 7  # the caller owns it
    for shape in [(5, 2), (3, 4)]:
        np.testing.assert_array_equal(exe(i64(*shape)), np.full(shape, 0.25, "float32"))
    (fill,) = exe.provider.specializing
    assert fill.sources == {"no kernel"} and not exe.report.fallbacks


def test_full_reference_and_type():
    got = run_op("dyn.full", np.array(7, "int32"), i64(2, 0, 3))
    assert got.shape == (2, 0, 3) and got.dtype == np.int32
    np.testing.assert_array_equal(run_op("dyn.full", np.array(1.5, "float32"), i64(2)), [1.5, 1.5])
    with pytest.raises(DynamicValueError, match="negative extent"):
        run_op("dyn.full", np.array(0.0), i64(-1))
    assert infer_op_type("dyn.full", [tt(dtype="int32"), tt(2, dtype="int64")]) == tt(Q, Q, dtype="int32")
    with pytest.raises(TypeCheckError, match=r"dyn\.full: fill_value must be a scalar"):
        infer_op_type("dyn.full", [tt(1), tt(2, dtype="int64")])
