"""Named pipelines: each is an explicit list of pass values, printed by `describe`.

There is no opt level and nothing is skipped silently: `pipeline("default")` runs exactly the
passes listed below, in order.

* `O0`: only what lowering needs — the graph normal form (the graph executor runs no `let`), float16
  computed in float32 (`WidenFloat16`), inference-time rewrites of training ops, and every op in its
  own primitive function (no fusion).
* `default`: the graph optimisations (float16 computed in float32 first; products with a constant
  weight in the packed dense form among them: `MatmulToDense`), Winograd F(2x2, 3x3) for the
  stride-1 3x3 convolutions that profit from it (their transformed weights folded at build time),
  grouped and dilated convolutions in channel blocks of 8 (`BlockGroupedConvs`: NCHW has no
  grouped template and a slow dilated one), then Relay's fusion rules.
* `nchwc`: every convolution in channel blocks of 8 (NCHW → NCHW8c, one AVX2 float32 vector per
  block; depthwise and 1x1 convolutions gain most) before fusion, the stride-1 3x3 ones on maps of
  at least `BLOCKED_WINOGRAD_MIN_SIZE` pixels as Winograd F(4x4, 3x3) in the same blocks.

Every pipeline that blocks convolutions then computes a dilated one whose taps read padding over
much of its output in bands of outputs, each over its live taps (`SplitConvBands`).
Every CPU pipeline but `O0` runs a transposed convolution as one stride-1 convolution per output
phase, interleaved (`ConvTransposePhases`), so it takes the conv templates and their blocking.
* `nchwc16`: the same with blocks of 16, one AVX-512 float32 vector (`--pipeline auto` measures it
  on targets with 16 lanes).
* `nchwc-direct`, `nchwc16-direct`: every convolution in channel blocks of 8/16, none as Winograd.
  A direct blocked 3x3 kernel can outrun Winograd's three kernels plus the layout transforms
  around them (ResNet-18 on AVX-512: 1.18x untuned, 1.11x tuned at 800 trials), so `auto`
  measures the direct form too. `tune` is the older name of `nchwc16-direct`, kept so that logs
  which recorded it still build.
* `gpu`: the graph optimisations, then fusion, convolutions left direct in NCHW — the form the GPU
  templates schedule (a GPU block tiles channels and pixels itself; the CPU's channel packing and
  its Winograd split into several kernels only add launches and traffic there). The default for
  `cuda` targets (`default_pipeline`).
"""

from __future__ import annotations

from autorelay.transform.conv_bands import SplitConvBands
from autorelay.transform.conv_transpose_phases import ConvTransposePhases
from autorelay.transform.convert_layout import ConvertLayout
from autorelay.transform.cse import EliminateCommonSubexpr
from autorelay.transform.dce import DeadCodeElimination
from autorelay.transform.fold_constant import FoldConstant
from autorelay.transform.fold_scale_axis import FoldScaleAxis
from autorelay.transform.fuse_ops import FuseOps
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.grouped_blocks import BlockGroupedConvs
from autorelay.transform.matmul_to_dense import MatmulToDense
from autorelay.transform.normal_form import ToGraphNormalForm
from autorelay.transform.pass_base import Pass, Pipeline
from autorelay.transform.simplify_expr import SimplifyExpr
from autorelay.transform.simplify_inference import SimplifyInference
from autorelay.transform.widen_float16 import WidenFloat16
from autorelay.transform.winograd_conv import WinogradConv


def _graph_opts() -> list[Pass]:
    return [
        ToGraphNormalForm(),
        WidenFloat16(),
        SimplifyInference(),
        MatmulToDense(),
        FoldConstant(),
        SimplifyExpr(),
        FoldScaleAxis(),
        FoldConstant(),
        EliminateCommonSubexpr(),
        DeadCodeElimination(),
    ]


def graph_passes() -> list[Pass]:
    """The graph optimisations every float pipeline starts with (a per-layer layout plan's too)."""
    return _graph_opts()


def pipeline_passes(name: str) -> list[Pass]:
    """The pass list of a named pipeline."""
    if name == "O0":
        return [ToGraphNormalForm(), WidenFloat16(), SimplifyInference(), FuseOps(plan=FusionPlan.none())]
    if name == "default":
        grouped = [BlockGroupedConvs(), FoldConstant(), SimplifyExpr(), SplitConvBands()]
        return [*_graph_opts(), ConvTransposePhases(), WinogradConv(), FoldConstant(), *grouped, FuseOps()]
    if name in BLOCKED_PIPELINES:
        block, winograd = pipeline_layout(name)
        packing = [ConvertLayout(dst="NCHWc", block=block), FoldConstant(), SimplifyExpr(), SplitConvBands()]
        first = [WinogradConv(tile=4, min_size=BLOCKED_WINOGRAD_MIN_SIZE)] if winograd else []
        return [*_graph_opts(), ConvTransposePhases(), *first, FoldConstant(), *packing, FuseOps()]
    if name == "gpu":
        return [*_graph_opts(), FuseOps()]
    raise ValueError(f"unknown pipeline {name!r}; known: {', '.join(PIPELINES)}")


# The smallest output (height and width) the blocked pipelines run as Winograd F(4x4). In blocks
# F(4x4) ran ResNet-18's 56- and 28-pixel layers 1.3x faster than the direct kernel (default
# schedules, AVX-512, weights evicted before each call, as in a model); on its 14-pixel layer it
# was even or slower once the direct kernel was tuned, and on the 7-pixel layer 1.6x slower: each
# tile there reuses a transformed weight 4x the direct one's size, streamed from memory.
BLOCKED_WINOGRAD_MIN_SIZE = 24

# the channel-blocked pipelines: (block, whether Winograd takes the stride-1 3x3 convs first)
BLOCKED_PIPELINES = {"nchwc": (8, True), "nchwc16": (16, True), "nchwc-direct": (8, False),
                     "nchwc16-direct": (16, False), "tune": (16, False)}
PIPELINES = ("O0", "default", *BLOCKED_PIPELINES, "gpu")


def pipeline_layout(name: str) -> tuple[int, bool]:
    """How a named pipeline lays out convolutions: (channel block, 0 for NCHW; whether Winograd
    takes the stride-1 3x3 convolutions it profits from: in NCHW for `default`, in the same
    blocks as the other convolutions for the blocked pipelines)."""
    if name in BLOCKED_PIPELINES:
        return BLOCKED_PIPELINES[name]
    return 0, name == "default"


def default_pipeline(target_kind: str) -> str:
    """The pipeline a build or a tune uses when none is named or logged: `gpu` for cuda targets."""
    return "gpu" if target_kind == "cuda" else "default"


def pipeline(name: str, **options) -> Pipeline:
    """`Pipeline(pipeline_passes(name), **options)`; options are Pipeline's (verify, dump_after, dump)."""
    return Pipeline(pipeline_passes(name), **options)


def describe(name: str) -> str:
    """The pipeline as text: one pass (with its options) per line."""
    return "\n".join(f"{i + 1:>2}. {p!r}" for i, p in enumerate(pipeline_passes(name)))
