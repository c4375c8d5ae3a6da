"""Convolutional networks of the zoo, written with `NetBuilder` in NCHW.

Shapes follow the published architectures; `image_size` lets tests build small instances of the
same graph structure quickly.
"""

from __future__ import annotations

from autorelay.frontend.zoo.builder import NetBuilder
from autorelay.ir.expr import Expr, Tuple, TupleGetItem
from autorelay.op.registry import call


def _classifier(b: NetBuilder, x: Expr, channels: int, classes: int) -> Expr:
    y = call("nn.global_avg_pool2d", x)
    y = call("nn.batch_flatten", y)
    return call("nn.softmax", b.dense(y, "fc", channels, classes))


def _basic_block(b: NetBuilder, x: Expr, name: str, cin: int, cout: int, stride: int) -> Expr:
    y = b.conv_bn_relu(x, f"{name}_conv1", cin, cout, 3, stride)
    y = b.conv_bn_relu(y, f"{name}_conv2", cout, cout, 3, 1, relu=False)
    short = x if stride == 1 and cin == cout else b.conv_bn_relu(
        x, f"{name}_down", cin, cout, 1, stride, relu=False)
    return call("nn.relu", call("add", y, short))


def _bottleneck(b: NetBuilder, x: Expr, name: str, cin: int, cout: int, stride: int, mid: int = 0,
                groups: int = 1) -> Expr:
    """ResNet's bottleneck (`mid` = cout / 4); ResNeXt's with a wider `mid` and its 3x3 in `groups`."""
    mid = mid or cout // 4
    y = b.conv_bn_relu(x, f"{name}_conv1", cin, mid, 1, 1)
    y = b.conv_bn_relu(y, f"{name}_conv2", mid, mid, 3, stride, groups=groups)
    y = b.conv_bn_relu(y, f"{name}_conv3", mid, cout, 1, 1, relu=False)
    short = x if stride == 1 and cin == cout else b.conv_bn_relu(
        x, f"{name}_down", cin, cout, 1, stride, relu=False)
    return call("nn.relu", call("add", y, short))


_RESNET_UNITS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 50: (3, 4, 6, 3)}


def resnet(depth: int, batch_size: int = 1, dtype: str = "float32", image_size: int = 224,
           classes: int = 1000, seed: int = 0, cardinality: int = 1, group_width: int = 0):
    """ResNet-18/34/50; with `cardinality` > 1, ResNeXt (Xie et al. 2017): the bottleneck's 3x3 in
    `cardinality` groups of `group_width` channels (doubling per stage), ResNeXt-50 32x4d by default."""
    if depth not in _RESNET_UNITS:
        raise ValueError(f"resnet depth {depth} not supported; choose from {sorted(_RESNET_UNITS)}")
    if cardinality > 1 and depth < 50:
        raise ValueError("ResNeXt (cardinality > 1) has bottleneck blocks: depth 50")
    b = NetBuilder(seed, dtype)
    data = b.input("data", (batch_size, 3, image_size, image_size))
    x = b.conv_bn_relu(data, "stem", 3, 64, 7, 2)
    x = call("nn.max_pool2d", x, pool_size=(3, 3), strides=(2, 2), padding=(1, 1))
    bottleneck = depth >= 50
    widths = (256, 512, 1024, 2048) if bottleneck else (64, 128, 256, 512)
    block = _bottleneck if bottleneck else _basic_block
    cin = 64
    for stage, (units, cout) in enumerate(zip(_RESNET_UNITS[depth], widths)):
        for unit in range(units):
            stride = 2 if unit == 0 and stage > 0 else 1
            grouped = {"mid": cardinality * (group_width or 4) << stage, "groups": cardinality} \
                if cardinality > 1 else {}
            x = block(b, x, f"stage{stage + 1}_unit{unit + 1}", cin, cout, stride, **grouped)
            cin = cout
    return b.finish([data], _classifier(b, x, cin, classes))


def vgg16(batch_size: int = 1, dtype: str = "float32", image_size: int = 224, classes: int = 1000,
          seed: int = 0):
    b = NetBuilder(seed, dtype)
    data = b.input("data", (batch_size, 3, image_size, image_size))
    x: Expr = data
    cin, size = 3, image_size
    for stage, (convs, cout) in enumerate([(2, 64), (2, 128), (3, 256), (3, 512), (3, 512)]):
        for i in range(convs):
            x = call("nn.relu", b.conv2d(x, f"conv{stage + 1}_{i + 1}", cin, cout, 3, bias=True))
            cin = cout
        x = call("nn.max_pool2d", x, pool_size=(2, 2), strides=(2, 2))
        size //= 2
    x = call("nn.batch_flatten", x)
    x = call("nn.relu", b.dense(x, "fc6", cin * size * size, 4096))
    x = TupleGetItem(call("nn.dropout", x, rate=0.5), 0)
    x = call("nn.relu", b.dense(x, "fc7", 4096, 4096))
    x = TupleGetItem(call("nn.dropout", x, rate=0.5), 0)
    return b.finish([data], call("nn.softmax", b.dense(x, "fc8", 4096, classes)))


def _relu6(x: Expr) -> Expr:
    return call("clip", x, a_min=0.0, a_max=6.0)


_MOBILENET_V2 = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                 (6, 160, 3, 2), (6, 320, 1, 1))


def mobilenet_v2(batch_size: int = 1, dtype: str = "float32", image_size: int = 224,
                 classes: int = 1000, seed: int = 0):
    b = NetBuilder(seed, dtype)
    data = b.input("data", (batch_size, 3, image_size, image_size))
    x = _relu6(b.conv_bn_relu(data, "stem", 3, 32, 3, 2, relu=False))
    cin = 32
    for stage, (t, c, n, s) in enumerate(_MOBILENET_V2):
        for i in range(n):
            name = f"block{stage + 1}_{i + 1}"
            stride = s if i == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = _relu6(b.conv_bn_relu(y, f"{name}_expand", cin, hidden, 1, relu=False))
            y = _relu6(b.conv_bn_relu(y, f"{name}_dw", hidden, hidden, 3, stride, groups=hidden,
                                      relu=False))
            y = b.conv_bn_relu(y, f"{name}_project", hidden, c, 1, relu=False)
            x = call("add", x, y) if stride == 1 and cin == c else y
            cin = c
    x = _relu6(b.conv_bn_relu(x, "head", cin, 1280, 1, relu=False))
    return b.finish([data], _classifier(b, x, 1280, classes))


def _fire(b: NetBuilder, x: Expr, name: str, cin: int, squeeze: int, expand: int) -> Expr:
    s = call("nn.relu", b.conv2d(x, f"{name}_squeeze", cin, squeeze, 1, bias=True))
    e1 = call("nn.relu", b.conv2d(s, f"{name}_expand1x1", squeeze, expand, 1, bias=True))
    e3 = call("nn.relu", b.conv2d(s, f"{name}_expand3x3", squeeze, expand, 3, bias=True))
    return call("concatenate", Tuple((e1, e3)), axis=1)


def squeezenet1_1(batch_size: int = 1, dtype: str = "float32", image_size: int = 224,
                  classes: int = 1000, seed: int = 0):
    b = NetBuilder(seed, dtype)
    data = b.input("data", (batch_size, 3, image_size, image_size))
    x = call("nn.relu", b.conv2d(data, "conv1", 3, 64, 3, 2, padding=0, bias=True))

    def pool(e: Expr) -> Expr:
        return call("nn.max_pool2d", e, pool_size=(3, 3), strides=(2, 2), ceil_mode=True)

    x = pool(x)
    x = _fire(b, x, "fire2", 64, 16, 64)
    x = _fire(b, x, "fire3", 128, 16, 64)
    x = pool(x)
    x = _fire(b, x, "fire4", 128, 32, 128)
    x = _fire(b, x, "fire5", 256, 32, 128)
    x = pool(x)
    x = _fire(b, x, "fire6", 256, 48, 192)
    x = _fire(b, x, "fire7", 384, 48, 192)
    x = _fire(b, x, "fire8", 384, 64, 256)
    x = _fire(b, x, "fire9", 512, 64, 256)
    x = TupleGetItem(call("nn.dropout", x, rate=0.5), 0)
    x = call("nn.relu", b.conv2d(x, "conv10", 512, classes, 1, bias=True))
    x = call("nn.batch_flatten", call("nn.global_avg_pool2d", x))
    return b.finish([data], call("nn.softmax", x))


def nature_dqn(batch_size: int = 1, dtype: str = "float32", num_actions: int = 18, seed: int = 0):
    b = NetBuilder(seed, dtype)
    data = b.input("data", (batch_size, 4, 84, 84))
    x = call("nn.relu", b.conv2d(data, "conv1", 4, 32, 8, 4, padding=0, bias=True))
    x = call("nn.relu", b.conv2d(x, "conv2", 32, 64, 4, 2, padding=0, bias=True))
    x = call("nn.relu", b.conv2d(x, "conv3", 64, 64, 3, 1, padding=0, bias=True))
    x = call("nn.batch_flatten", x)
    x = call("nn.relu", b.dense(x, "fc4", 64 * 7 * 7, 512))
    return b.finish([data], b.dense(x, "fc5", 512, num_actions))


def dcgan_generator(batch_size: int = 1, dtype: str = "float32", random_len: int = 100,
                    image_size: int = 64, ngf: int = 128, seed: int = 0):
    """DCGAN's generator: a dense projection then four stride-2 transposed convolutions."""
    b = NetBuilder(seed, dtype)
    code = b.input("data", (batch_size, random_len))
    base = image_size // 16
    x = b.dense(code, "g1", random_len, ngf * 8 * base * base, bias=False)
    x = call("reshape", x, newshape=(batch_size, ngf * 8, base, base))
    x = call("nn.relu", b.batch_norm(x, "g1_bn", ngf * 8))
    cin = ngf * 8
    for i, cout in enumerate((ngf * 4, ngf * 2, ngf, 3)):
        w = b.weight(f"g{i + 2}_weight", (cin, cout, 4, 4), fan_in=cin * 16)
        x = call("nn.conv2d_transpose", x, w, strides=(2, 2), padding=(1, 1), channels=cout,
                 kernel_size=(4, 4))
        if cout != 3:
            x = call("nn.relu", b.batch_norm(x, f"g{i + 2}_bn", cout))
        cin = cout
    return b.finish([code], call("tanh", x))


def inception_net(batch_size: int = 1, dtype: str = "float32", image_size: int = 64, classes: int = 100,
                  seed: int = 0):
    """A small Inception-style network: a stem and two blocks of four parallel branches."""
    b = NetBuilder(seed, dtype)
    data = b.input("data", (batch_size, 3, image_size, image_size))
    x = b.conv_bn_relu(data, "stem", 3, 32, 3, 2)
    cin = 32
    for blk, (c1, c3r, c3, c5r, c5, cp) in enumerate([(16, 24, 32, 4, 8, 8), (32, 32, 48, 8, 16, 16)]):
        n = f"inc{blk + 1}"
        br1 = b.conv_bn_relu(x, f"{n}_1x1", cin, c1, 1)
        br3 = b.conv_bn_relu(b.conv_bn_relu(x, f"{n}_3x3r", cin, c3r, 1), f"{n}_3x3", c3r, c3, 3)
        br5 = b.conv_bn_relu(b.conv_bn_relu(x, f"{n}_5x5r", cin, c5r, 1), f"{n}_5x5", c5r, c5, 5)
        pooled = call("nn.max_pool2d", x, pool_size=(3, 3), strides=(1, 1), padding=(1, 1))
        brp = b.conv_bn_relu(pooled, f"{n}_pool", cin, cp, 1)
        x = call("concatenate", Tuple((br1, br3, br5, brp)), axis=1)
        cin = c1 + c3 + c5 + cp
    return b.finish([data], _classifier(b, x, cin, classes))


def mlp(batch_size: int = 1, dtype: str = "float32", in_features: int = 784, classes: int = 10,
        seed: int = 0):
    b = NetBuilder(seed, dtype)
    data = b.input("data", (batch_size, in_features))
    x = call("nn.relu", b.dense(data, "fc1", in_features, 128))
    x = call("nn.relu", b.dense(x, "fc2", 128, 64))
    return b.finish([data], call("nn.softmax", b.dense(x, "fc3", 64, classes)))
