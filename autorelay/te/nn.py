"""Tensor computes of the common operators (the bodies an OpDef's `compute` field points to).

Each returns an output Tensor whose tag selects its schedule template. Padding reads the input at
clamped indices under a select, so an inlined pad never loads out of bounds even when both arms
of the select are evaluated.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

from autorelay.te import expr as E
from autorelay.te import tensor as te
from autorelay.te.tensor import Tensor


def _pair(v: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(v, int):
        return v, v
    v = tuple(v)
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _pad4(p: int | Sequence[int]) -> tuple[int, int, int, int]:
    """Relay padding: one value, (h, w) or (top, left, bottom, right)."""
    if isinstance(p, int):
        return p, p, p, p
    p = tuple(p)
    if len(p) == 1:
        return p[0], p[0], p[0], p[0]
    if len(p) == 2:
        return p[0], p[1], p[0], p[1]
    return p[0], p[1], p[2], p[3]


def pad(
    x: Tensor, before: Sequence[int], after: Sequence[int], value: float = 0.0, name: str = "pad"
) -> Tensor:
    if all(b == 0 for b in before) and all(a == 0 for a in after):
        return x
    shape = [s + b + a for s, b, a in zip(x.shape, before, after)]

    def body(*idx: E.Expr) -> E.Expr:
        conds, src = [], []
        for i, s, b, a in zip(idx, x.shape, before, after):
            if b == 0 and a == 0:
                src.append(i)
                continue
            j = i - b
            conds.append((j >= 0) & (j < s))
            src.append(E.maximum(E.minimum(j, s - 1), 0))
        return E.select(E.all_of(*conds), x[tuple(src)], E.as_expr(value, x.dtype))

    # the amounts and the padded tensor, for a kernel that reads an input already stored with a
    # zero border (`autorelay.te.halo`) to drop this stage; `source` tells whether a later
    # inlining made the stage read something else (a re-layout's input, an activation's)
    attrs = {"before": tuple(int(b) for b in before), "after": tuple(int(a) for a in after), "value": value,
             "source": x.name}
    return te.compute(shape, body, name=name, tag="pad", attrs=attrs)


GEMM_TAGS = ("dense", "matmul", "batch_matmul")  # the tags `matmul` gives its reductions


def dense(data: Tensor, weight: Tensor, bias: Tensor | None = None, name: str = "dense") -> Tensor:
    """out[..., i, j] = sum_k data[..., i, k] * weight[j, k] (+ bias[j])."""
    if data.ndim < 2 or weight.ndim != 2:
        raise ValueError(f"dense: data {data.shape} must have rank >= 2 and weight {weight.shape} rank 2")
    acc = matmul(data, weight, transpose_b=True, name=name if bias is None else f"{name}_acc", tag="dense")
    if bias is None:
        return acc
    return te.compute(acc.shape, lambda *i: acc[i] + bias[i[-1]], name=name)


def batch_matmul(a: Tensor, b: Tensor, name: str = "batch_matmul") -> Tensor:
    """out[b, i, j] = sum_k a[b, i, k] * b[b, j, k] (Relay's transposed-B convention)."""
    if a.ndim != 3 or b.ndim != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"batch_matmul: shapes {a.shape} and {b.shape} disagree")
    return matmul(a, b, transpose_b=True, name=name, tag="batch_matmul")


def _broadcast_batch(x: Sequence[int], y: Sequence[int], what: str) -> tuple[int, ...]:
    nd = max(len(x), len(y))
    x, y = (1,) * (nd - len(x)) + tuple(x), (1,) * (nd - len(y)) + tuple(y)
    if any(p != q and 1 not in (p, q) for p, q in zip(x, y)):
        raise ValueError(f"{what}: batch axes {x} and {y} do not broadcast")
    return tuple(max(p, q) for p, q in zip(x, y))


def matmul(a: Tensor, b: Tensor, transpose_a: bool = False, transpose_b: bool = False,
           name: str = "matmul", tag: str = "matmul") -> Tensor:
    """out[*z, i, j] = sum_k op(a)[*z, i, k] * op(b)[*z, k, j], op() transposing the last two axes
    when asked; the batch axes `z` broadcast NumPy-style (an operand may have fewer of them, or 1).

    Every form is one GEMM for the `dense` template: `attrs["batch"]` counts the batch axes and
    `attrs["b_layout"]` says how `b` holds its columns N: `"nk"` (transposed-B, `[..., N, K]`, the
    layout the template packs to `[..., N/NR, K, NR]`) or `"kn"` (`[..., K, N]`); likewise
    `attrs["a_layout"]` for the rows M of `a`: `"mk"` or `"km"` (transposed)."""
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"{name}: operands {a.shape} and {b.shape} need rank >= 2")
    m, ka = (a.shape[-1], a.shape[-2]) if transpose_a else (a.shape[-2], a.shape[-1])
    n, kb = (b.shape[-2], b.shape[-1]) if transpose_b else (b.shape[-1], b.shape[-2])
    if ka != kb:
        raise ValueError(f"{name}: {a.shape} and {b.shape} disagree on K ({ka} vs {kb})")
    lead = _broadcast_batch(a.shape[:-2], b.shape[:-2], name)
    k = te.reduce_axis(ka, "k")

    def batch_of(t: Tensor, z: Sequence[E.Expr]) -> tuple:
        own = t.shape[:-2]
        return tuple(0 if s == 1 else v for s, v in zip(own, z[len(z) - len(own):]))

    def body(*idx: E.Expr) -> E.Expr:
        z, (i, j) = idx[:-2], idx[-2:]
        za, zb = batch_of(a, z), batch_of(b, z)
        av = a[(*za, k, i)] if transpose_a else a[(*za, i, k)]
        bv = b[(*zb, j, k)] if transpose_b else b[(*zb, k, j)]
        return te.sum(av * bv, k)

    # axis names (z | z0, z1, …), i, j: what schedules and the loop IR call them
    zs = ["z"] if len(lead) == 1 else [f"z{d}" for d in range(len(lead))]
    body.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter(n, inspect.Parameter.POSITIONAL_ONLY) for n in (*zs, "i", "j")])
    return te.compute(
        (*lead, m, n),
        body,
        name=name,
        tag=tag,
        attrs={"batch": len(lead), "data": a.name, "weight": b.name,
               "a_layout": "km" if transpose_a else "mk", "b_layout": "nk" if transpose_b else "kn"},
    )


def _out_dim(size: int, k: int, s: int, p0: int, p1: int, d: int = 1) -> int:
    return (size + p0 + p1 - ((k - 1) * d + 1)) // s + 1


def conv2d_nchw_window(data: Tensor, weight: Tensor, strides, padding, dilation, name: str, op: str,
                       pad_value: float = 0.0, groups: int = 1) -> tuple[
                           Tensor, tuple[int, ...], tuple[int, int], tuple[int, int], tuple[te.IterVar, ...]]:
    """What an NCHW/OIHW convolution in `groups` groups reads, checked (`op` names it in the
    error): (the padded data, the output shape, the strides, the dilations, the reduction axes rc
    over one group's input channels, rh, rw). Shared by the float, the grouped and the bf16
    computes."""
    n, c, h, w = data.shape
    oc, ic, kh, kw = weight.shape
    if ic * groups != c or oc % groups:
        raise ValueError(f"{op}: data has {c} channels, weight expects {ic}"
                         + (f" in each of {groups} groups of {oc} outputs" if groups > 1 else ""))
    (sh, sw), (dh, dw) = _pair(strides), _pair(dilation)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb, dh), _out_dim(w, kw, sw, pl, pr, dw)
    x = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), value=pad_value, name=f"{name}_pad")
    axes = (te.reduce_axis(ic, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw"))
    return x, (n, oc, oh, ow), (sh, sw), (dh, dw), axes


def conv2d_nchw(
    data: Tensor, weight: Tensor, strides=1, padding=0, dilation=1, name: str = "conv2d"
) -> Tensor:
    x, shape, (sh, sw), (dh, dw), (rc, rh, rw) = conv2d_nchw_window(data, weight, strides, padding,
                                                                    dilation, name, "conv2d")
    return te.compute(
        shape,
        lambda b, f, y, xx: te.sum(
            x[b, rc, y * sh + rh * dh, xx * sw + rw * dw] * weight[f, rc, rh, rw], [rc, rh, rw]
        ),
        name=name,
        tag="conv2d_nchw",
        attrs={"weight": weight.name},
    )


def conv2d_1x1_nchw(data: Tensor, weight: Tensor, name: str = "conv2d") -> Tensor:
    """A 1x1, stride-1, unpadded NCHW convolution as the GEMM it is: `M[n, k, p] = sum_c W[k, c] X[n, c, p]`
    over the flattened pixels p, then viewed as [N, K, H, W]. Pixels are contiguous in NCHW, so a
    vector of output pixels reads a vector of input pixels (the index `(p // W) * W + p % W`
    simplifies back to `p`) and no output scatter is needed."""
    n, c, h, w = data.shape
    oc, ic, kh, kw = weight.shape
    if ic != c or (kh, kw) != (1, 1):
        raise ValueError(f"conv2d_1x1: data {data.shape} and weight {weight.shape} disagree")
    rc = te.reduce_axis(c, "rc")
    m = te.compute(
        (n, oc, h * w),
        lambda b, f, p: te.sum(data[b, rc, p // w, p % w] * weight[f, rc, 0, 0], [rc]),
        name=f"{name}_gemm",
        tag="conv2d_1x1_nchw",
        attrs={"weight": weight.name},
    )
    return te.compute((n, oc, h, w), lambda b, f, y, x: m[b, f, y * w + x], name=name, tag="conv2d_1x1_view")


def conv2d_nchwc(data: Tensor, weight: Tensor, strides=1, padding=0, name: str = "conv2d_nchwc",
                 groups: int = 1, dilation=1) -> Tensor:
    """data [N, C/icb, H, W, icb], weight [OC/ocb, C/groups/icb, KH, KW, icb, ocb] -> [N, OC/ocb, OH, OW,
    ocb]. In groups, output block f reads the input blocks of its group (ResNeXt's grouped layers,
    whose channels per group divide into blocks). A dilated kernel (the atrous layers of DeepLab's
    and FCN's backbones) only spaces its taps: the template's tiles are the same."""
    n, co, h, w, icb = data.shape
    oco, ico, kh, kw, icb2, ocb = weight.shape
    if co != ico * groups or icb != icb2 or oco % groups:
        raise ValueError(f"conv2d_nchwc: data {data.shape} and weight {weight.shape} disagree on channels "
                         f"in {groups} group(s)")
    (sh, sw), (dh, dw) = _pair(strides), _pair(dilation)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb, dh), _out_dim(w, kw, sw, pl, pr, dw)
    x = pad(data, (0, 0, pt, pl, 0), (0, 0, pb, pr, 0), name=f"{name}_pad")
    rc, rh, rw = te.reduce_axis(ico * icb, "rc"), te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    per_group = oco // groups  # output blocks per group

    def block(f: E.Expr) -> E.Expr:  # the input block that output block f reads at rc
        return rc // icb if groups == 1 else f // per_group * ico + rc // icb

    return te.compute(
        (n, oco, oh, ow, ocb),
        lambda b, f, y, xx, v: te.sum(
            x[b, block(f), y * sh + rh * dh, xx * sw + rw * dw, rc % icb]
            * weight[f, rc // icb, rh, rw, rc % icb, v],
            [rc, rh, rw],
        ),
        name=name,
        tag="conv2d_nchwc",
        attrs={"ic_bn": icb, "oc_bn": ocb, **({"groups": groups} if groups > 1 else {})},
    )


def pool2d(data: Tensor, kind: str, pool_size, strides=1, padding=0, name: str = "pool") -> Tensor:
    """NCHW max/avg pooling; avg divides by the full window (count_include_pad)."""
    n, c, h, w = data.shape
    (kh, kw), (sh, sw) = _pair(pool_size), _pair(strides)
    pt, pl, pb, pr = _pad4(padding)
    oh, ow = _out_dim(h, kh, sh, pt, pb), _out_dim(w, kw, sw, pl, pr)
    fill = float("-inf") if kind == "max" else 0.0
    x = pad(data, (0, 0, pt, pl), (0, 0, pb, pr), value=fill, name=f"{name}_pad")
    rh, rw = te.reduce_axis(kh, "rh"), te.reduce_axis(kw, "rw")
    red = te.max if kind == "max" else te.sum
    acc = te.compute(
        (n, c, oh, ow),
        lambda b, f, y, xx: red(x[b, f, y * sh + rh, xx * sw + rw], [rh, rw]),
        name=name if kind == "max" else f"{name}_sum",
        tag="pool",
    )
    if kind == "max":
        return acc
    return te.compute((n, c, oh, ow), lambda b, f, y, xx: acc[b, f, y, xx] / float(kh * kw), name=name)


def reduce(
    data: Tensor, kind: str, axes: Sequence[int], keepdims: bool = False, name: str = "reduce"
) -> Tensor:
    """sum / max / min / mean over `axes`."""
    nd = data.ndim
    axes = sorted(a % nd for a in axes)
    raxes = {a: te.reduce_axis(data.shape[a], f"r{a}") for a in axes}
    keep = [d for d in range(nd) if d not in raxes]
    shape = (
        [1 if d in raxes else data.shape[d] for d in range(nd)] if keepdims else [data.shape[d] for d in keep]
    )
    shape = shape or [1]

    def body(*idx: E.Expr) -> E.Expr:
        src: list = []
        it = iter(idx)
        for d in range(nd):
            if d in raxes:
                if keepdims:
                    next(it)
                src.append(raxes[d])
            else:
                src.append(next(it))
        fn = {"sum": te.sum, "mean": te.sum, "max": te.max, "min": te.min}[kind]
        return fn(data[tuple(src)], list(raxes.values()))

    if not keepdims and not keep:
        acc = te.compute(
            shape, lambda i0: body(), name=name if kind != "mean" else f"{name}_sum", tag="reduce"
        )
    else:
        acc = te.compute(shape, body, name=name if kind != "mean" else f"{name}_sum", tag="reduce")
    if kind != "mean":
        return acc
    count = 1
    for a in axes:
        count *= data.shape[a]
    return te.compute(shape, lambda *i: acc[i] / float(count), name=name)


def softmax(x: Tensor, name: str = "softmax") -> Tensor:
    """Softmax over the last axis, numerically stabilised by the row max."""
    *lead, n = x.shape
    k1, k2 = te.reduce_axis(n, "k1"), te.reduce_axis(n, "k2")
    mx = te.compute(
        lead or [1], lambda *i: te.max(x[(*i[: len(lead)], k1)], k1), name=f"{name}_max", tag="reduce"
    )

    def row(i: tuple) -> tuple:
        return i[: len(lead)] if lead else (0,)

    ex_sum = te.compute(
        lead or [1],
        lambda *i: te.sum(E.call("exp", x[(*i[: len(lead)], k2)] - mx[row(i)]), k2),
        name=f"{name}_sum",
        tag="reduce",
    )
    return te.compute(
        x.shape,
        lambda *i: E.call("exp", x[i] - mx[row(i[:-1])]) / ex_sum[row(i[:-1])],
        name=name,
        tag="softmax",
    )


def elemwise(fn: Callable[..., E.Expr], *xs: Tensor, name: str = "elemwise") -> Tensor:
    """NumPy-broadcast elementwise map of `fn` over `xs`."""
    nd = max(x.ndim for x in xs)
    shape = [1] * nd
    for x in xs:
        for d, s in enumerate(x.shape, nd - x.ndim):
            if s != 1 and shape[d] not in (1, s):
                raise ValueError(f"{name}: shapes {[x.shape for x in xs]} do not broadcast")
            shape[d] = s if s != 1 else shape[d]

    def body(*idx: E.Expr) -> E.Expr:
        args = []
        for x in xs:
            sub = idx[nd - x.ndim :]
            args.append(x[tuple(0 if s == 1 else i for i, s in zip(sub, x.shape))])
        return fn(*args)

    return te.compute(shape, body, name=name, tag="elemwise")


def relu(x: Tensor, name: str = "relu") -> Tensor:
    return elemwise(lambda a: E.maximum(a, 0.0), x, name=name)
