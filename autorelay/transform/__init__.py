"""Graph-level transformations: passes as frozen dataclasses, composed by explicit pipelines.

The gradient transform lives in `autorelay.transform.gradient` and is imported from there.
"""

from autorelay.transform.bind import bind_params
from autorelay.transform.conv_transpose_phases import ConvTransposePhases
from autorelay.transform.convert_layout import ConvertLayout
from autorelay.transform.cse import EliminateCommonSubexpr
from autorelay.transform.dce import DeadCodeElimination
from autorelay.transform.dynamic_to_static import DynamicToStatic
from autorelay.transform.fold_constant import FoldConstant
from autorelay.transform.fold_scale_axis import FoldScaleAxis
from autorelay.transform.fuse_ops import FuseOps, candidate_edges, fused_edges
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.inline import InlineGlobals
from autorelay.transform.matmul_to_dense import MatmulToDense
from autorelay.transform.normal_form import ToANormalForm, ToBasicBlockNormalForm, ToGraphNormalForm
from autorelay.transform.partial_eval import PartialEvaluate
from autorelay.transform.pass_base import (
    FunctionPass,
    ModulePass,
    Pass,
    PassError,
    PassRecord,
    Pipeline,
    PipelineResult,
)
from autorelay.transform.pipelines import PIPELINES, default_pipeline, describe, pipeline, pipeline_passes
from autorelay.transform.simplify_expr import SimplifyExpr
from autorelay.transform.simplify_inference import SimplifyInference
from autorelay.transform.util import count_ops, op_histogram, primitive_functions

__all__ = [
    "PIPELINES",
    "ConvTransposePhases",
    "ConvertLayout",
    "DeadCodeElimination",
    "DynamicToStatic",
    "EliminateCommonSubexpr",
    "FoldConstant",
    "FoldScaleAxis",
    "FunctionPass",
    "FuseOps",
    "FusionPlan",
    "InlineGlobals",
    "MatmulToDense",
    "ModulePass",
    "PartialEvaluate",
    "Pass",
    "PassError",
    "PassRecord",
    "Pipeline",
    "PipelineResult",
    "SimplifyExpr",
    "SimplifyInference",
    "ToANormalForm",
    "ToBasicBlockNormalForm",
    "ToGraphNormalForm",
    "bind_params",
    "candidate_edges",
    "count_ops",
    "default_pipeline",
    "describe",
    "fused_edges",
    "op_histogram",
    "pipeline",
    "pipeline_passes",
    "primitive_functions",
]
