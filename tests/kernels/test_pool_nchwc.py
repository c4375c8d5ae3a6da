"""Windowed pooling of NCHW[x]c data (`pool2d_nchwc`): which kernels the template takes, and every
sampled config of its space against a naive loop over the unblocked data (padding, ceil mode,
dilation, uneven windows and strides; blocks of one and two vectors; AVX2 and AVX-512)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from host_widths import run_here_or_skip
from pool_oracle import naive_pool

from autorelay.codegen import resolve_target
from autorelay.ir.types import TensorType
from autorelay.kernel import compile_kernel
from autorelay.op.check import infer_op_type
from autorelay.op.pool_compute import pool_compute
from autorelay.op.registry import get
from autorelay.schedule.templates import template_choices, template_for
from autorelay.te import tensor as te

pytestmark = pytest.mark.cpu

WIDTHS = {"avx2": "llvm -mcpu=znver3 -threads=2", "avx512": "llvm -mcpu=znver5 -threads=2"}
# (window, strides, padding, dilation, ceil mode, count_include_pad)
CASES = [
    ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False, False),  # Inception's pool branch
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False, True),  # ResNet's stem
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False, False),  # VGG's
    ((3, 2), (2, 3), (1, 0, 0, 1), (1, 1), True, False),
    ((2, 2), (1, 2), (0, 0, 0, 0), (2, 1), True, False),
]


def blocked(x: np.ndarray, b: int) -> np.ndarray:
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def pool_def(kind: str, shape: tuple[int, ...], case, block: int | None, dtype: str = "float32"):
    """The op's compute for an input of NCHW `shape`, in blocks of `block` channels (None: NCHW)."""
    k, s, pad, dil, ceil, include_pad = case
    attrs = dict(pool_size=k, strides=s, padding=pad, dilation=dil, ceil_mode=ceil,
                 layout=f"NCHW{block}c" if block else "NCHW")
    if kind == "avg":
        attrs["count_include_pad"] = include_pad
    name = f"nn.{kind}_pool2d"
    n, c, h, w = shape
    in_shape = (n, c // block, h, w, block) if block else shape
    out_type = infer_op_type(name, [TensorType(in_shape, dtype)], **attrs)
    x = te.placeholder(in_shape, dtype=dtype, name="X")
    out = pool_compute(kind == "avg")([x], get(name).make_attrs(attrs), out_type)
    return te.make_def([x], out, f"{kind}pool")


def sampled_configs(tmpl, cdef, target, n: int = 6):
    space = tmpl.space(cdef, target)
    idx = list(range(space.size))
    random.Random(0).shuffle(idx)
    return [tmpl.default(cdef, target), *(space.get(i) for i in idx[:n])]


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", CASES)
def test_blocked_pooling_matches_the_naive_loop_under_sampled_configs(case, kind, block, width):
    k, s, pad, dil, ceil, include_pad = case
    if kind == "avg" and dil != (1, 1):
        pytest.skip("average pooling has no dilated compute")
    target = resolve_target(WIDTHS[width])
    shape = (1, 2 * block, 9, 11)
    cdef = pool_def(kind, shape, case, block)
    tmpl = template_for(cdef)
    assert tmpl.name == "pool2d_nchwc"
    kernels = [compile_kernel(cdef, cfg, target) for cfg in sampled_configs(tmpl, cdef, target)]
    run_here_or_skip(target)
    x = np.random.default_rng(3).standard_normal(shape).astype("float32")
    want = blocked(naive_pool(x, kind, k, s, pad, dil, ceil, include_pad).astype("float32"), block)
    for kern in kernels:
        np.testing.assert_allclose(kern.run(blocked(x, block)), want, rtol=1e-5, atol=1e-6)


def test_which_pooling_kernels_the_template_takes():
    """Float windows of blocked data only: NCHW pooling and integer max pooling stay with the
    generic reduction template, which no longer offers itself for blocked float windows."""
    shape, case = (1, 16, 9, 9), CASES[0]
    assert template_choices(pool_def("max", shape, case, 8)) == ["pool2d_nchwc"]
    assert template_for(pool_def("max", shape, case, None)).name == "reduction"
    assert template_for(pool_def("max", shape, case, 8, "int8")).name == "reduction"


def test_a_fused_epilogue_after_the_pooling_is_applied_on_the_way_out():
    """Relay's rules fuse elementwise consumers into a pooling: the kernel's output is then the
    epilogue (here a per-channel shift and a ReLU), the pooling its reduction."""
    from autorelay.te import expr as E

    target = resolve_target(WIDTHS["avx2"])
    case = CASES[1]
    inner = pool_def("avg", (1, 16, 9, 11), case, 8)
    pooled = inner.output
    shift = te.placeholder((1, 2, 1, 1, 8), name="B")
    zero = E.const(0.0, "float32")

    def relu(n, c, y, x, v):
        return E.maximum(pooled[n, c, y, x, v] + shift[n, c, 0, 0, v], zero)

    out = te.compute(pooled.shape, relu, name="relu")
    cdef = te.make_def([*inner.inputs, shift], out, "avgpool_relu")
    tmpl = template_for(cdef)
    assert tmpl.name == "pool2d_nchwc"
    kernels = [compile_kernel(cdef, cfg, target) for cfg in sampled_configs(tmpl, cdef, target, 3)]
    run_here_or_skip(target)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 16, 9, 11)).astype("float32")
    b = rng.standard_normal((1, 16, 1, 1)).astype("float32")
    k, s, pad, dil, ceil, include_pad = case
    want = np.maximum(naive_pool(x, "avg", k, s, pad, dil, ceil, include_pad) + b, 0).astype("float32")
    for kern in kernels:
        got = kern.run(blocked(x, 8), blocked(b, 8))
        np.testing.assert_allclose(got, blocked(want, 8), rtol=1e-5, atol=1e-6)
