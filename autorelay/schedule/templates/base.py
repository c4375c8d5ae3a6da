"""Template protocol and registry.

A template is chosen by the tag of a compute's output (`dense`, `conv2d_nchwc`, ...; untagged
computes fall back to `injective` or `reduction` by their shape). It declares the knobs of a
workload (`space`), expands a Config into Steps (`steps`) and proposes a heuristic `default`.
"""

from __future__ import annotations

from dataclasses import dataclass

from autorelay.errors import ScheduleError
from autorelay.schedule.space import Config, Space
from autorelay.schedule.steps import Step
from autorelay.target import Target
from autorelay.te.expr import Reduce
from autorelay.te.tensor import ComputeDef, Tensor, topo_order


class Template:
    name = "template"
    tags: tuple[str, ...] = ()
    kind = "cpu"  # the target kind the template schedules for
    # knobs whose best value follows the batch rather than the register tile: how much of the
    # layer one parallel unit covers, against the caches (a weight pass's rows, Winograd's fused
    # unit). A config tuned at another batch must agree with the defaults on them
    # (`carries_across_batch`).
    batch_knobs: tuple[str, ...] = ()

    def space(self, cdef: ComputeDef, target: Target) -> Space:
        raise NotImplementedError

    def default(self, cdef: ComputeDef, target: Target) -> Config:
        raise NotImplementedError

    def steps(self, cdef: ComputeDef, config: Config, target: Target) -> tuple[Step, ...]:
        raise NotImplementedError

    def claims(self, cdef: ComputeDef) -> bool:
        """Whether the template schedules `cdef`, whose tag it lists (a tag can cover variants that
        one template handles and another does not, e.g. grouped convolutions)."""
        return True

    def check(self, config: Config) -> None:
        if config.template != self.name:
            raise ScheduleError(f"config for template {config.template!r} given to {self.name!r}")

    def carries_across_batch(self, config: Config, cdef: ComputeDef, target: Target) -> bool:
        """Whether `config`, tuned on a workload of another batch, suits `cdef`: its `batch_knobs`
        are what `cdef`'s default chooses. Where they differ, the rest of the config was tuned
        around a unit of another size too (a weight pass's register tile may be one that would
        spill without it), and the default serves better. ResNet-18 at batch 8 from batch-1 logs
        (2-core Zen 5, nchwc16): donor configs as they were ran 1.075x and 1.017x the default
        schedules (plan and per-model logs); with only the batch knobs reset, 1.017x and 0.930x;
        with such configs refused, 0.923x and 0.934x."""
        if not self.batch_knobs:
            return True
        default = self.default(cdef, target)
        return all(config[k] == default[k] for k in self.batch_knobs)


_TEMPLATES: dict[str, Template] = {}


def register(t: Template) -> Template:
    _TEMPLATES[t.name] = t
    return t


def templates() -> dict[str, Template]:
    _load()
    return dict(_TEMPLATES)


def _load() -> None:
    from autorelay.schedule.templates import (  # noqa: F401 - registers templates
        bf16,
        conv,
        conv_nchwc,
        conv_nchwc_dwpw,
        conv_nchwc_pool,
        cuda,
        cuda_conv,
        cuda_igemm,
        cuda_reduction,
        dense,
        depthwise,
        generic,
        int8,
        pointwise,
        pool_nchwc,
        winograd,
        winograd_nchwc,
        winograd_nchwc_pool,
    )


@dataclass(frozen=True)
class Pattern:
    """The stages a template schedules: the output, the main reduction (if any), the rest."""

    output: Tensor
    reduce: Tensor | None
    others: tuple[Tensor, ...]


def pattern(cdef: ComputeDef) -> Pattern:
    out = cdef.output
    stages = [t for t in topo_order([out]) if t.op is not None]
    reds = [t for t in stages if isinstance(t.op.body, Reduce)]
    main = out if out in reds else (reds[-1] if reds else None)
    others = tuple(t for t in stages if t is not out and t is not main)
    return Pattern(out, main, others)


POOL_TAG = "pool"
POOLED_CONV_TAGS = ("conv2d_nchwc", "conv2d_winograd_nchwc")  # the convolutions a pooling may end


def conv_and_pool(cdef: ComputeDef, tag: str | None = None) -> tuple[Tensor, Tensor] | None:
    """The convolution's reduction and the pooling of a kernel that max-pools a blocked
    convolution (`FusionPlan.pool_epilogues`: the pooling is the output, the convolution's
    reduction, tagged `tag` or any of `POOLED_CONV_TAGS`, its only other reduction), else None.
    `conv2d_nchwc_pool` and `conv2d_winograd_nchwc_pool` schedule such kernels; no other may."""
    out = cdef.output
    if out.op is None or out.op.tag != POOL_TAG or not isinstance(out.op.body, Reduce):
        return None
    stages = [t for t in topo_order([out]) if t is not out and t.op is not None]
    reds = [t for t in stages if isinstance(t.op.body, Reduce)]  # type: ignore[union-attr]
    tags = (tag,) if tag else POOLED_CONV_TAGS
    if len(reds) != 1 or reds[0].op.tag not in tags:  # type: ignore[union-attr]
        return None
    return reds[0], out


@dataclass(frozen=True)
class DepthwiseBand:
    """The stages of a kernel that computes a depthwise convolution per band of rows inside the 1x1
    convolution reading it (`FusionPlan.depthwise_bands`): `band` is the stage the 1x1 reads (the
    depthwise output's activated tail, or the depthwise convolution itself). With an expansion
    (`FusionPlan.expansions`), `expansion` is the convolution producing the depthwise input,
    `expanded` its activated tail (or itself) and `staged` the stage the depthwise convolution reads:
    its padding of `expanded`, or `expanded` itself."""

    depthwise: Tensor
    band: Tensor
    pointwise: Tensor
    expansion: Tensor | None = None
    expanded: Tensor | None = None
    staged: Tensor | None = None


def depthwise_band(cdef: ComputeDef) -> DepthwiseBand | None:
    """The depthwise band of a kernel whose main reduction is a 1x1 `conv2d_nchwc`, unstrided (its
    rows are its input's), that reads a depthwise NCHW[x]c convolution through injective stages,
    its only other reduction but for a `conv2d_nchwc` producing that depthwise convolution's input
    (an expansion); else None.
    `conv2d_nchwc_dwpw` schedules such kernels; no other template may."""
    pointwise = pattern(cdef).reduce
    if pointwise is None or pointwise.op.tag != "conv2d_nchwc":  # type: ignore[union-attr]
        return None
    reds = [t for t in topo_order([pointwise]) if t.op is not None and isinstance(t.op.body, Reduce)]
    expansion = reds.pop(0) if len(reds) == 3 and reds[0].op.tag == "conv2d_nchwc" else None  # type: ignore[union-attr]
    if len(reds) != 2 or reds[0].op.tag != "depthwise_nchwc":  # type: ignore[union-attr]
        return None
    reads = [t for t in pointwise.op.inputs() if t.op is not None]  # type: ignore[union-attr]
    taps = [a.extent for a in pointwise.op.reduce_axes[1:]]  # type: ignore[union-attr]
    if len(reads) != 1 or taps != [1, 1] or tuple(reads[0].shape[2:4]) != tuple(pointwise.shape[2:4]):
        return None
    if expansion is None:
        return DepthwiseBand(reds[0], reads[0], pointwise)
    dw_reads = [t for t in reds[0].op.inputs() if t.op is not None]  # type: ignore[union-attr]
    expanded = [t.op.inputs()[0] if t.op.tag == "pad" else t for t in dw_reads]  # type: ignore[union-attr]
    if len(expanded) != 1 or expanded[0].op is None or tuple(expanded[0].shape) != tuple(expansion.shape):
        return None
    return DepthwiseBand(reds[0], reads[0], pointwise, expansion, expanded[0], dw_reads[0])


def blocked_window_pool(cdef: ComputeDef) -> bool:
    """Whether `cdef` pools float32 windows (a 2-d `pool_size`) of NCHW[x]c data on its own:
    `pool2d_nchwc` schedules such kernels, the generic reduction template the other poolings."""
    red = pattern(cdef).reduce
    if red is None or red.op is None or red.op.tag != POOL_TAG or red.ndim != 5:
        return False
    window = red.op.attrs.get("pool_size")
    return (window is not None and len(red.op.reduce_axes) == 2 and red.dtype == "float32"
            and conv_and_pool(cdef) is None)


def tile_waste(size: int, tile: int) -> float:
    """Work done per useful element when `size` is covered by tiles of `tile` (ragged edge tiles
    compute their full extent): what tile-choosing defaults divide their score by."""
    return -(-size // tile) * tile / size


def check_in_space(cdef: ComputeDef, config: Config, target: Target) -> None:
    """Raise ScheduleError unless `config` is a point of its template's space for this workload,
    and that template is one of those scheduling it on `target` (`template_choices`: any
    alternative, not only the default). A logged config may predate a template change; templates
    read their knobs without re-checking them, so a config from outside the space must be caught
    here."""
    if config.template not in template_choices(cdef, target):
        # a config of a template that does not schedule this compute here (another workload's
        # alternative, another kind's): its space may still parse the knobs, the steps would not fit
        raise ScheduleError(f"template {config.template} does not schedule {cdef.name} on a {target.kind} "
                            "target")
    try:
        template_for(cdef, config.template).space(cdef, target).index(config)
    except (KeyError, ValueError, TypeError) as e:
        raise ScheduleError(f"config not in the {config.template} space of {cdef.name}: {e}") from None


def template_for(cdef: ComputeDef, name: str | None = None, target: Target | None = None) -> Template:
    """The template named `name`, or the one claiming `cdef` among the templates of `target`'s
    kind (None: the CPU's)."""
    _load()
    if name is not None:
        if name not in _TEMPLATES:
            raise ScheduleError(f"unknown template {name!r} (known: {', '.join(sorted(_TEMPLATES))})")
        return _TEMPLATES[name]
    kind = target.kind if target is not None else "cpu"
    prefix = "" if kind == "cpu" else f"{kind}_"
    pat = pattern(cdef)
    if pat.reduce is None:
        return _TEMPLATES[f"{prefix}injective"]
    for tag in (pat.reduce.op.tag, pat.output.op.tag):
        for t in _TEMPLATES.values():
            if tag and tag in t.tags and t.kind == kind and t.name != f"{prefix}injective" and t.claims(cdef):
                return t
    if f"{prefix}reduction" not in _TEMPLATES:
        raise ScheduleError(f"{cdef.name}: no {kind} template schedules this reduction yet")
    return _TEMPLATES[f"{prefix}reduction"]


def template_choices(cdef: ComputeDef, target: Target | None = None) -> list[str]:
    """Names of every template that schedules `cdef` on `target`'s kind, `template_for`'s choice
    first: the alternatives a tuner may compare (a conv2d on cuda: `cuda_conv2d`, the direct form,
    and `cuda_conv2d_igemm`, the implicit GEMM), each a task of its own (`kernel_task(template=)`)."""
    first = template_for(cdef, target=target)
    kind = target.kind if target is not None else "cpu"
    prefix = "" if kind == "cpu" else f"{kind}_"
    pat = pattern(cdef)
    tags = {t for t in (pat.reduce.op.tag, pat.output.op.tag) if t} if pat.reduce is not None else set()
    # as in `template_for`, the injective template is no alternative for a reduction: a fused epilogue
    # (bias, ReLU) tags the output `elemwise`/`broadcast`, which it lists, but it only copies
    others = [t.name for t in _TEMPLATES.values()
              if t is not first and t.kind == kind and t.name != f"{prefix}injective"
              and tags & set(t.tags) and t.claims(cdef)]
    return [first.name, *others]
