"""A split's fields fuse into their readers (`FusionPlan.slice_fields`, `transform.split_fields`):
which groups FuseOps forms, where the rewrite does not apply, and builds against the interpreter."""

from dataclasses import replace

import numpy as np
import pytest
from transform_nets import assert_same_outputs, typed

import autorelay
from autorelay.ir import Call, IRModule, post_order
from autorelay.transform import FuseOps, FusionPlan, primitive_functions

LSTM_CELL = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 16), float32], %h: Tensor[(2, 8), float32], %c: Tensor[(2, 8), float32],
          %wx: Tensor[(32, 16), float32], %wh: Tensor[(32, 8), float32], %b: Tensor[(32,), float32]) {
  %0 = add(add(nn.dense(%x, %wx, units=32), nn.dense(%h, %wh, units=32)), %b);
  %1 = split(%0, indices_or_sections=4, axis=1);
  %2 = add(multiply(sigmoid(%1.1), %c), multiply(sigmoid(%1.0), tanh(%1.2)));
  (multiply(sigmoid(%1.3), tanh(%2)), %2)
}"""

# exp(x + 1) is read only by the split: each field takes its own copy of the chain
CHAIN = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 10, 3), float32]) {
  %0 = split(exp(add(%x, 1f)), indices_or_sections=[3, 7], axis=-2);
  (negative(%0.0), sqrt(abs(%0.1)), multiply(%0.2, 2f))
}"""

# the split's input is also read whole (by `sum`), a field is read twice, and the tuple is returned
# whole by a second split: only the first split is rewritten, and nothing is copied
NOT_SLICED = """#[version = "0.0.5"]
def @main(%x: Tensor[(4, 6), float32]) {
  %0 = exp(%x);
  %1 = split(%0, indices_or_sections=2, axis=1);
  %2 = add(%1.0, 1f);
  %3 = multiply(%1.0, %1.1);
  (%2, %3, sum(%0), split(%x, indices_or_sections=2, axis=0))
}"""

# the split's input is a concatenation: its tuple goes with each field's copy (shared, it would be
# a tuple-typed parameter of both kernels, which have no compiled form then)
CONCAT = """#[version = "0.0.5"]
def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 5), float32]) {
  %0 = split(concatenate((%x, %y), axis=1), indices_or_sections=[2, 6], axis=1);
  (%0.0, %0.2)
}"""


def _groups(out: IRModule) -> list[list[str]]:
    return sorted(sorted(n.op.name for n in post_order(fn) if isinstance(n, Call) and hasattr(n.op, "name"))
                  for fn in primitive_functions(out))


def _fused(text: str, plan: FusionPlan) -> tuple[IRModule, IRModule]:
    mod = typed(autorelay.parse(text))
    return mod, FuseOps(plan=plan)(mod)


def test_an_lstm_cell_fuses_its_gates_into_the_two_state_updates():
    mod, out = _fused(LSTM_CELL, FusionPlan.default())
    assert_same_outputs(mod, out)
    groups = _groups(out)
    assert not any("split" in g for g in groups)
    # the cell state: three gates; the hidden state: the output gate and tanh of the cell state
    assert sorted(g.count("strided_slice") for g in groups) == [0, 0, 1, 3]
    cell = next(g for g in groups if g.count("strided_slice") == 3)
    # the gate bias and the sum of the two products are copied into each gate's slice
    assert cell.count("add") == 1 + 2 * 3
    whole = _groups(FuseOps(plan=replace(FusionPlan.default(), slice_fields=False))(mod))
    assert ["split"] in [[n for n in g if n != "add"] for g in whole]
    assert len(groups) == len(whole) - 1


def test_a_chain_read_only_by_the_fields_is_copied_into_each():
    mod, out = _fused(CHAIN, FusionPlan.default())
    assert_same_outputs(mod, out)
    groups = _groups(out)
    assert len(groups) == 3 and all(g.count("exp") == 1 and g.count("strided_slice") == 1 for g in groups)


def test_fields_read_twice_or_tuples_used_whole_keep_their_values():
    mod, out = _fused(NOT_SLICED, FusionPlan.default())
    assert_same_outputs(mod, out)
    groups = _groups(out)
    assert sum(g.count("exp") for g in groups) == 1  # read whole by sum: not copied
    assert ["split"] in groups  # the tuple returned whole
    assert ["strided_slice"] in groups  # field 0 has two readers: its own kernel, as the split was


def test_plans_without_the_rewrite_and_plans_that_fuse_nothing():
    plain = replace(FusionPlan.default(), slice_fields=False)
    assert FusionPlan.from_json(plain.to_json()) == plain and "slice_fields=False" in repr(plain)
    assert "slice_fields" not in FusionPlan.default().to_json()
    assert FusionPlan.from_json({"rules": [], "max_depth": 1}).slice_fields
    for plan in (plain, FusionPlan.none()):  # with no injective fusion a copy would run whole
        _, out = _fused(CHAIN, plan)
        groups = _groups(out)
        assert sum(g.count("exp") for g in groups) == 1 and any("split" in g for g in groups)


def test_a_concatenation_split_in_fields_fuses_into_each():
    mod, out = _fused(CONCAT, FusionPlan.default())
    assert_same_outputs(mod, out)
    assert _groups(out) == [["concatenate", "strided_slice"]] * 2
    assert all(isinstance(p.type_annotation, autorelay.ir.TensorType)
               for fn in primitive_functions(out) for p in fn.params)


@pytest.mark.parametrize("text", [LSTM_CELL, CHAIN, NOT_SLICED, CONCAT])
@pytest.mark.parametrize("threads", [1, 2])
def test_builds_match_the_interpreter(text, threads):
    mod = autorelay.parse(text)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal(p.type_annotation.concrete_shape).astype("float32")
            for p in mod["main"].params]
    want = autorelay.evaluate(mod, *args)
    exe = autorelay.build(mod, threads=threads)
    assert exe.report.fallbacks == []
    got = exe(*args)
    flat = lambda v: [np.asarray(a) for x in v for a in (x if isinstance(x, tuple | list) else [x])]
    for g, w in zip(flat(got), flat(want), strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


DYNAMIC = """#[version = "0.0.5"]
def @main(%x: Tensor[(?, 8), float32]) {
  %0 = split(exp(%x), indices_or_sections=2, axis=0);
  (negative(%0.0), %0.1)
}"""


def test_a_split_along_a_dynamic_axis_is_left_as_it_is():
    text = DYNAMIC
    _, out = _fused(text, FusionPlan.default())
    assert any("split" in g for g in _groups(out)) and not any("strided_slice" in g for g in _groups(out))
    # along a static axis of the same dynamic tensor, the fields are slices
    _, out = _fused(text.replace("axis=0", "axis=1"), FusionPlan.default())
    assert not any("split" in g for g in _groups(out))


@pytest.mark.parametrize("axis", [0, 1])
def test_the_vm_runs_sliced_fields_of_dynamic_tensors(axis):
    from autorelay.runtime import vm

    mod = autorelay.parse(DYNAMIC.replace("axis=0", f"axis={axis}"))
    exe = vm.compile(mod, params={})
    for n in (2, 6):
        x = np.random.default_rng(n).standard_normal((n, 8)).astype("float32")
        for got, want in zip(exe(x), autorelay.evaluate(mod, x), strict=True):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
