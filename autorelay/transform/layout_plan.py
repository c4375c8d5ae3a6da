"""A per-layer layout plan: which channel block each convolution of a model runs in.

The named pipelines choose one layout for the whole model (`default`: NCHW with Winograd where it
pays, `nchwc`/`nchwc16`: blocks of 8/16). A `LayoutPlan` chooses per convolution layer, named as
the quantizer names layers (`conv2d_0`, `conv2d_1`, … in post order of `@main`; see
`autorelay.transform.quantize.layers`: the names depend only on the graph's structure, so they
survive the inference rewrites that run before the layout is chosen). Block 0 keeps a layer in
plain NCHW; a block b packs it as NCHW{b}c (shrunk to a divisor of its channel counts, as
`ConvertLayout` does). Layers the plan does not name stay in NCHW. NCHW is `default`'s: a grouped
or dilated convolution left there is packed in blocks as `default` packs it (`BlockGroupedConvs`:
NCHW has no grouped template, and the layout program does not model a packing of several narrow
groups to a block, so it names no such layer; left to the generic schedule, a 4-group layer of a
small CNN ran 190 us against 45 packed).

A layer may run as Winograd: `winograd[layer]` is its output tile (2: F(2x2, 3x3), 4: F(4x4,
3x3), 0: direct), in the layer's layout: plain NCHW, or the blocked Winograd kernel in NCHW{b}c. A
layer it does not name runs direct when blocked, and in NCHW gets F(2x2) exactly where `default`
applies it. Winograd reads and writes the layer's own layout, so the tile is a choice local to the
layer (the layout program takes a layout's cost as its fastest form's) that never changes a
transform between layers.

A plan may meet a model some of whose layers run in int8 (`autorelay quantize` measures precision
plans on the float model's layout plan). Quantization turns those layers into `qnn.conv2d`, so
the quantized model's conv layers are the float ones, numbered again; `on_quantized` renames the
plan for it, and `int8_block` gives the quantized convolutions their block (0: NCHW).

A plan may also carry a `FusionPlan` (`fusion`; None: Relay's rules): the layout search measures
whether injective producers, such as the layout transforms its blocks imply, run inside the kernel
they feed (`FusionPlan.prologues`), and keeps the edges that paid. Its edges are numbered in the
graph the plan's layouts produce, so the fusion plan belongs to the layout plan.

`plan_passes(plan)` is the pipeline that realises a plan: the graph optimisations, Winograd with the
plan's tiles (every conv it does not name in NCHW by `default`'s rule, the blocked ones direct),
`ConvertLayout` with one block per conv, Winograd or direct (so layout transforms appear only where
neighbouring layers disagree), `BlockGroupedConvs` on the grouped and dilated ones it left in NCHW,
then fusion.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autorelay.ir.expr import Call, Function
from autorelay.ir.module import IRModule
from autorelay.ir.visitor import post_order
from autorelay.op.winograd import CONV as WINOGRAD_CONV
from autorelay.op.winograd import TILE_SIZES
from autorelay.transform.conv_bands import SplitConvBands
from autorelay.transform.conv_transpose_phases import ConvTransposePhases
from autorelay.transform.convert_layout import ConvertLayout
from autorelay.transform.fold_constant import FoldConstant
from autorelay.transform.fuse_ops import FuseOps
from autorelay.transform.fusion_plan import FusionPlan
from autorelay.transform.grouped_blocks import BlockGroupedConvs
from autorelay.transform.pass_base import Pass, Pipeline
from autorelay.transform.pipelines import graph_passes
from autorelay.transform.quantize.layers import layer_calls
from autorelay.transform.simplify_expr import SimplifyExpr
from autorelay.transform.util import op_name, tensor_type
from autorelay.transform.winograd_conv import WinogradConv

PREFIX = "conv2d_"


def conv_layers(mod: IRModule | Function, entry: str = "main") -> list[str]:
    """The names of the conv2d layers of `entry` (`conv2d_0`, …), which a plan may address."""
    return [name for name in layer_calls(mod, entry) if name.startswith(PREFIX)]


def _index(layer: str) -> int:
    if not layer.startswith(PREFIX) or not layer[len(PREFIX):].isdigit():
        raise ValueError(f"LayoutPlan: {layer!r} is not a conv layer name (conv2d_<i>)")
    return int(layer[len(PREFIX):])


def _checked(kind: str, mapping: Mapping[str, int], ok: Callable[[int], bool], what: str) -> dict[str, int]:
    items = sorted(dict(mapping).items(), key=lambda kv: _index(kv[0]))
    for name, v in items:
        if not isinstance(v, int) or isinstance(v, bool) or not ok(v):
            raise ValueError(f"LayoutPlan: {kind} of {name} must be {what}, got {v!r}")
    return dict(items)


@dataclass(frozen=True)
class LayoutPlan:
    """`blocks[layer]`: 0 (NCHW) or the channel block of that conv layer; unnamed layers are 0.
    `winograd[layer]`: the layer's Winograd output tile (0: direct); unnamed: direct when blocked,
    `default`'s rule in NCHW."""

    blocks: Mapping[str, int] = field(default_factory=dict)
    winograd: Mapping[str, int] = field(default_factory=dict)
    int8_block: int = 0  # the block of the quantized (qnn) convolutions, which no name addresses
    fusion: FusionPlan | None = None  # how the planned graph is fused (None: Relay's rules)

    def __post_init__(self) -> None:
        if not isinstance(self.int8_block, int) or isinstance(self.int8_block, bool) or self.int8_block < 0:
            raise ValueError(f"LayoutPlan: int8_block must be an int >= 0, got {self.int8_block!r}")
        if self.fusion is not None and not isinstance(self.fusion, FusionPlan):
            raise ValueError(f"LayoutPlan: fusion must be a FusionPlan or None, got {self.fusion!r}")
        object.__setattr__(self, "blocks", _checked("block", self.blocks, lambda b: b >= 0, "an int >= 0"))
        tiles = (0, *TILE_SIZES)
        object.__setattr__(self, "winograd", _checked("Winograd tile", self.winograd, lambda t: t in tiles,
                                                      f"one of {tiles}"))

    def block(self, layer: str) -> int:
        return self.blocks.get(layer, 0)

    def unknown_layers(self, layers: Iterable[str]) -> list[str]:
        """The layers the plan names that are not among `layers` (a stale plan)."""
        known = set(layers)
        named = [*self.blocks, *(n for n in self.winograd if n not in self.blocks)]
        return [name for name in named if name not in known]

    def conv_blocks(self) -> tuple[tuple[int, int], ...]:
        """`ConvertLayout.conv_blocks`: entry i is the (input, output) block of `conv2d_i`."""
        n = max((_index(name) + 1 for name in self.blocks), default=0)
        return tuple((self.block(f"{PREFIX}{i}"),) * 2 for i in range(n))

    def conv_tiles(self) -> tuple[tuple[int, int], ...]:
        """`WinogradConv.tiles`: (i, tile) for each `conv2d_i` the plan gives a Winograd tile, and
        (i, 0) for each blocked one it gives none (direct: the rule is for NCHW layers)."""
        blocked = [name for name, b in self.blocks.items() if b and name not in self.winograd]
        tiles = {**dict.fromkeys(blocked, 0), **self.winograd}
        return tuple(sorted((_index(name), t) for name, t in tiles.items()))

    @staticmethod
    def uniform(layers: Iterable[str], block: int, winograd: int | None = None) -> LayoutPlan:
        """Every layer in one block; with `winograd`, every layer given that tile (the pass
        rewrites the ones the op can compute: 3x3, stride 1)."""
        names = list(layers)
        return LayoutPlan({n: block for n in names}, {} if winograd is None else {n: winograd for n in names})

    def on_quantized(self, kept: Sequence[str], int8_block: int) -> LayoutPlan:
        """This plan for a quantized model whose conv layers are the float model's `kept` ones (their
        float names, in order: `quantize.float_layers`), numbered again from 0: each keeps its block
        and tile here, named explicitly (0 too, so no float layer takes the int8 block), and the
        int8 convolutions run in `int8_block`. The fusion plan is not carried over: its edges number
        the float graph's ops, and the quantized graph has others."""
        for name in kept:
            _index(name)  # a conv layer's name, else ValueError
        renamed = {name: f"{PREFIX}{i}" for i, name in enumerate(kept)}
        if len(renamed) != len(kept):
            raise ValueError(f"LayoutPlan.on_quantized: a layer is kept twice in {list(kept)}")
        return LayoutPlan({new: self.block(old) for old, new in renamed.items()},
                          {renamed[old]: t for old, t in self.winograd.items() if old in renamed}, int8_block)

    def describe(self) -> str:
        """`conv2d_0:0 conv2d_1:16/F4 …` (compact, for reports): `/F4` after a layer with a Winograd
        tile, `/direct` after an NCHW layer the plan keeps direct."""
        def one(name: str, b: int) -> str:
            t = self.winograd.get(name)
            return f"{name}:{b}" + (f"/F{t}" if t else "/direct" if t == 0 and not b else "")

        int8 = f" int8:{self.int8_block}" if self.int8_block else ""
        fusion = f" fusion:{self.fusion!r}" if self.fusion is not None else ""
        return (" ".join(one(k, v) for k, v in self.blocks.items()) or "(all NCHW)") + int8 + fusion

    # ---- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"blocks": dict(self.blocks)}
        if self.winograd:  # plans stored before tiles were a choice have none, and read back the same
            out["winograd"] = dict(self.winograd)
        if self.int8_block:
            out["int8_block"] = self.int8_block
        if self.fusion is not None:
            out["fusion"] = self.fusion.to_json()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @staticmethod
    def from_json(text: str | Mapping[str, Any]) -> LayoutPlan:
        """The inverse of `to_json` (also takes the parsed dict)."""
        data = json.loads(text) if isinstance(text, str) else dict(text)
        extra = sorted(set(data) - {"blocks", "winograd", "int8_block", "fusion"})
        if extra:
            raise ValueError(f"LayoutPlan JSON has unknown key(s) {', '.join(extra)}")
        fusion = FusionPlan.from_json(data["fusion"]) if data.get("fusion") is not None else None
        return LayoutPlan(dict(data.get("blocks", {})), dict(data.get("winograd", {})),
                          data.get("int8_block", 0), fusion)


def plan_passes(plan: LayoutPlan) -> list[Pass]:
    """The pass list that builds `plan` (see the module docstring)."""
    convert = ConvertLayout(dst="NCHWc", block=0, conv_blocks=plan.conv_blocks(), qnn_block=plan.int8_block)
    return [*graph_passes(), WinogradConv(tiles=plan.conv_tiles()), FoldConstant(), convert,
            ConvTransposePhases(), FoldConstant(),  # after the plan's convs are placed: it adds convs
            BlockGroupedConvs(), FoldConstant(), SimplifyExpr(), SplitConvBands(),
            FuseOps(plan=plan.fusion or FusionPlan.default())]


def plan_pipeline(plan: LayoutPlan, **options: Any) -> Pipeline:
    return Pipeline(plan_passes(plan), **options)


# ---- reading the layouts back from a built module ---------------------------------------------


def _canonical(shape: tuple, layout: str) -> tuple:
    """An NCHW or NCHW{b}c shape as (N, C, H, W)."""
    if layout in ("", "NCHW"):
        return tuple(shape)
    n, co, h, w, ci = shape
    return (n, co * ci, h, w)


def _block(layout: str) -> int:
    return 0 if layout in ("", "NCHW") else int(layout[4:-1])


def conv_signature_and_block(c: Call) -> tuple[tuple, int] | None:
    """(canonical input shape, canonical output shape, kernel height and width), channel block of a
    conv call, or None. The kernel size tells apart layers of equal shapes, such as a ResNet block's
    strided 3x3 convolution and its 1x1 shortcut."""
    name = op_name(c)
    data, out = tensor_type(c.args[0]), tensor_type(c)
    if data is None or out is None:
        return None
    if name not in ("nn.conv2d", WINOGRAD_CONV):
        return None
    lay = c.attrs["data_layout"]
    if lay != "NCHW" and not (lay.startswith("NCHW") and lay.endswith("c")):
        return None
    if name == "nn.conv2d":
        out_lay = c.attrs["out_layout"] or lay
        weight, kernel_layout = tensor_type(c.args[1]), c.attrs["kernel_layout"]
        if weight is None:
            return None
        kernel = (weight.shape[kernel_layout.index("H")], weight.shape[kernel_layout.index("W")])
    else:  # Winograd: the output is blocked as its transformed weight's last axis; always 3x3
        out_lay = lay if lay == "NCHW" else f"NCHW{out.shape[-1]}c"
        kernel = (3, 3)
    return (_canonical(tuple(data.shape), lay), _canonical(tuple(out.shape), out_lay), kernel), _block(lay)


def built_convs(fused: IRModule) -> list[tuple[tuple, int, Function]]:
    """Every conv of a fused module's `@main`, in post order: (signature, block, its primitive fn)."""
    out = []
    for node in post_order(fused["main"].body):
        if isinstance(node, Call) and isinstance(node.op, Function) and node.op.is_primitive:
            for inner in post_order(node.op.body):
                if isinstance(inner, Call):
                    got = conv_signature_and_block(inner)
                    if got is not None:
                        out.append((got[0], got[1], node.op))
    return out


def built_layers(graph: IRModule, fused: IRModule) -> dict[str, tuple[int, Function]]:
    """Each conv layer of `graph` (the module after `graph_passes`, where layers are named) ->
    (its channel block, its primitive function) in `fused`, a build of the same model. Fusion may
    visit a residual block's shortcut before its branch, so layers are matched to built convs by
    their shapes and kernel sizes, in order: exact unless two layers of the same shapes and kernel
    size swapped places."""
    built = built_convs(fused)
    used = [False] * len(built)
    out: dict[str, tuple[int, Function]] = {}
    for name, call in layer_calls(graph).items():
        got = conv_signature_and_block(call) if name.startswith(PREFIX) else None
        if got is None:
            continue
        for i, (sig, block, fn) in enumerate(built):
            if not used[i] and sig == got[0]:
                used[i] = True
                out[name] = (block, fn)
                break
    return out


def logged_plan_pipeline(mod: IRModule, schedules: Any, target: str) -> str | Pipeline:
    """The pipeline of the per-layer layout plan the source holds for this model (`autorelay tune
    --pipeline plan` stored it); `default`, with a warning, when there is none or it is stale."""
    from autorelay.lower import model_key

    get = getattr(schedules, "layout_plan_for", None)
    data = get(model_key(mod), target) if get is not None else None
    why = "the schedule source holds no layout plan for it"
    if data is not None:
        plan = LayoutPlan.from_json(data)
        unknown = plan.unknown_layers(conv_layers(mod))
        if not unknown:
            return plan_pipeline(plan)
        why = f"its stored layout plan is stale (names {', '.join(unknown[:5])}, which the model lacks)"
    warnings.warn(f"build: the model was tuned with a layout plan but {why}; building with the default "
                  "pipeline", stacklevel=3)
    return "default"


__all__ = ["LayoutPlan", "built_convs", "built_layers", "conv_layers", "conv_signature_and_block",
           "logged_plan_pipeline", "plan_passes", "plan_pipeline"]
