"""Small whole networks for pass tests (weights are constants, as after bind_params), plus the
before/after oracle: the reference interpreter on the same random inputs."""

from __future__ import annotations

import numpy as np

from autorelay.ir import Function, IRModule, TensorType, Tuple, TupleGetItem, Var, const
from autorelay.op.registry import call
from autorelay.runtime.interpreter import evaluate
from autorelay.transform.util import op_histogram
from autorelay.typing import infer_types

RTOL, ATOL = 1e-4, 1e-5  # float32 arithmetic reassociated by folding (scales moved into weights)


def _w(rng: np.random.Generator, *shape: int, scale: float = 0.3) -> object:
    return const((rng.standard_normal(shape) * scale).astype("float32"))


def _bn(rng: np.random.Generator, x, channels: int):
    gamma = const(rng.uniform(0.5, 1.5, channels).astype("float32"))
    beta = const(rng.standard_normal(channels).astype("float32") * 0.1)
    mean = const(rng.standard_normal(channels).astype("float32") * 0.1)
    var = const(rng.uniform(0.5, 2.0, channels).astype("float32"))
    return TupleGetItem(call("nn.batch_norm", x, gamma, beta, mean, var), 0)


def _conv(rng, x, cin: int, cout: int, k: int = 3, stride: int = 1):
    return call("nn.conv2d", x, _w(rng, cout, cin, k, k), strides=[stride, stride],
                padding=[k // 2, k // 2], channels=cout, kernel_size=[k, k])


def resnet_chain(blocks: int = 2, channels: int = 8, image: int = 8, classes: int = 10,
                 seed: int = 0) -> IRModule:
    """conv-bn-relu stem, `blocks` residual blocks (conv-bn-relu-conv-bn + skip, relu), a
    downsampling block with a 1x1 projection, global pooling and a dense classifier."""
    rng = np.random.default_rng(seed)
    x = Var("data", TensorType((1, 3, image, image)))
    y = call("nn.relu", _bn(rng, _conv(rng, x, 3, channels), channels))
    for _ in range(blocks):
        z = call("nn.relu", _bn(rng, _conv(rng, y, channels, channels), channels))
        z = _bn(rng, _conv(rng, z, channels, channels), channels)
        y = call("nn.relu", call("add", z, y))
    c2 = channels * 2
    z = call("nn.relu", _bn(rng, _conv(rng, y, channels, c2, stride=2), c2))
    z = _bn(rng, _conv(rng, z, c2, c2), c2)
    skip = _bn(rng, _conv(rng, y, channels, c2, k=1, stride=2), c2)
    y = call("nn.relu", call("add", z, skip))
    y = call("nn.batch_flatten", call("nn.global_avg_pool2d", y))
    y = call("nn.bias_add", call("nn.dense", y, _w(rng, classes, c2)), _w(rng, classes))
    return IRModule.from_expr(Function((x,), call("nn.softmax", y)))


def mlp(in_features: int = 32, hidden: int = 64, classes: int = 10, seed: int = 1) -> IRModule:
    """dense-bias-relu-dropout twice, dense-bias, softmax."""
    rng = np.random.default_rng(seed)
    x = Var("x", TensorType((4, in_features)))
    y = x
    for fin, fout in ((in_features, hidden), (hidden, hidden)):
        y = call("nn.relu", call("nn.bias_add", call("nn.dense", y, _w(rng, fout, fin)), _w(rng, fout)))
        y = TupleGetItem(call("nn.dropout", y, rate=0.5), 0)
    y = call("nn.bias_add", call("nn.dense", y, _w(rng, classes, hidden)), _w(rng, classes))
    return IRModule.from_expr(Function((x,), call("nn.softmax", y)))


def lstm_step(inputs: int = 16, hidden: int = 16, seed: int = 2) -> IRModule:
    """One LSTM cell step: (x, h, c) -> (h', c'), gates from two dense layers and a split."""
    rng = np.random.default_rng(seed)
    x = Var("x", TensorType((1, inputs)))
    h = Var("h", TensorType((1, hidden)))
    c = Var("c", TensorType((1, hidden)))
    gates = call("add", call("nn.dense", x, _w(rng, 4 * hidden, inputs)),
                 call("nn.dense", h, _w(rng, 4 * hidden, hidden)))
    gates = call("nn.bias_add", gates, _w(rng, 4 * hidden))
    parts = call("split", gates, indices_or_sections=4, axis=1)
    i, f, g, o = (TupleGetItem(parts, k) for k in range(4))
    i, f, o = (call("sigmoid", v) for v in (i, f, o))
    c2 = call("add", call("multiply", f, c), call("multiply", i, call("tanh", g)))
    h2 = call("multiply", o, call("tanh", c2))
    return IRModule.from_expr(Function((x, h, c), Tuple((h2, c2))))


NETS = {"resnet": resnet_chain, "mlp": mlp, "lstm": lstm_step}


def random_inputs(mod: IRModule, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.type_annotation.concrete_shape).astype(p.type_annotation.dtype)
            for p in mod["main"].params]


def assert_same_outputs(before: IRModule, after: IRModule, seed: int = 0, rtol: float = RTOL,
                        atol: float = ATOL, inputs: list | None = None) -> None:
    """The interpreter gives the same outputs for both modules on random inputs."""
    args = inputs if inputs is not None else random_inputs(before, seed)
    want, got = evaluate(before, *args), evaluate(after, *args)
    _assert_close(got, want, rtol, atol)


def _assert_close(got, want, rtol: float, atol: float) -> None:
    if isinstance(want, tuple):
        assert isinstance(got, tuple) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_close(g, w, rtol, atol)
        return
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=rtol, atol=atol)


def ops(mod: IRModule) -> dict[str, int]:
    return dict(op_histogram(mod))


def typed(mod: IRModule) -> IRModule:
    return infer_types(mod)
