"""LLVM code generation and the runtime: explicit vector code, function attributes, the kernel
cache (memory and disk), bound kernels, threads, integer semantics and math functions."""

from __future__ import annotations

import numpy as np
import pytest

from autorelay.codegen import resolve_target
from autorelay.codegen.base import BackendCode
from autorelay.codegen.llvm.emit import emit_module
from autorelay.codegen.llvm.host import host_target
from autorelay.codegen.llvm.jit import clear_memory_cache
from autorelay.kernel import EmitCache, compile_kernel, emit_kernel
from autorelay.schedule import steps as S
from autorelay.schedule.apply import apply
from autorelay.schedule.templates import template_for
from autorelay.target import Target
from autorelay.te import expr as E
from autorelay.te import nn
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu


def _dense(m=24, n=40, k=16):
    a, w = te.placeholder((m, k), name="A"), te.placeholder((n, k), name="W")
    return te.make_def([a, w], nn.dense(a, w), "dense")


def test_vectorized_dense_uses_vector_fma_and_wide_vector_attributes():
    target = host_target()
    kernel = compile_kernel(_dense(), None, target)
    lanes = target.vector_lanes()
    ir = kernel.llvm_ir
    assert f"load <{lanes} x float>" in ir
    assert f"fmul contract <{lanes} x float>" in ir
    assert f'"prefer-vector-width"="{target.vector_bits}"' in ir
    assert f'"target-cpu"="{target.cpu}"' in ir
    assert "ptr noalias" in ir


def test_avx512_targets_ask_for_512_bit_vectors():
    t = Target("sapphirerapids", "+avx2,+avx512f,+fma", 1, "x86_64-unknown-linux-gnu")
    assert t.vector_bits == 512 and t.vector_lanes() == 16 and t.vector_registers == 32
    cdef = _dense(64, 128, 32)
    tmpl = template_for(cdef)
    cfg = tmpl.default(cdef, t)
    assert cfg["tile_m"] * cfg["tile_n_vectors"] + cfg["tile_n_vectors"] + 1 <= 31  # 32 zmm registers
    func, _ = apply(cdef, tmpl.steps(cdef, cfg, t))
    ir, _ = emit_module(func, t, "k")
    assert '"prefer-vector-width"="512" "min-legal-vector-width"="512"' in ir
    assert "fmul contract <16 x float>" in ir


def test_kernel_cache_is_keyed_by_structure():
    target = host_target()
    k1 = compile_kernel(_dense(), None, target)
    k2 = compile_kernel(_dense(), None, target)  # new tensors, same structure
    assert k1.module is k2.module
    other = compile_kernel(_dense(), [S.CacheWrite("dense")], target)
    assert other.module is not k1.module


def test_emitted_code_is_reused_by_key_and_bounded_by_size():
    avx2, avx512 = resolve_target("llvm -mcpu=znver3", 1), resolve_target("llvm -mcpu=skylake-avx512", 1)
    first = emit_kernel(_dense(), None, avx2)
    again = emit_kernel(_dense(), None, avx2)  # new tensors, same structure: emitted once
    assert again.key == first.key and again.code is first.code
    assert emit_module(first.func, avx2, f"k_{first.key[:16]}")[0] == first.code.text  # what it would emit
    wide = emit_kernel(_dense(), None, avx512)
    assert wide.key != first.key and "<16 x float>" in wide.code.text
    assert "<16 x float>" not in first.code.text
    cache = EmitCache(limit=10)  # characters of text: the most recently used are kept
    a, b, c = (BackendCode(text, ()) for text in ("aaaa", "bbbb", "cccc"))
    cache.put("a", a)
    cache.put("b", b)
    assert cache.get("a") is a
    cache.put("c", c)
    assert cache.get("b") is None and cache.get("a") is a and cache.get("c") is c


def test_disk_cache_serves_object_code(tmp_path):
    target = host_target()
    cdef = _dense(8, 8, 8)
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((8, 8), np.float32), rng.standard_normal((8, 8), np.float32)
    first = compile_kernel(cdef, None, target, cache_dir=str(tmp_path))
    assert not first.module.from_disk
    assert list(tmp_path.glob("*.o"))
    clear_memory_cache()
    second = compile_kernel(cdef, None, target, cache_dir=str(tmp_path))
    assert second.module.from_disk
    np.testing.assert_allclose(second.run(a, w), a @ w.T, rtol=1e-5, atol=1e-5)


def test_a_kernel_folder_serves_the_emitted_code_to_a_new_process_unless_the_generator_changed(
        tmp_path, monkeypatch):
    """With a folder, a kernel emitted once is read back by a process that has never emitted it
    (here: the memory caches emptied and the backend's emitter forbidden) and computes the same;
    a folder written by another compiler (fingerprint) or a damaged file is not read: the
    kernel is emitted again and the file rewritten."""
    from autorelay import kernel as kernel_module
    from autorelay import kernel_store
    from autorelay.codegen.llvm.backend import LLVMBackend

    target = host_target()
    rng = np.random.default_rng(0)
    a, w = rng.standard_normal((8, 8), np.float32), rng.standard_normal((8, 8), np.float32)
    first = compile_kernel(_dense(8, 8, 8), None, target, cache_dir=str(tmp_path))
    [filed] = tmp_path.glob("*.ll.json")
    assert filed.name.startswith(first.code.key)
    emitted: list[str] = []
    real_emit = LLVMBackend.emit

    def fresh_process(forbid_emission: bool) -> None:
        monkeypatch.setattr(kernel_module, "_EMITTED", EmitCache(limit=1 << 20))
        clear_memory_cache()

        def emit(self, func, tgt, symbol):
            emitted.append(symbol)
            assert not forbid_emission, "emitted although the folder holds the kernel"
            return real_emit(self, func, tgt, symbol)

        monkeypatch.setattr(LLVMBackend, "emit", emit)

    fresh_process(forbid_emission=True)
    again = compile_kernel(_dense(8, 8, 8), None, target, cache_dir=str(tmp_path))
    assert again.code.code.text == first.code.code.text and again.module.from_disk and not emitted
    np.testing.assert_allclose(again.run(a, w), a.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)

    filed.write_text('{"text": ')  # damaged: emitted again, and filed whole
    fresh_process(forbid_emission=False)
    compile_kernel(_dense(8, 8, 8), None, target, cache_dir=str(tmp_path))
    assert len(emitted) == 1 and kernel_store.load_code(str(tmp_path), first.code.key) == first.code.code

    monkeypatch.setattr(kernel_store, "compiler_fingerprint", lambda: "another-compiler")
    fresh_process(forbid_emission=False)
    compile_kernel(_dense(8, 8, 8), None, target, cache_dir=str(tmp_path))
    assert len(emitted) == 2 and len(list(tmp_path.glob("*.ll.json"))) == 2

    blocked = tmp_path / "a-file"  # a folder that cannot be made: the kernel is built all the same
    blocked.write_text("")
    fresh_process(forbid_emission=False)
    kernel = compile_kernel(_dense(8, 8, 8), None, target, cache_dir=str(blocked))
    np.testing.assert_allclose(kernel.run(a, w), a.astype(np.float64) @ w.T, rtol=1e-5, atol=1e-5)


def test_bound_kernel_reuses_buffers_and_checks_inputs():
    cdef = _dense()
    kernel = compile_kernel(cdef)
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((24, 16), np.float32), rng.standard_normal((40, 16), np.float32)
    expect = a @ w.T
    bound = kernel.bind(a, w)
    out = bound.outputs[0]
    bound()
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)
    assert bound.inputs[0] is a  # no re-layout needed: bound without a copy
    a[...] = 0  # so the next call sees the new values through the cached address
    bound()
    assert np.all(out == 0)
    with pytest.raises(ValueError, match=r"input A must be float32\[24, 16\]"):
        kernel.run(a[:3], w)
    with pytest.raises(ValueError, match="expected 2 inputs"):
        kernel.run(a)


def test_integer_floor_division_and_modulo_follow_python():
    x = te.placeholder((23,), "int64", name="X")
    q = te.compute((23,), lambda i: x[i] // 3 * 100 + x[i] % 3 + (i - 11) // 4, name="Q")
    data = np.arange(-11, 12, dtype=np.int64)
    for cfg in ([], [S.Split("Q", "i", 4), S.Vectorize("Q", "i_i")]):
        got = compile_kernel(te.make_def([x], q), cfg).run(data)
        np.testing.assert_array_equal(got, data // 3 * 100 + data % 3 + (np.arange(23) - 11) // 4)


def test_an_int32_value_indexes_a_tensor():
    """A read whose index is an int32 value (an int32 index tensor, an int32 reduction) is widened
    to the 64-bit offset arithmetic: it used to be an LLVM type error."""
    x, ind = te.placeholder((6, 4), "float32", "x"), te.placeholder((5,), "int32", "ind")
    y = te.compute((5, 4), lambda i, j: x[ind[i], j] * 2.0, name="y")
    k = te.reduce_axis(6, "k")
    first = te.compute((4,), lambda j: te.min(E.select(x[k.var, j] > 0.0, E.cast(k.var, "int32"),
                                                        E.const(5, "int32")), k), name="first")
    z = te.compute((4,), lambda j: x[first[j], j], name="z")
    xs = np.random.default_rng(0).standard_normal((6, 4)).astype("float32")
    idx = np.array([5, 0, 3, 3, 1], "int32")
    np.testing.assert_array_equal(compile_kernel(te.make_def([x, ind], y), None).run(xs, idx), xs[idx] * 2)
    hit = np.where((xs > 0).any(0), (xs > 0).argmax(0), 5)
    np.testing.assert_array_equal(compile_kernel(te.make_def([x], z), None).run(xs), xs[hit, np.arange(4)])


def test_math_functions_and_casts_scalar_and_vector():
    x = te.placeholder((3, 21), name="X")
    out = te.compute(
        (3, 21),
        lambda i, j: (
            E.call("sqrt", E.call("abs", x[i, j]))
            + E.call("log", E.call("exp", x[i, j] * 0.5) + 1.0)
            + E.call("erf", x[i, j])
            + E.cast(E.cast(x[i, j] * 4.0, "int32"), "float32")
            + E.select(x[i, j] > 0.25, E.call("floor", x[i, j]), E.call("tanh", x[i, j]))
        ),
        name="Y",
    )
    import math

    v = np.random.default_rng(2).standard_normal((3, 21)).astype(np.float32)
    erf = np.vectorize(math.erf)(v.astype(np.float64))
    expect = (
        np.sqrt(np.abs(v))
        + np.log(np.exp(v * 0.5) + 1)
        + erf
        + np.trunc(v * 4)
        + np.where(v > 0.25, np.floor(v), np.tanh(v))
    )
    for cfg in ([], [S.Split("Y", "j", 8), S.Vectorize("Y", "j_i")]):
        got = compile_kernel(te.make_def([x], out), cfg).run(v)
        np.testing.assert_allclose(got, expect, rtol=1e-5, atol=1e-5)


def test_ragged_vector_tail_takes_the_scalar_path():
    x = te.placeholder((5, 13), name="X")
    y = te.compute((5, 13), lambda i, j: x[i, j] * 2.0, name="Y")
    steps = [S.Split("Y", "j", 8), S.Vectorize("Y", "j_i")]
    kernel = compile_kernel(te.make_def([x], y), steps)
    assert "tail" in kernel.llvm_ir  # the lane guard is tested at the first and last lane
    v = np.random.default_rng(3).standard_normal((5, 13)).astype(np.float32)
    np.testing.assert_array_equal(kernel.run(v), v * 2)


def test_ragged_tile_guards_are_tested_once_per_tile():
    """Guards on a ragged tile that depend on loops inside the tile (unrolled vectors) are hoisted:
    full tiles run a guard-free copy, the ragged one the guarded copy; both give the answer."""
    x = te.placeholder((5, 37), name="X")
    y = te.compute((5, 37), lambda i, j: x[i, j] * 2.0 + 1.0, name="Y")
    steps = [S.Split("Y", "j", 16), S.Split("Y", "j_i", 8), S.Unroll("Y", "j_i_o"), S.Vectorize("Y", "j_i_i")]
    kernel = compile_kernel(te.make_def([x], y), steps)
    assert "full" in kernel.llvm_ir and "ragged" in kernel.llvm_ir
    data = np.random.default_rng(0).standard_normal((5, 37)).astype(np.float32)
    np.testing.assert_allclose(kernel.run(data), data * 2 + 1, rtol=1e-6)


def test_lanes_reading_fixed_offsets_load_one_window_and_shuffle():
    """A vector load whose lanes read constant offsets from lane 0 within one vector's span (each
    lane taking an element of its group, or a reversed block) is one load and a shuffle, masked to
    the span the lanes read (the last row's window would run past the buffer otherwise); a wider
    spread is read lane by lane. All three against NumPy."""
    x = te.placeholder((3, 16), name="X")
    cases = {
        "group": (lambda i, j: x[i, j // 4 * 4 + 2], lambda v: v[:, np.arange(16) // 4 * 4 + 2]),
        "reversed": (lambda i, j: x[i, j // 8 * 8 + 7 - j % 8], lambda v: v[:, np.arange(16) // 8 * 8 + 7
                                                                             - np.arange(16) % 8]),
        "spread": (lambda i, j: x[i, j * 5 % 16], lambda v: v[:, np.arange(16) * 5 % 16]),
    }
    data = np.random.default_rng(4).standard_normal((3, 16)).astype(np.float32)
    ir = {}
    for name, (body, oracle) in cases.items():
        y = te.compute((3, 16), body, name="Y")
        kernel = compile_kernel(te.make_def([x], y), [S.Split("Y", "j", 8), S.Vectorize("Y", "j_i")])
        np.testing.assert_array_equal(kernel.run(data), oracle(data), err_msg=name)
        ir[name] = kernel.llvm_ir
    assert "llvm.masked.load.v8f32" in ir["group"] and "insertelement" not in ir["group"]
    assert "masked.load" not in ir["reversed"] and "insertelement" not in ir["reversed"]
    assert "i32 7, i32 6, i32 5" in ir["reversed"]
    assert "masked.load" not in ir["spread"] and "insertelement" in ir["spread"]  # lane by lane


def test_a_block_reuses_equal_values_but_reloads_what_it_stores_to():
    """The emitter numbers values within a basic block: a repeated computation or a repeated load
    of a buffer that nothing in the function stores to is emitted once; a load of a buffer that the
    function stores to is emitted again after the store (and reads the stored value)."""
    from autorelay.codegen.llvm.jit import compile_ir
    from autorelay.tir.nodes import Buffer, For, PrimFunc, Seq, Store

    a, c, out = Buffer("A", (2,), "float32"), Buffer("C", (1,), "float32"), Buffer("O", (3,), "float32")
    i = E.Var("i")

    def at(k):
        return E.Const(k, "int64")

    def load(buf, k):
        return E.Load(buf, E.Bin("add", i, at(k), "int64"), "float32")

    body = Seq((
        Store(out, at(0), E.Bin("add", load(a, 0), load(c, 0), "float32")),
        Store(a, at(0), E.Bin("mul", load(c, 0), E.Const(2.0, "float32"), "float32")),
        Store(out, at(1), E.Bin("add", load(a, 0), load(c, 0), "float32")),
        Store(out, at(2), E.Bin("add", load(a, 1), load(c, 0), "float32")),
    ))
    func = PrimFunc("f", (a, c, out), (), For(i, 1, body))
    target = host_target()
    text, segs = emit_module(func, target, "k_numbering")
    assert text.count("getelementptr inbounds float, ptr %b1") == 1  # C[i]: one address, one load
    assert len([ln for ln in text.splitlines() if " = load float" in ln]) == 4  # A[i] twice, A[i+1], C[i]
    module = compile_ir(text, segs, 3, target, "k_numbering")
    arrays = [np.array([1.0, 5.0], np.float32), np.array([3.0], np.float32), np.zeros(3, np.float32)]
    module.functions[0][0](*(x.ctypes.data for x in arrays), 0, 1)
    np.testing.assert_array_equal(arrays[2], [4.0, 9.0, 8.0])


def test_a_node_shared_across_a_store_is_read_again_and_a_pure_one_is_walked_once():
    """One expression node used on both sides of a store to the buffer it reads is loaded again (the
    block's memo of node values keeps no value that an unnumbered load made), while a node that
    reads only a buffer nothing stores to is emitted once however many expressions share it."""
    from autorelay.codegen.llvm import exprs
    from autorelay.codegen.llvm.jit import compile_ir
    from autorelay.tir.nodes import Buffer, For, PrimFunc, Seq, Store

    a, c, out = Buffer("A", (1,), "float32"), Buffer("C", (1,), "float32"), Buffer("O", (2,), "float32")
    i = E.Var("i")
    zero = E.Const(0, "int64")
    pure = E.Bin("mul", E.Load(c, i, "float32"), E.Load(c, i, "float32"), "float32")  # C[i]^2
    shared = E.Bin("add", E.Load(a, i, "float32"), pure, "float32")  # A[i] + C[i]^2, one node
    body = Seq((
        Store(out, zero, shared),
        Store(a, zero, E.Bin("mul", pure, E.Const(2.0, "float32"), "float32")),
        Store(out, E.Const(1, "int64"), shared),
    ))
    func = PrimFunc("f", (a, c, out), (), For(i, 1, body))
    walked: list[int] = []
    original = exprs.ExprEmitter._expr

    def counting(self, e):
        walked.append(id(e))
        return original(self, e)

    exprs.ExprEmitter._expr = counting
    try:
        text, segs = emit_module(func, host_target(), "k_node_memo")
    finally:
        exprs.ExprEmitter._expr = original
    assert walked.count(id(pure)) == 1 and walked.count(id(shared)) == 2
    assert len([ln for ln in text.splitlines() if " = load float" in ln]) == 3  # C[i] once, A[i] twice
    module = compile_ir(text, segs, 3, host_target(), "k_node_memo")
    arrays = [np.array([1.0], np.float32), np.array([3.0], np.float32), np.zeros(2, np.float32)]
    module.functions[0][0](*(x.ctypes.data for x in arrays), 0, 1)
    np.testing.assert_array_equal(arrays[2], [10.0, 27.0])  # 1 + 9, then A = 18: 18 + 9


@pytest.mark.parametrize("cpu", ["skylake-avx512", "znver3"])
def test_remembering_node_values_emits_the_ir_walking_every_path_emits(cpu, monkeypatch):
    """A Winograd kernel (whose transforms share subtrees among their sums) and a padded direct
    convolution (clamped vector loads), at sampled configs: the same LLVM IR with the block's memo
    of node values as without it."""
    import random

    from autorelay.codegen.llvm import exprs
    from autorelay.te import winograd as W

    target = resolve_target(f"llvm -mcpu={cpu}", 2)
    xd, ud = te.placeholder((1, 8, 10, 10), name="X"), te.placeholder((36, 16, 8), name="U")
    wino = te.make_def([xd, ud], W.conv2d_winograd_nchw(xd, ud, 1), "winograd")
    xc, wc = te.placeholder((1, 8, 10, 10), name="X"), te.placeholder((16, 8, 3, 3), name="Wt")
    direct = te.make_def([xc, wc], nn.conv2d_nchw(xc, wc, (1, 1), (1, 1)), "conv")
    pick = random.Random(5)
    for cdef in (wino, direct):
        tmpl = template_for(cdef)
        space = tmpl.space(cdef, target)
        for cfg in [tmpl.default(cdef, target), *(space.get(pick.randrange(len(space))) for _ in range(2))]:
            func = apply(cdef, tmpl.steps(cdef, cfg, target))[0]
            remembered = emit_module(func, target, "k")[0]
            with monkeypatch.context() as m:
                m.setattr(exprs.ExprEmitter, "_node_value", lambda self, e, emit: emit(e))
                walked = emit_module(func, target, "k")[0]
            assert remembered == walked, cfg.as_dict()


def test_constant_bitwise_index_arithmetic_folds_and_wraps():
    """The loop IR simplifier folds integer ops of constants, shifts and bitwise ops included,
    wrapping as the machine does (a folded constant must fit its LLVM type)."""
    from autorelay.te.traverse import wrap_int

    x = te.placeholder((4,), "int32", name="X")
    one, three = E.const(1, "int64"), E.const(3, "int64")
    y = te.compute((4,), lambda i: x[E.bitwise("shl", one, one) + i * 0]
                   + E.bitwise("bitxor", E.const(5, "int32"), E.const(3, "int32")), name="Y")
    got = compile_kernel(te.make_def([x], y), None, None).run(np.arange(4, dtype="int32"))
    np.testing.assert_array_equal(got, [2 + 6] * 4)
    assert E.bitwise("bitand", three, one).dtype == "int64"
    assert [wrap_int(v, "int32") for v in (2**31, -2**31 - 1, 7)] == [-2**31, 2**31 - 1, 7]
    assert [wrap_int(v, "uint8") for v in (256, -1)] == [0, 255]
