"""The recurrent zoo models as a PyTorch user writes them (eager, a Python loop over steps or a
recursion over the tree), with the zoo model's weights, plus their inputs.

They are the baseline of the `rnns` experiment and of `benchmarks/rnn.py`: LSTM / GRU / vanilla RNN
use `nn.LSTMCell` / `nn.GRUCell` / `nn.RNNCell`; char-rnn the same matmuls, argmax and one-hot per
generated character; the child-sum Tree-LSTM (Tai et al. 2015) recurses over a nested
`(x, [children])` tree. Inputs are converted to tensors once (`to_torch`), outside the timed call, as
a PyTorch program holds them; outputs are NumPy arrays, compared with AutoRelay's before timing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Tree = tuple[np.ndarray, list["Tree"]]
CHAR_START = 5  # the index of the character char-rnn starts generating from


def model_inputs(name: str, steps: int, params: dict[str, np.ndarray], seed: int = 0) -> Any:
    """The input of one run: a (steps, 1, input) sequence, char-rnn's one-hot start character, or a
    complete binary tree of `steps` levels for the Tree-LSTM (2**steps - 1 nodes)."""
    rng = np.random.default_rng(seed)
    if name == "char-rnn":
        return np.eye(params["w_xh"].shape[1], dtype="float32")[[CHAR_START]]
    if name == "tree-lstm":
        size = params["w_f"].shape[1]

        def grow(depth: int) -> Tree:
            kids = [grow(depth - 1) for _ in range(2)] if depth > 1 else []
            return rng.standard_normal((1, size)).astype("float32"), kids
        return grow(steps)
    return rng.standard_normal((steps, 1, params["w_ih"].shape[1])).astype("float32")


def to_torch(value: Any) -> Any:
    """An input of `model_inputs` as tensors (a tree stays a nested tuple of tensors)."""
    import torch

    if isinstance(value, tuple):
        return torch.from_numpy(value[0]), [to_torch(k) for k in value[1]]
    return torch.from_numpy(value)


def torch_runner(name: str, params: dict[str, np.ndarray], steps: int) -> Callable[[Any], np.ndarray]:
    """PyTorch eager running `name` on one input (`to_torch(model_inputs(...))`), returning NumPy."""
    import torch

    t = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in params.items()}
    if name == "char-rnn":
        return _char_rnn(t, steps)
    if name == "tree-lstm":
        return _tree_lstm(t)
    cls = {"lstm": torch.nn.LSTMCell, "gru": torch.nn.GRUCell, "rnn": torch.nn.RNNCell}[name]
    hidden = params["w_hh"].shape[1]
    cell = cls(params["w_ih"].shape[1], hidden)
    with torch.no_grad():
        cell.weight_ih.copy_(t["w_ih"])
        cell.weight_hh.copy_(t["w_hh"])
        cell.bias_ih.copy_(t["b_ih"] if name == "gru" else t["bias"])
        cell.bias_hh.copy_(t["b_hh"] if name == "gru" else torch.zeros_like(cell.bias_hh))

    def run(x: Any) -> np.ndarray:
        with torch.no_grad():
            h = torch.zeros(x.shape[1], hidden)
            c = torch.zeros_like(h)
            for i in range(x.shape[0]):
                if name == "lstm":
                    h, c = cell(x[i], (h, c))
                else:
                    h = cell(x[i], h)
            return h.numpy()
    return run


def _char_rnn(t: dict[str, Any], steps: int) -> Callable[[Any], np.ndarray]:
    import torch

    def run(x: Any) -> np.ndarray:
        with torch.no_grad():
            h, out = torch.zeros(1, t["w_hh"].shape[0]), []
            for _ in range(steps):
                h = torch.tanh(torch.addmm(t["b_h"], x, t["w_xh"].T) + h @ t["w_hh"].T)
                nxt = torch.argmax(torch.addmm(t["b_y"], h, t["w_hy"].T), dim=1)
                out.append(nxt)
                x = torch.nn.functional.one_hot(nxt, t["w_xh"].shape[1]).float()
            return torch.cat(out).numpy()
    return run


def _tree_lstm(t: dict[str, Any]) -> Callable[[Any], np.ndarray]:
    import torch

    hidden = t["u_f"].shape[0]

    def node(tree: tuple[Any, list]) -> tuple[Any, Any]:
        x, kids = tree
        states = [node(k) for k in kids]
        zero = torch.zeros(1, hidden)
        h_sum = sum((h for h, _ in states), zero)
        xf = torch.addmm(t["b_f"], x, t["w_f"].T)
        fc = sum((torch.sigmoid(xf + h @ t["u_f"].T) * c for h, c in states), zero)
        i, o, u = torch.chunk(torch.addmm(t["b_iou"], x, t["w_iou"].T) + h_sum @ t["u_iou"].T, 3, dim=1)
        c = torch.sigmoid(i) * torch.tanh(u) + fc
        return torch.sigmoid(o) * torch.tanh(c), c

    def run(tree: tuple[Any, list]) -> np.ndarray:
        with torch.no_grad():
            return node(tree)[0].numpy()
    return run


__all__ = ["CHAR_START", "Tree", "model_inputs", "to_torch", "torch_runner"]
