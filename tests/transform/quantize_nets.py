"""Small float networks for the quantizer's tests: every pattern it rewrites, in a few layers."""

from __future__ import annotations

import numpy as np

from autorelay.ir import Function, IRModule, TensorType, Tuple, TupleGetItem, Var, const
from autorelay.op.registry import call


def _w(rng: np.random.Generator, *shape: int, scale: float | None = None):
    fan_in = int(np.prod(shape[1:])) or 1
    s = np.sqrt(2.0 / fan_in) if scale is None else scale
    return const((rng.standard_normal(shape) * s).astype("float32"))


def _bn(rng: np.random.Generator, x, channels: int):
    gamma = const(rng.uniform(0.5, 1.5, channels).astype("float32"))
    beta = const((rng.standard_normal(channels) * 0.1).astype("float32"))
    mean = const((rng.standard_normal(channels) * 0.1).astype("float32"))
    var = const(rng.uniform(0.5, 2.0, channels).astype("float32"))
    return TupleGetItem(call("nn.batch_norm", x, gamma, beta, mean, var), 0)


def _conv(rng, x, cin: int, cout: int, k: int = 3, stride: int = 1, groups: int = 1):
    return call("nn.conv2d", x, _w(rng, cout, cin // groups, k, k), strides=[stride, stride],
                padding=[k // 2, k // 2], groups=groups, channels=cout, kernel_size=[k, k])


def small_net(batch: int = 4, channels: int = 8, image: int = 8, classes: int = 10,
              seed: int = 0, softmax: bool = False, head: bool = True) -> IRModule:
    """stem conv-bn-relu, max pool, a residual block (add + relu), a depthwise conv with relu6, two
    1x1 branches joined by concatenate, a 1x1 conv with relu, global average pool, dense + bias (the
    logits; `softmax` appends a softmax). Without the `head` (pool and dense) the net ends at the 1x1
    conv's relu, so its quantized form has float arithmetic only in the elementwise boundaries.

    Layers: conv2d_0 stem, conv2d_1/2 block, conv2d_3 depthwise, conv2d_4/5 branches, conv2d_6, dense_0."""
    rng = np.random.default_rng(seed)
    c = channels
    x = Var("data", TensorType((batch, 3, image, image)))
    y = call("nn.relu", _bn(rng, _conv(rng, x, 3, c), c))
    y = call("nn.max_pool2d", y, pool_size=[2, 2], strides=[2, 2])
    z = call("nn.relu", _bn(rng, _conv(rng, y, c, c), c))
    z = _bn(rng, _conv(rng, z, c, c), c)
    y = call("nn.relu", call("add", z, y))
    y = call("clip", _bn(rng, _conv(rng, y, c, c, groups=c), c), a_min=0.0, a_max=6.0)
    a = call("nn.relu", call("nn.bias_add", _conv(rng, y, c, c, k=1), _w(rng, c, scale=0.1)))
    b = call("nn.relu", call("nn.bias_add", _conv(rng, y, c, c, k=1), _w(rng, c, scale=0.1)))
    y = call("concatenate", Tuple((a, b)), axis=1)
    y = call("nn.relu", _conv(rng, y, 2 * c, 2 * c, k=1))
    if not head:
        return IRModule.from_expr(Function((x,), y))
    y = call("nn.batch_flatten", call("nn.global_avg_pool2d", y))
    y = call("nn.bias_add", call("nn.dense", y, _w(rng, classes, 2 * c)), _w(rng, classes, scale=0.1))
    return IRModule.from_expr(Function((x,), call("nn.softmax", y) if softmax else y))


def images(batch: int, image: int = 8, seed: int = 0) -> np.ndarray:
    """Inputs in the range of normalised images (roughly [-2, 2])."""
    return np.random.default_rng(seed).standard_normal((batch, 3, image, image)).astype("float32")
