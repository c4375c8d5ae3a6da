"""PassMemo: pipelines that begin with the same passes on one source run them once, and every
preparation through the memo equals the same preparation without it."""

import pickle
from dataclasses import dataclass, replace
from typing import ClassVar

import numpy as np
import pytest

from autorelay.ir import Call, Function, GlobalVar, IRModule, TensorType, Var
from autorelay.ir.structural import assert_structural_equal
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import call
from autorelay.transform import DeadCodeElimination, FoldConstant, FunctionPass, FusionPlan, Pipeline
from autorelay.transform.layout_plan import LayoutPlan, conv_layers, plan_pipeline
from autorelay.transform.pass_memo import PassMemo
from autorelay.transform.pipelines import PIPELINES
from autorelay.transform.prepare import prepare
from search.models import load_model


@dataclass(frozen=True)
class CountRuns(FunctionPass):
    """Leaves the module as it is and counts its runs per tag (a test probe)."""

    name: ClassVar[str] = "CountRuns"
    runs: ClassVar[dict[str, int]] = {}
    tag: str = ""

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        CountRuns.runs[self.tag] = CountRuns.runs.get(self.tag, 0) + 1
        return fn


@dataclass(frozen=True)
class Negate(FunctionPass):
    """Wraps every relu in a negation: a pass whose result differs from its input."""

    name: ClassVar[str] = "Negate"

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        class M(ExprMutator):
            def visit_call(self, c: Call) -> Call:
                new = super().visit_call(c)
                return call("negative", new) if c.op.name == "nn.relu" else new

        return M().visit(fn)


@dataclass(frozen=True)
class Unhashable(FunctionPass):
    name: ClassVar[str] = "Unhashable"
    options: list = None  # type: ignore[assignment]  # a list makes the pass value unhashable

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        return fn


def _mod() -> IRModule:
    x = Var("x", TensorType((4, 5)))
    return IRModule.from_expr(Function((x,), call("nn.relu", call("add", x, x))))


@pytest.fixture(autouse=True)
def _fresh_counts():
    CountRuns.runs.clear()


def test_a_shared_prefix_runs_once_and_the_records_cover_the_passes_run():
    memo, mod = PassMemo(), _mod()
    first = Pipeline([CountRuns(tag="a"), Negate(), CountRuns(tag="b")]).run(mod, memo)
    second = Pipeline([CountRuns(tag="a"), Negate(), CountRuns(tag="c")]).run(mod, memo)
    assert CountRuns.runs == {"a": 1, "b": 1, "c": 1}
    assert [r.name for r in first.records] == ["CountRuns", "Negate", "CountRuns"]
    assert [r.name for r in second.records] == ["CountRuns"]  # resumed after Negate
    alone = Pipeline([CountRuns(tag="a"), Negate(), CountRuns(tag="c")])(mod)
    assert_structural_equal(second.module, alone)
    again = Pipeline([CountRuns(tag="a"), Negate(), CountRuns(tag="c")]).run(mod, memo)
    assert again.records == [] and again.module is second.module  # all of it held
    assert memo.hits == 2 + 3


def test_passes_compare_by_value_and_options_tell_prefixes_apart():
    memo, mod = PassMemo(), _mod()
    Pipeline([CountRuns(tag="a"), Negate()])(mod, memo)
    Pipeline([CountRuns(tag="a"), Negate()])(mod, memo)  # equal values, new objects
    Pipeline([CountRuns(tag="z"), Negate()])(mod, memo)  # another option: another prefix
    assert CountRuns.runs == {"a": 1, "z": 1}


def test_another_source_of_equal_structure_does_not_match():
    memo = PassMemo()
    Pipeline([CountRuns(tag="a")])(_mod(), memo)
    Pipeline([CountRuns(tag="a")])(_mod(), memo)
    assert CountRuns.runs == {"a": 2} and memo.hits == 0


@pytest.mark.parametrize("options", [{"verify": False}, {"dump_after": ["CountRuns"]}])
def test_unverified_or_dumping_pipelines_ignore_the_memo(options):
    memo, mod = PassMemo(), _mod()
    for _ in range(2):
        Pipeline([CountRuns(tag="a")], **options)(mod, memo)
    assert CountRuns.runs == {"a": 2} and len(memo) == 0


def test_a_pass_with_unhashable_options_ignores_the_memo():
    memo, mod = PassMemo(), _mod()
    for _ in range(2):
        Pipeline([CountRuns(tag="a"), Unhashable(options=[1])])(mod, memo)
    assert CountRuns.runs == {"a": 2} and len(memo) == 0


def test_least_recently_used_entries_go_first_and_a_pickled_memo_starts_empty():
    memo, mod = PassMemo(most=2), _mod()
    Pipeline([CountRuns(tag="a"), CountRuns(tag="b"), CountRuns(tag="c")])(mod, memo)
    assert len(memo) == 2  # (a) dropped, (a, b) and (a, b, c) held
    Pipeline([CountRuns(tag="a"), CountRuns(tag="d")])(mod, memo)
    assert CountRuns.runs["a"] == 2
    copy = pickle.loads(pickle.dumps(memo))
    assert len(copy) == 0 and copy.most == 2


def test_prepare_shares_the_bound_source_by_the_identity_of_module_and_weights():
    x = Var("x", TensorType((4, 5)))
    w = Var("w", TensorType((4, 5)))
    mod = IRModule.from_expr(Function((x, w), call("nn.relu", call("add", x, w))))
    params = {"w": np.ones((4, 5), "float32")}
    memo = PassMemo()
    pipe = Pipeline([FoldConstant(), CountRuns(tag="a"), DeadCodeElimination()])
    a = prepare(mod, params, pipe, memo=memo)
    b = prepare(mod, params, pipe, memo=memo)
    assert a is b and CountRuns.runs == {"a": 1}
    prepare(mod, {"w": np.zeros((4, 5), "float32")}, pipe, memo=memo)  # other weights: another source
    assert CountRuns.runs == {"a": 2}


def _layout_plans(model) -> list[LayoutPlan]:
    layers = conv_layers(model.mod)
    mixed = LayoutPlan({name: (8 if k % 2 else 0) for k, name in enumerate(layers)})
    banded = LayoutPlan({name: 8 for name in layers},
                        fusion=replace(FusionPlan.default(), depthwise_bands=True, expansions=True))
    return [mixed, banded, replace(banded, fusion=replace(banded.fusion, halos=False))]


def test_every_pipeline_and_plan_prepared_through_the_memo_equals_its_own_preparation():
    model = load_model("mobilenet-v2", image_size=32)
    pipelines = [*PIPELINES, *(plan_pipeline(p) for p in _layout_plans(model))]
    shared = [model.optimized(p) for p in pipelines]
    assert model.passes.hits > 10 * (len(pipelines) - 1)  # the graph optimisations ran once
    for p, got in zip(pipelines, shared):
        alone = prepare(model.mod, model.params, p)
        assert_structural_equal(got, alone)
        assert got.astext() == alone.astext()


def test_fusion_variants_of_one_plan_resume_before_their_fusion():
    model = load_model("mobilenet-v2", image_size=32)
    plan = _layout_plans(model)[1]
    model.optimized(plan_pipeline(plan))
    hits = model.passes.hits
    variant = replace(plan, fusion=replace(plan.fusion, expansions=False))
    got = model.optimized(plan_pipeline(variant))
    n = len(plan_pipeline(variant).passes)
    assert model.passes.hits - hits == n - 1  # only FuseOps ran
    assert_structural_equal(got, prepare(model.mod, model.params, plan_pipeline(variant)))
