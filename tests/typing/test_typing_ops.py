"""Type inference through the real operator relations, and deep programs."""

import time

import numpy as np
import pytest

from autorelay.errors import TypeCheckError
from autorelay.ir import (
    Function,
    IRModule,
    Span,
    SymDim,
    TensorType,
    Tuple,
    TupleGetItem,
    Var,
    bind_lets,
    const,
)
from autorelay.op import registry
from autorelay.op.registry import call
from autorelay.typing import infer_expr, infer_types


def needs(*ops):
    missing = [o for o in ops if not registry.exists(o)]
    return pytest.mark.skipif(bool(missing), reason=f"ops not registered yet: {missing}")


def conv_out(size, k, pad, stride=1):
    return (size + 2 * pad - k) // stride + 1


@needs("add")
def test_add_broadcasts_like_numpy():
    shapes = [((2, 1, 3), (4, 1)), ((5,), (3, 1)), ((1,), (2, 2)), ((), (7, 1, 2))]
    for a, b in shapes:
        t = infer_expr(call("add", Var("a", TensorType(a)), Var("b", TensorType(b))))
        assert t == TensorType(np.broadcast_shapes(a, b))


@needs("add")
def test_add_mismatch_names_op_and_shapes_with_span():
    a, b = Var("a", TensorType((2, 3))), Var("b", TensorType((4, 1)))
    node = call("add", a, b).with_span(Span("net.relay", 7, 12))
    with pytest.raises(TypeCheckError, match=r"add: .*\(2, 3\).*\(4, 1\)") as info:
        infer_types(IRModule({"main": Function((a, b), node)}))
    assert info.value.span == Span("net.relay", 7, 12)
    assert str(info.value).startswith("net.relay:7:12:")


@needs("nn.conv2d")
def test_conv2d_infers_an_unannotated_weight():
    x = Var("x", TensorType((1, 3, 32, 32)))
    w = Var("w")
    y = call("nn.conv2d", x, w, channels=16, kernel_size=(5, 5), padding=(2, 2), strides=(2, 2))
    infer_types(IRModule({"main": Function((x, w), y)}))
    assert w.checked_type == TensorType((16, 3, 5, 5))
    side = conv_out(32, 5, 2, 2)
    assert y.checked_type == TensorType((1, 16, side, side))


@needs("nn.conv2d")
def test_conv2d_without_weight_or_channels_never_becomes_ready():
    x, w = Var("x", TensorType((1, 3, 8, 8))), Var("w")
    with pytest.raises(TypeCheckError, match=r"nn\.conv2d: cannot infer the result type"):
        infer_types(IRModule({"main": Function((x, w), call("nn.conv2d", x, w))}))


@needs("nn.conv2d")
def test_conv2d_channel_mismatch_is_an_error():
    x = Var("x", TensorType((1, 3, 8, 8)))
    w = Var("w", TensorType((4, 5, 3, 3)))
    with pytest.raises(TypeCheckError, match=r"nn\.conv2d"):
        infer_types(IRModule({"main": Function((x, w), call("nn.conv2d", x, w))}))


@needs("concatenate")
def test_concatenate_symbolic_dims_flow_through():
    n, t = SymDim("n"), SymDim("t")
    a, b = Var("a", TensorType((n, t, 100))), Var("b", TensorType((n, t, 100)))
    y = call("concatenate", Tuple((a, b)), axis=-1)
    z = call("concatenate", Tuple((y, a)), axis=-1)
    assert infer_expr(z) == TensorType((n, t, 300))
    assert y.checked_type == TensorType((n, t, 200))
    assert y.args[0].checked_type.fields == (a.type_annotation, b.type_annotation)


@needs("split", "add")
def test_tuple_result_of_an_op_projected():
    x = Var("x", TensorType((6, 4)))
    parts = call("split", x, indices_or_sections=3, axis=0)
    s = call("add", TupleGetItem(parts, 0), TupleGetItem(parts, 2))
    assert infer_expr(s) == TensorType((2, 4))


@needs("nn.conv2d", "add", "maximum")
@pytest.mark.parametrize("with_lets", [True, False])
def test_two_hundred_layers_type_check_quickly(with_lets):
    """200 conv layers (weights inferred) as a let chain, or as one nested call graph."""
    layers = 200
    x = Var("x", TensorType((1, 4, 8, 8)))
    weights = [Var(f"w{i}") for i in range(layers)]
    h = x
    bindings = []
    for i, w in enumerate(weights):
        y = call("nn.conv2d", h, w, channels=4, kernel_size=(3, 3), padding=(1, 1))
        y = call("maximum", call("add", y, const(0.5)), const(0.0))
        if with_lets:
            v = Var(f"h{i}")
            bindings.append((v, y))
            h = v
        else:
            h = y
    body = bind_lets(bindings, h)
    mod = IRModule({"main": Function((x, *weights), body)})
    start = time.perf_counter()
    infer_types(mod)
    elapsed = time.perf_counter() - start
    print(f"200-layer program ({'lets' if with_lets else 'nested calls'}): {elapsed:.3f} s")
    assert elapsed < 4.0  # well under a second on an idle core; slack for a loaded CI machine
    assert all(w.checked_type == TensorType((4, 4, 3, 3)) for w in weights)
    assert mod["main"].checked_type.ret_type == TensorType((1, 4, 8, 8))
