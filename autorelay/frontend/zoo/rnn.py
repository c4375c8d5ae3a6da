"""Recurrent networks of the zoo, written as they are in the Relay paper's evaluation: the time loop
is a recursive global function with an `if` on a counter, not an unrolled graph. That is what the
VM and the ahead-of-time compiler exist for.

* `lstm`, `gru`, `rnn`: run over an input sequence `(seq_len, batch, input)` and return the last
  hidden state.
* `char_rnn`: generative; feeds back its own argmax as a one-hot input for `steps` steps and returns
  the generated characters as a `List` ADT.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from autorelay.frontend.zoo.builder import NetBuilder
from autorelay.ir.expr import (
    Call,
    Constructor,
    Expr,
    Function,
    GlobalVar,
    If,
    Let,
    TupleGetItem,
    Var,
    const,
)
from autorelay.ir.module import IRModule
from autorelay.ir.types import GlobalTypeVar, TensorType, TypeCall, TypeData, TypeVar
from autorelay.op.registry import call


def _split(x: Expr, parts: int) -> list[Expr]:
    s = call("split", x, indices_or_sections=parts, axis=1)
    return [TupleGetItem(s, i) for i in range(parts)]


def _lstm_cell(x: Expr, h: Expr, c: Expr, w: dict[str, Var]) -> tuple[Expr, Expr]:
    projected = call("add", call("nn.dense", x, w["w_ih"]), call("nn.dense", h, w["w_hh"]))
    gates = call("add", projected, w["bias"])
    i, f, g, o = _split(gates, 4)
    c2 = call("add", call("multiply", call("sigmoid", f), c),
              call("multiply", call("sigmoid", i), call("tanh", g)))
    h2 = call("multiply", call("sigmoid", o), call("tanh", c2))
    return h2, c2


def _gru_cell(x: Expr, h: Expr, w: dict[str, Var]) -> Expr:
    xg = call("add", call("nn.dense", x, w["w_ih"]), w["b_ih"])
    hg = call("add", call("nn.dense", h, w["w_hh"]), w["b_hh"])
    xr, xz, xn = _split(xg, 3)
    hr, hz, hn = _split(hg, 3)
    r = call("sigmoid", call("add", xr, hr))
    z = call("sigmoid", call("add", xz, hz))
    n = call("tanh", call("add", xn, call("multiply", r, hn)))
    return call("add", call("multiply", call("subtract", const(1.0), z), n), call("multiply", z, h))


def _rnn_cell(x: Expr, h: Expr, w: dict[str, Var]) -> Expr:
    pre = call("add", call("add", call("nn.dense", x, w["w_ih"]), call("nn.dense", h, w["w_hh"])), w["bias"])
    return call("tanh", pre)


def _recurrent(kind: str, batch_size: int, dtype: str, seq_len: int, input_size: int, hidden: int,
               seed: int):
    gates = {"lstm": 4, "gru": 3, "rnn": 1}[kind]
    b = NetBuilder(seed, dtype)
    b.weight("w_ih", (gates * hidden, input_size), "uniform", fan_in=hidden)
    b.weight("w_hh", (gates * hidden, hidden), "uniform", fan_in=hidden)
    if kind == "gru":
        b.weight("b_ih", (gates * hidden,), "uniform", fan_in=hidden)
        b.weight("b_hh", (gates * hidden,), "uniform", fan_in=hidden)
    else:
        b.weight("bias", (gates * hidden,), "uniform", fan_in=hidden)

    state_t = TensorType((batch_size, hidden), dtype)
    xs_t = TensorType((seq_len, batch_size, input_size), dtype)
    loop = GlobalVar(f"{kind}_loop")

    def fresh_weights() -> list[Var]:
        return [Var(p.name_hint, p.type_annotation) for p in b.param_vars]

    # the loop: (i, xs, state..., weights...) -> last hidden state
    i = Var("i", TensorType((), "int32"))
    xs = Var("xs", xs_t)
    states = [Var("h", state_t)] + ([Var("c", state_t)] if kind == "lstm" else [])
    ws = fresh_weights()
    w = {v.name_hint: v for v in ws}
    x = call("take", xs, i, axis=0)
    if kind == "lstm":
        new_states = list(_lstm_cell(x, states[0], states[1], w))
    elif kind == "gru":
        new_states = [_gru_cell(x, states[0], w)]
    else:
        new_states = [_rnn_cell(x, states[0], w)]
    step = Call(loop, (call("add", i, const(1)), xs, *new_states, *ws))
    body = If(call("less", i, const(seq_len)), step, states[0])
    loop_fn = Function((i, xs, *states, *ws), body, ret_type=state_t)

    data = b.input("data", (seq_len, batch_size, input_size))
    init = [call("zeros", shape=(batch_size, hidden), dtype=dtype) for _ in states]
    main = Function((data, *b.param_vars), Call(loop, (const(0), data, *init, *b.param_vars)))
    return IRModule({GlobalVar("main"): main, loop: loop_fn}), dict(b.params)


def lstm(batch_size: int = 1, dtype: str = "float32", seq_len: int = 10, input_size: int = 128,
         hidden: int = 128, seed: int = 0):
    return _recurrent("lstm", batch_size, dtype, seq_len, input_size, hidden, seed)


def gru(batch_size: int = 1, dtype: str = "float32", seq_len: int = 10, input_size: int = 128,
        hidden: int = 128, seed: int = 0):
    return _recurrent("gru", batch_size, dtype, seq_len, input_size, hidden, seed)


def rnn(batch_size: int = 1, dtype: str = "float32", seq_len: int = 10, input_size: int = 128,
        hidden: int = 128, seed: int = 0):
    return _recurrent("rnn", batch_size, dtype, seq_len, input_size, hidden, seed)


def list_adt() -> tuple[TypeData, Constructor, Constructor]:
    """`type List[A] { Cons(A, List[A]), Nil }`, identical to the prelude's definition."""
    header = GlobalTypeVar("List")
    a = TypeVar("A")
    cons = Constructor("Cons", (a, TypeCall(header, (a,))), header, 0)
    nil = Constructor("Nil", (), header, 1)
    return TypeData(header, (a,), (cons, nil)), cons, nil


def char_rnn(batch_size: int = 1, dtype: str = "float32", steps: int = 20, vocab: int = 64,
             hidden: int = 128, seed: int = 0):
    """A generative character RNN: each step's argmax is fed back, one-hot, as the next input."""
    if batch_size != 1:
        raise ValueError("char-rnn generates one sequence at a time (batch_size=1)")
    b = NetBuilder(seed, dtype)
    for name, shape in [("w_xh", (hidden, vocab)), ("w_hh", (hidden, hidden)), ("b_h", (hidden,)),
                        ("w_hy", (vocab, hidden)), ("b_y", (vocab,))]:
        b.weight(name, shape, "uniform", fan_in=hidden)
    list_td, cons, nil = list_adt()
    char_t = TensorType((1,), "int32")
    out_t = TypeCall(list_td.header, (char_t,))
    sample = GlobalVar("sample")

    i = Var("i", TensorType((), "int32"))
    h = Var("h", TensorType((1, hidden), dtype))
    x = Var("x", TensorType((1, vocab), dtype))
    ws = [Var(p.name_hint, p.type_annotation) for p in b.param_vars]
    w = {v.name_hint: v for v in ws}
    h2 = Var("h2")
    nxt = Var("next")
    dense = call("nn.dense", x, w["w_xh"])
    h_val = call("tanh", call("add", call("add", dense, call("nn.dense", h, w["w_hh"])), w["b_h"]))
    logits = call("add", call("nn.dense", h2, w["w_hy"]), w["b_y"])
    one_hot = call("one_hot", nxt, const(1.0, dtype), const(0.0, dtype), depth=vocab, axis=-1, dtype=dtype)
    rest = Call(sample, (call("add", i, const(1)), h2, one_hot, *ws))
    step = Let(h2, h_val, Let(nxt, call("argmax", logits, axis=1), Call(cons, (nxt, rest))))
    body = If(call("less", i, const(steps)), step, Call(nil, ()))
    sample_fn = Function((i, h, x, *ws), body, ret_type=out_t)

    start = b.input("start", (1, vocab))
    h0 = call("zeros", shape=(1, hidden), dtype=dtype)
    main = Function((start, *b.param_vars), Call(sample, (const(0), h0, start, *b.param_vars)))
    mod = IRModule({GlobalVar("main"): main, sample: sample_fn}, {list_td.header: list_td})
    return mod, dict(b.params)


def lstm_reference(xs: np.ndarray, params: dict[str, np.ndarray]) -> np.ndarray:
    """The LSTM in plain NumPy (PyTorch's gate order i, f, g, o): an oracle for tests."""
    hidden = params["w_hh"].shape[1]
    h = np.zeros((xs.shape[1], hidden), xs.dtype)
    c = np.zeros_like(h)
    sig: Callable[[np.ndarray], np.ndarray] = lambda v: 1 / (1 + np.exp(-v))
    for x in xs:
        g = x @ params["w_ih"].T + h @ params["w_hh"].T + params["bias"]
        i, f, gg, o = np.split(g, 4, axis=1)
        c = sig(f) * c + sig(i) * np.tanh(gg)
        h = sig(o) * np.tanh(c)
    return h


__all__ = ["char_rnn", "gru", "list_adt", "lstm", "lstm_reference", "rnn"]
