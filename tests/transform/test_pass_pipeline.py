"""The pass framework: frozen pass values, pipelines with timing/op counts/dumps, ill-typed output
caught with the pass's name, and the named pipelines' explicit lists."""

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from transform_nets import NETS, assert_same_outputs, ops, typed

from autorelay.ir import Call, Function, GlobalVar, IRModule, Op, TensorType, Var, const
from autorelay.ir.visitor import ExprMutator
from autorelay.op.registry import call
from autorelay.transform import (
    PIPELINES,
    DeadCodeElimination,
    FoldConstant,
    FunctionPass,
    FuseOps,
    FusionPlan,
    PassError,
    Pipeline,
    SimplifyInference,
    describe,
    pipeline,
    pipeline_passes,
)


@dataclass(frozen=True)
class BreakShapes(FunctionPass):
    """A deliberately wrong pass: adds a (3,)-vector to every relu's (4, 5) result."""

    name: ClassVar[str] = "BreakShapes"

    def transform_function(self, fn: Function, mod: IRModule, gv: GlobalVar) -> Function:
        class M(ExprMutator):
            def visit_call(self, c: Call) -> Call:
                new = super().visit_call(c)
                if isinstance(c.op, Op) and c.op.name == "nn.relu":
                    return call("add", new, const(np.zeros(3, "float32")))
                return new

        return M().visit(fn)


def _relu_mod() -> IRModule:
    x = Var("x", TensorType((4, 5)))
    return IRModule.from_expr(Function((x,), call("nn.relu", call("add", x, x))))


def test_passes_are_frozen_values_with_typed_options():
    p = FuseOps(plan=FusionPlan(max_depth=3))
    assert p.name == "FuseOps" and p.plan.max_depth == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.plan = FusionPlan()
    assert DeadCodeElimination(inline_once=True) == DeadCodeElimination(inline_once=True)
    assert DeadCodeElimination(inline_once=True) != DeadCodeElimination()


def test_ill_typed_output_is_caught_naming_the_pass():
    pipe = Pipeline([FoldConstant(), BreakShapes(), DeadCodeElimination()])
    with pytest.raises(PassError) as err:
        pipe.run(_relu_mod())
    assert err.value.pass_name == "BreakShapes"
    assert "BreakShapes" in str(err.value) and "ill-typed" in str(err.value)


def test_pipeline_records_time_and_op_counts_and_dumps():
    seen = []
    mod = typed(NETS["resnet"]())
    pipe = Pipeline([SimplifyInference(), FoldConstant(), FuseOps()], dump_after=["FoldConstant"],
                    dump=lambda name, text: seen.append((name, text)))
    res = pipe.run(mod)
    names = [r.name for r in res.records]
    assert names == ["SimplifyInference", "FoldConstant", "FuseOps"]
    bn = ops(mod)["nn.batch_norm"]
    assert res.records[0].ops_before == sum(ops(mod).values())
    assert res.records[0].ops_after > res.records[0].ops_before  # batch norms became arithmetic
    assert res.records[1].ops_after < res.records[1].ops_before  # constant scale/shift folded
    assert res.records[2].primitive_functions > 0 and bn > 0
    assert all(r.seconds >= 0 for r in res.records) and res.total_seconds > 0
    assert seen and seen[0][0] == "FoldConstant" and "nn.batch_norm" not in seen[0][1]
    assert res.dumps["FoldConstant"] == seen[0][1]
    report = res.report()
    for n in names:
        assert n in report
    assert_same_outputs(mod, res.module)


def test_pipeline_rejects_bad_arguments():
    with pytest.raises(TypeError, match="Pass values"):
        Pipeline([FoldConstant, DeadCodeElimination()])
    with pytest.raises(ValueError, match="not in the pipeline"):
        Pipeline([FoldConstant()], dump_after=["FuseOps"])
    with pytest.raises(ValueError, match="unknown pipeline 'O3'"):
        pipeline("O3")


def test_named_pipelines_are_explicit_lists():
    assert set(PIPELINES) == {"O0", "default", "nchwc", "nchwc16", "nchwc-direct", "nchwc16-direct", "tune",
                              "gpu"}
    for name in PIPELINES:
        passes = pipeline_passes(name)
        assert [p.name for p in pipeline(name).passes] == [p.name for p in passes]
        assert len(describe(name).splitlines()) == len(passes)
    o0 = ["ToGraphNormalForm", "WidenFloat16", "SimplifyInference", "FuseOps"]
    assert [p.name for p in pipeline_passes("O0")] == o0
    for name in PIPELINES:  # float16 is computed in float32 by every pipeline, before anything else
        assert [p.name for p in pipeline_passes(name)][:2] == ["ToGraphNormalForm", "WidenFloat16"]
    default = [p.name for p in pipeline_passes("default")]
    assert default[-1] == "FuseOps" and "FoldScaleAxis" in default and "FoldConstant" in default
    for name in ("nchwc-direct", "nchwc16-direct", "tune"):  # blocked, and no conv taken by Winograd
        names = [p.name for p in pipeline_passes(name)]
        assert "ConvertLayout" in names and "WinogradConv" not in names
    assert "WinogradConv" in [p.name for p in pipeline_passes("nchwc16")]
    gpu = [p.name for p in pipeline_passes("gpu")]  # direct convolutions: no Winograd, no packing
    assert gpu[-1] == "FuseOps" and "WinogradConv" not in gpu and "ConvertLayout" not in gpu


@pytest.mark.parametrize("name", ["O0", "default", "nchwc", "nchwc16", "nchwc-direct", "nchwc16-direct",
                                  "gpu"])
@pytest.mark.parametrize("net", sorted(NETS))
def test_named_pipelines_preserve_meaning(name, net):
    mod = typed(NETS[net]())
    out = pipeline(name)(mod)
    assert "nn.batch_norm" not in ops(out) and "nn.dropout" not in ops(out)
    assert_same_outputs(mod, out)


def test_single_pass_call_infers_types_when_needed():
    out = SimplifyInference()(NETS["mlp"]())  # untyped input: the pass types it first
    assert "nn.dropout" not in ops(out)


def test_a_thousand_op_network_goes_through_the_default_pipeline_in_seconds():
    import time

    from transform_nets import resnet_chain

    mod = resnet_chain(blocks=145, channels=4, image=4)  # 1,032 ops, ~3,800 IR nodes
    assert sum(ops(mod).values()) > 1000
    t0 = time.perf_counter()
    res = pipeline("default").run(mod)  # type checks after every pass included
    elapsed = time.perf_counter() - t0
    assert elapsed < 30, f"default pipeline took {elapsed:.1f} s on a 1,000-op network"
    assert "nn.batch_norm" not in ops(res.module)
    assert_same_outputs(mod, res.module)
