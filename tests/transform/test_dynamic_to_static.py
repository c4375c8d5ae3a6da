"""DynamicToStatic: input shapes made static, shape-dependent ops turned into static ones."""

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

import autorelay
from autorelay.ir import AnyDim
from autorelay.runtime.interpreter import evaluate
from autorelay.transform import DynamicToStatic

PROGRAM = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 6), float32], %y: Tensor[(?, 3), float32]) {
  %0 = reshape(%x, newshape=[-1, 3]);
  %1 = add(%0, ones_like(%0));
  %2 = multiply(%1, full_like(%0, 2f));
  %3 = reshape_like(%2, %y);
  add(cast_like(%3, %y), zeros_like(%3))
}
"""


def test_input_shapes_become_static_and_like_ops_static():
    mod = autorelay.parse(PROGRAM)
    out = DynamicToStatic(input_shapes=(("x", (2, 6)), ("y", (4, 3))))(mod)
    main = autorelay.infer_types(out)["main"]
    assert [p.type_annotation.shape for p in main.params] == [(2, 6), (4, 3)]
    assert main.checked_type.ret_type.shape == (4, 3)
    counts = ops(out)
    assert not {"ones_like", "zeros_like", "full_like", "reshape_like", "cast_like"} & set(counts)
    assert counts["reshape"] == 2 and counts["ones"] == 1 and counts["zeros"] == 1 and counts["full"] == 1
    reshapes = [n for n in autorelay.ir.post_order(main)
                if getattr(getattr(n, "op", None), "name", "") == "reshape"]
    assert {tuple(r.attrs["newshape"]) for r in reshapes} == {(4, 3)}
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((2, 6)).astype("float32"), rng.standard_normal((4, 3)).astype("float32")
    np.testing.assert_allclose(evaluate(out, x, y), evaluate(mod, x, y))


def test_symbolic_shapes_stay_without_input_shapes_and_bad_shapes_are_named():
    mod = autorelay.parse(PROGRAM)
    out = DynamicToStatic()(mod)
    main = autorelay.infer_types(out)["main"]
    assert isinstance(main.params[0].type_annotation.shape[0], AnyDim)
    assert "ones_like" in ops(out)  # result shape unknown: nothing to make static
    with pytest.raises(ValueError, match=r"%x .* cannot take shape"):
        DynamicToStatic(input_shapes=(("x", (2, 5)),))(mod)
    with pytest.raises(ValueError, match="no parameter"):
        DynamicToStatic(input_shapes=(("z", (2, 6)),))(mod)


@pytest.mark.parametrize("net", sorted(NETS))
def test_whole_networks(net):
    mod = typed(NETS[net]())
    shapes = tuple((p.name_hint, p.type_annotation.shape) for p in mod["main"].params)
    out = DynamicToStatic(input_shapes=shapes)(mod)
    assert ops(out) == ops(mod)
    assert_same_outputs(mod, out)
