"""LSTM, GRU and RNN converters: the recurrence is unrolled over the static sequence length (the
batch may be dynamic).

ONNX packs gate weights as `W: (dirs, G*H, input)`, `R: (dirs, G*H, H)`, `B: (dirs, 2*G*H)` with the
gate order `i, o, f, c` for LSTM and `z, r, h` for GRU (PyTorch uses `i, f, g, o` and `r, z, n`;
its exporter reorders them, so the importer follows ONNX's order only). The input projection of
every step is one `nn.dense` over the whole sequence; each step adds the recurrent projection.
GRU's `linear_before_reset` decides whether the reset gate multiplies `h` before or after `Rh`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.frontend.onnx.context import GraphBuilder, NodeView
from autorelay.ir.expr import Expr

TABLE: dict = {}

_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
_DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}


def _activation(
    g: GraphBuilder, name: str, alpha: float | None, beta: float | None
) -> Callable[[Expr], Expr]:
    def sc(v: float, x: Expr) -> Expr:
        return g.scalar(v, x)

    key = name.lower()
    if key == "sigmoid":
        return lambda x: g.call("sigmoid", x)
    if key == "tanh":
        return lambda x: g.call("tanh", x)
    if key == "relu":
        return lambda x: g.call("nn.relu", x)
    if key == "leakyrelu":
        return lambda x: g.call("nn.leaky_relu", x, alpha=0.01 if alpha is None else alpha)
    if key == "hardsigmoid":
        a, b = 0.2 if alpha is None else alpha, 0.5 if beta is None else beta
        return lambda x: g.call(
            "clip", g.call("add", g.call("multiply", x, sc(a, x)), sc(b, x)), a_min=0.0, a_max=1.0
        )
    if key == "affine":
        a, b = 1.0 if alpha is None else alpha, 0.0 if beta is None else beta
        return lambda x: g.call("add", g.call("multiply", x, sc(a, x)), sc(b, x))
    if key == "scaledtanh":
        a, b = 1.0 if alpha is None else alpha, 1.0 if beta is None else beta
        return lambda x: g.call("multiply", g.call("tanh", g.call("multiply", x, sc(b, x))), sc(a, x))
    raise g.fail(f"recurrent activation {name!r} is not supported")


def _pick(g: GraphBuilder, e: Expr, d: int) -> Expr:
    """Direction `d` of a `(dirs, …)` tensor, without the leading axis."""
    return g.call("squeeze", g.call("strided_slice", e, begin=(d,), end=(d + 1,), axes=(0,)), axis=[0])


def _chunks(g: GraphBuilder, e: Expr, n: int, axis: int) -> list[Expr]:
    if n == 1:
        return [e]
    tup = g.call("split", e, indices_or_sections=n, axis=axis)
    return [g.item(tup, i) for i in range(n)]


def _recurrent(g: GraphBuilder, node: NodeView) -> list[Expr | None]:
    kind = node.op_type
    x, w, r = (node.input(i) for i in range(3))
    if x is None or w is None or r is None:
        raise node.fail("inputs X, W and R are required")
    b, seq_lens, h0 = node.input(3), node.input(4), node.input(5)
    c0 = node.input(6) if kind == "LSTM" else None
    peep = node.input(7) if kind == "LSTM" else None
    hidden = int(node.attr("hidden_size", g.static_shape(r, "R")[-1]))
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise node.fail(f"direction={direction!r} is not forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    layout = int(node.attr("layout", 0))
    if layout == 1:  # batch-major: (batch, seq, in) -> (seq, batch, in)
        x = g.call("transpose", x, axes=(1, 0, 2))
        h0 = None if h0 is None else g.call("transpose", h0, axes=(1, 0, 2))
        c0 = None if c0 is None else g.call("transpose", c0, axes=(1, 0, 2))
    seq, _, in_size = g.shape(x)
    if not isinstance(seq, int) or not isinstance(in_size, int):  # a dynamic batch is fine
        raise node.fail(f"X of shape {tuple(str(d) for d in g.shape(x))} (sequence, batch, input): the "
                        "sequence length and input size must be static (the recurrence is unrolled)")
    if seq_lens is not None:
        lens = np.asarray(g.value(seq_lens, "sequence_lens"))
        if not np.all(lens == seq):
            raise node.fail(
                f"sequence_lens {lens.tolist()} shorter than the sequence length {seq} are not supported"
            )
    if kind == "LSTM" and node.attr("input_forget", 0):
        raise node.fail("input_forget=1 is not supported")
    nacts = len(_DEFAULT_ACTS[kind])
    names = list(node.attr("activations", _DEFAULT_ACTS[kind] * dirs))
    alphas, betas = list(node.attr("activation_alpha", [])), list(node.attr("activation_beta", []))
    if len(names) != nacts * dirs:
        raise node.fail(f"activations {names} must list {nacts} function(s) per direction")
    acts = [
        _activation(g, n, alphas[i] if i < len(alphas) else None, betas[i] if i < len(betas) else None)
        for i, n in enumerate(names)
    ]
    clip = node.attr("clip")
    ys, hs, cs = [], [], []
    for d in range(dirs):
        f = acts[d * nacts : (d + 1) * nacts]
        wd, rd = _pick(g, w, d), _pick(g, r, d)
        proj = g.call("nn.dense", x, wd)  # (seq, batch, G*H)
        rb_h = None
        rd_parts = None
        if b is not None:
            wb, rb = _chunks(g, _pick(g, b, d), 2, 0)
            if kind == "GRU":  # Rb_h sits inside the reset product; keep it apart
                rbz, rbr, rb_h = _chunks(g, rb, 3, 0)
                rb = g.call("concatenate", g.tuple([rbz, rbr, g.call("zeros_like", rb_h)]), axis=0)
            proj = g.call("add", proj, g.call("add", wb, rb))
        if kind == "GRU":
            rd_parts = _chunks(g, rd, 3, 0)  # Rz, Rr, Rh each (H, H)
        steps = [g.call("squeeze", s, axis=[0]) for s in _chunks(g, proj, seq, 0)]
        h = _zero_state(g, steps[0], hidden) if h0 is None else _pick(g, h0, d)
        c = None
        if kind == "LSTM":
            c = _zero_state(g, steps[0], hidden) if c0 is None else _pick(g, c0, d)
        pi = po = pf = None
        if peep is not None:
            pi, po, pf = _chunks(g, _pick(g, peep, d), 3, 0)
        order = (
            range(seq)
            if (direction == "forward" or (direction == "bidirectional" and d == 0))
            else range(seq - 1, -1, -1)
        )
        outs: dict[int, Expr] = {}
        for t in order:
            xt = steps[t]
            if kind == "GRU":
                xz, xr, xh = _chunks(g, xt, 3, 1)
                z = f[0](_clip(g, g.call("add", xz, g.call("nn.dense", h, rd_parts[0])), clip))
                rr = f[0](_clip(g, g.call("add", xr, g.call("nn.dense", h, rd_parts[1])), clip))
                if node.attr("linear_before_reset", 0):
                    hr = g.call("nn.dense", h, rd_parts[2])
                    if rb_h is not None:
                        hr = g.call("add", hr, rb_h)
                    pre = g.call("add", xh, g.call("multiply", rr, hr))
                else:
                    pre = g.call("add", xh, g.call("nn.dense", g.call("multiply", rr, h), rd_parts[2]))
                    if rb_h is not None:
                        pre = g.call("add", pre, rb_h)
                hh = f[1](_clip(g, pre, clip))
                one_minus_z = g.call("subtract", g.scalar(1.0, z), z)
                h = g.call("add", g.call("multiply", one_minus_z, hh), g.call("multiply", z, h))
            else:
                gates = _clip(g, g.call("add", xt, g.call("nn.dense", h, rd)), clip)
                if kind == "RNN":
                    h = f[0](gates)
                else:
                    gi, go, gf, gc = _chunks(g, gates, 4, 1)
                    if pi is not None:
                        gi = g.call("add", gi, g.call("multiply", pi, c))
                        gf = g.call("add", gf, g.call("multiply", pf, c))
                    i_t, f_t, c_hat = f[0](gi), f[0](gf), f[1](gc)
                    c = g.call("add", g.call("multiply", f_t, c), g.call("multiply", i_t, c_hat))
                    if po is not None:
                        go = g.call("add", go, g.call("multiply", po, c))
                    h = g.call("multiply", f[0](go), f[2](c))
            outs[t] = h
        ys.append(g.call("stack", g.tuple([outs[t] for t in range(seq)]), axis=0))  # (seq, batch, H)
        hs.append(h)
        cs.append(c)
    y = g.call("stack", g.tuple(ys), axis=1)  # (seq, dirs, batch, H)
    y_h = g.call("stack", g.tuple(hs), axis=0)
    y_c = g.call("stack", g.tuple(cs), axis=0) if kind == "LSTM" else None
    if layout == 1:
        y = g.call("transpose", y, axes=(2, 0, 1, 3))
        y_h = g.call("transpose", y_h, axes=(1, 0, 2))
        y_c = None if y_c is None else g.call("transpose", y_c, axes=(1, 0, 2))
    return [y, y_h, y_c] if kind == "LSTM" else [y, y_h]


for _kind in _GATES:
    TABLE[_kind] = _recurrent


def _zero_state(g: GraphBuilder, step: Expr, hidden: int) -> Expr:
    """A zero (batch, hidden) state; the batch is `step`'s (a (batch, gates) projection), so a
    dynamic batch keeps its name."""
    batch = g.shape(step)[0]
    if isinstance(batch, int):
        return g.call("zeros", shape=(batch, hidden), dtype=g.dtype(step))
    return g.call("zeros_like", g.call("strided_slice", step, begin=(0,), end=(hidden,), axes=(1,)))


def _clip(g: GraphBuilder, e: Expr, clip: float | None) -> Expr:
    return e if clip is None else g.call("clip", e, a_min=-float(clip), a_max=float(clip))
