"""Dividing `--pipeline plan`'s trial budget: which layout alternatives of a conv layer to tune, and
which tasks the scheduler treats as alternatives of one layer.

The plan tunes the kernels of every form a layer may take (NCHW direct, Winograd F(2x2) and
F(4x4), each channel block direct and as F(4x4)): on ResNet-18, before blocked F(4x4) was one of
them, that was 71 tasks where the per-model pick tunes 19, so an 800-trial budget gave each
about 11 trials (8 of them its warm-up round) against 42, and the plan lost to the per-model pick
at equal budgets (0.97x) although it can choose every layer's form.
Most of those forms never had a chance: a block of 8 on an AVX-512 host, or direct NCHW where
Winograd applies, ran 1.4-2.6x slower than the layer's best form with the best config the tuner
found. These measures spend the budget where it can change the model's latency:

* **Screening** (`screen_plan_tasks`): before tuning, the uniform builds (`layout_costs.
  candidate_plans`) are built with default schedules and profiled kernel by kernel, as the
  layout search profiles tuned ones. A form whose default kernel takes more than `PRUNE_RATIO`
  times the layer's fastest default form, on every layer it implements, is not tuned (reported as
  skipped, with the ratio). The threshold is a trade, not a bound: most ResNet-18 kernels gained
  at most 1.5x from tuning, but an NCHW 1x1 convolution, whose default tile is poor, gained 4.27x
  (0.44 -> 0.10 ms) in an unscreened plan tune. A pruned form is still built and measured by the
  layout search, with the config the log transfers from a tuned workload of its template where it
  has one (source `transferred`), else its default; what screening gives up is tuning it.
* **Grouping**: tasks that implement the same set of conv layers are one group of the task
  scheduler (`search.scheduler`): the group's term of the model latency is its fastest member, so
  a trailing form is tuned only while it looks able to overtake the leader. Other kernels (pools,
  the classifier) keep their workload key as group, as in the per-model tune.

* **The default plan's forms are kept**: the screening also runs the layout program on its
  default-schedule costs (re-layouts measured, as the layout search does), and a form that plan
  picks is neither pruned nor deferred. A form can trail its layer's fastest alone and still be
  the plan's choice, since it spares the re-layouts around the layer: in a 1000-trial plan tune
  of the zoo's Inception (Zen 3), conv2d_9's F(4x4) in blocks of 8 was deferred at 1.22x its
  NCHW form, never tuned, and then chosen by the layout search with its default schedule (178 us,
  where the per-model tune had tuned the same kernel).
* **Deferral**: a kept form more than `DEFER_RATIO` behind on every layer it implements skips
  the scheduler's warm-up round (`TaskScheduler`'s `deferred`); it is tuned when the epsilon pick
  draws it or when no other form of its layers is left to tune. In an 800-trial ResNet-18 plan
  tune (AVX-512) the warm-up of the 55 kept tasks took 440 trials. Comparing that tune's kernels
  with a default-schedule profile: the forms that overtook their layer's leader after tuning
  (blocked F(2x2) on the 14-pixel layers) had run 1.09-1.10x behind it with default schedules,
  and no form 1.2-1.5x behind did.

* **Kernels the default plan never runs wait too**: a kernel that is not a conv form (a pooling,
  the classifier, a fused reduction) but exists only in layouts or fusions other than those of
  the default-cost plan's builds (`plan_kernels`: under each fusion variant the layout search
  times) is deferred the same way. On the zoo's Inception a 1000-trial plan tune gave 37 tasks a
  16-trial warm-up, among them the NCHW poolings, the NCHW global pooling and two extra forms of
  the classifier, and ran the convolutions it shares with the per-model tune (same workloads)
  with configs 1.2-1.4x slower than that tune's, which spent the same budget on 17 tasks.

After tuning, the same groups spare the final re-measurement (`trailing_forms`) of forms whose
best config is still far behind their layers' best form, and the layout search leaves out a
channel block whose conv kernels were all pruned, or deferred and never drawn (`untuned_blocks`):
its layers would run there with configs transferred from other workloads. In 800-trial ResNet-18
plan tunes (AVX-512) that was every form in blocks of 8 (25 pruned, 6 deferred), and the search
compiled, profiled and timed three uniform builds and the `nchwc` pipeline in them only to choose
none: leaving them out took the layout search from 45 to 32 s in a pair of tunes, and from 36 to
28 s, two runs each, on one log.
"""

from __future__ import annotations

import math
import time
from collections.abc import Hashable
from dataclasses import dataclass, field, replace

from autorelay.primitive import KernelMemo
from autorelay.target import Target
from autorelay.transform.layout_plan import LayoutPlan
from search.extract import Extraction, Skipped
from search.fusion_choice import fusion_candidates
from search.layout_costs import Form, LayerCost, candidate_blocks, kernel_costs, layout_graph, solved_plan
from search.models import Model
from search.pipeline_choice import prepare_plan

PRUNE_RATIO = 1.5  # a form this much slower than the layer's best (default schedules) is not tuned
DEFER_RATIO = 1.2  # a form this much slower skips the scheduler's warm-up round
TRAILING_RATIO = 1.5  # a tuned form this much slower than its layers' best is not re-measured at the end

@dataclass
class PlanScreen:
    """The screening's answer: per task key, its group and, for a pruned task, why; plus the
    layers' default-schedule costs and the seconds the screening took."""

    groups: dict[str, Hashable] = field(default_factory=dict)
    pruned: dict[str, str] = field(default_factory=dict)
    deferred: dict[str, float] = field(default_factory=dict)  # key -> how far behind its layers' best
    chosen: dict[str, Form] = field(default_factory=dict)  # layer -> its form in the default-cost plan
    primary: frozenset[str] = frozenset()  # the keys of the kernels the default-cost plan's builds run
    costs: dict[str, LayerCost] = field(default_factory=dict)
    seconds: float = 0.0

    def apply(self, ex: Extraction) -> tuple[Extraction, list[Hashable]]:
        """The extraction without the pruned tasks (each listed as skipped, with its reason) and the
        scheduler group of each remaining task."""
        kept = [t for t in ex.tasks if t.key not in self.pruned]
        skipped = list(ex.skipped)
        seen: set[str] = set()
        for t in ex.tasks:
            if t.key in self.pruned and t.key not in seen:
                seen.add(t.key)
                skipped.append(Skipped(t.name, t.key, t.count, self.pruned[t.key]))
        groups = _consistent_groups(kept, self.groups)
        return Extraction(kept, skipped, ex.total_flops), groups

    def waiting(self, ex: Extraction) -> dict[str, float]:
        """The tasks of `ex` that skip the scheduler's warm-up, by key: a deferred conv form -> how
        far behind its layers' best it ran; a kernel of no conv layer that the default-cost plan's
        builds do not run -> nan (no layer to compare with). Without a `primary` set (a screen
        made by hand), only the conv forms."""
        out = {t.key: self.deferred[t.key] for t in ex.tasks if t.key in self.deferred}
        if self.primary:
            out.update({t.key: math.nan for t in ex.tasks
                        if t.key not in self.groups and t.key not in self.primary})
        return out


def layer_forms(costs: dict[str, LayerCost]) -> dict[str, dict[str, Form]]:
    """Per workload key of a conv kernel in any uniform build: each layer it implements -> its form
    (read off the keys `kernel_costs` records)."""
    out: dict[str, dict[str, Form]] = {}
    for name, cost in costs.items():
        for form, key in cost.keys.items():
            out.setdefault(key, {})[name] = form
    return out


def form_seconds(cost: LayerCost, form: Form) -> float | None:
    """A layer's measured seconds in one form (None: not measured, e.g. a form the op refuses)."""
    return cost.forms.get(form)


def screen_plan_tasks(model: Model, target: Target, *, ratio: float = PRUNE_RATIO, rounds: int = 3,
                      repeat: int = 5, memo: KernelMemo | None = None, workers: int = 1) -> PlanScreen:
    """Profile the uniform builds with default schedules and decide each conv task's group and
    whether it is worth tuning (see the module docstring); `memo`: kernels the run's later builds
    reuse (most of a model's kernels are untuned and keep these default schedules); `workers`:
    processes compiling the builds' kernels (`search.kernel_prefetch`)."""
    t0 = time.perf_counter()
    blocks = candidate_blocks(target)
    costs = kernel_costs(model, None, target, blocks, repeat=repeat, rounds=rounds, memo=memo,
                         workers=workers)
    plan = default_plan(model, costs, blocks, target)
    screen = decide(costs, layer_forms(costs), ratio, chosen=plan_forms(plan))
    screen.primary = plan_kernels(model, target, plan)
    screen.seconds = time.perf_counter() - t0
    return screen


def default_plan(model: Model, costs: dict[str, LayerCost], blocks: tuple[int, ...],
                 target: Target) -> LayoutPlan:
    """The plan the layout program picks from `costs` (default schedules) and the measured
    re-layouts between them."""
    return solved_plan(layout_graph(model, costs, blocks, target), costs)[1]


def default_plan_forms(model: Model, costs: dict[str, LayerCost], blocks: tuple[int, ...],
                       target: Target) -> dict[str, Form]:
    """Each conv layer's form in the default-cost plan (`default_plan`)."""
    return plan_forms(default_plan(model, costs, blocks, target))


def plan_forms(plan: LayoutPlan) -> dict[str, Form]:
    """Each conv layer's form, (block, Winograd tile), in `plan`."""
    return {name: (block, plan.winograd.get(name, 0)) for name, block in plan.blocks.items()}


def plan_kernels(model: Model, target: Target, plan: LayoutPlan) -> frozenset[str]:
    """The workload keys of the kernels `plan` runs, under Relay's fusion rules and under each
    fusion variant the layout search would time for it (`fusion_choice.fusion_variants`)."""
    fusions = fusion_candidates(model, plan).variants().values()
    variants = [plan, *(replace(plan, fusion=fusion) for fusion in fusions)]
    return frozenset(t.key for p in variants for t in prepare_plan(model, target, None, p).extraction.tasks)


def decide(costs: dict[str, LayerCost], forms: dict[str, dict[str, Form]],
           ratio: float = PRUNE_RATIO, defer: float = DEFER_RATIO, *,
           chosen: dict[str, Form] | None = None) -> PlanScreen:
    """Groups, pruning and deferral from measured costs: `forms` maps each conv task's key to the
    layers it implements and its form there. A task is pruned when, on every one of its layers, its
    form is measured and more than `ratio` times that layer's fastest measured form; deferred when
    more than `defer` times but not pruned. A task whose form is `chosen`'s (layer -> form: the
    default-cost plan's) on any of its layers is neither."""
    screen = PlanScreen(costs=costs, chosen=dict(chosen or {}))
    for key, served in forms.items():
        screen.groups[key] = frozenset(served)
        if any(screen.chosen.get(name) == form for name, form in served.items()):
            continue
        behind = []
        for name, form in served.items():
            cost = costs.get(name)
            mine = form_seconds(cost, form) if cost is not None else None
            if cost is None or mine is None:
                break
            fastest = min([*cost.forms.values(), mine])
            behind.append(mine / fastest)
        if not behind or len(behind) != len(served) or min(behind) <= defer:
            continue
        if min(behind) > ratio:
            screen.pruned[key] = (f"its layout runs {min(behind):.2f}x the layer's fastest form with "
                                  f"default schedules (screening prunes above {ratio:g}x)")
        else:
            screen.deferred[key] = min(behind)
    return screen


def untuned_blocks(screen: PlanScreen, tuned: set[str]) -> frozenset[int]:
    """The channel blocks (NCHW, block 0, excepted: the model's own layout) each of whose conv
    kernels in the uniform builds the screening found behind (pruned or deferred) and the run
    then did not tune (none of the `tuned` workload keys). A block whose forms merely went
    untuned, the budget spent before their turn, stays: its default schedules may still win."""
    keys: dict[int, set[str]] = {}
    for key, served in layer_forms(screen.costs).items():
        for block, _ in served.values():
            keys.setdefault(block, set()).add(key)
    behind = set(screen.pruned) | set(screen.deferred)
    return frozenset(b for b, ks in keys.items() if b > 0 and ks <= behind and not ks & tuned)


def _consistent_groups(tasks: list, groups: dict[str, Hashable]) -> list[Hashable]:
    """Each task's group: its layer set when every task of that set has the same weight (the
    scheduler's rule for alternatives), else its own workload key."""
    weights: dict[Hashable, set[int]] = {}
    for t in tasks:
        weights.setdefault(groups.get(t.key, t.key), set()).add(t.count)
    out: list[Hashable] = []
    for t in tasks:
        group = groups.get(t.key, t.key)
        out.append(group if len(weights[group]) == 1 else t.key)
    return out


def trailing_forms(groups: list[Hashable], best: list[float]) -> dict[int, float]:
    """Tasks not worth the final re-measurement: index -> how many times slower its best search
    figure is than its group's best (`groups` as the scheduler's: alternatives of the same layers
    share one; only those above `TRAILING_RATIO` are listed).

    The final pick re-measures a task's top configs against its default, interleaved, to undo the
    search's lucky draws (~2 s a task on ResNet-18). For a form of a layer that is, at its best,
    far slower than another form of the same layers, no refinement changes which form the layout
    search keeps; `--pipeline plan` tunes three times as many tasks as a per-model tune, so
    skipping those saves about a third of that stage."""
    leader: dict[Hashable, float] = {}
    for g, b in zip(groups, best):
        if math.isfinite(b) and b > 0:
            leader[g] = min(b, leader.get(g, math.inf))
    out = {}
    for i, (g, b) in enumerate(zip(groups, best)):
        lead = leader.get(g)
        if lead is not None and math.isfinite(b) and b > TRAILING_RATIO * lead:
            out[i] = b / lead
    return out


__all__ = ["DEFER_RATIO", "PRUNE_RATIO", "TRAILING_RATIO", "PlanScreen", "decide", "default_plan",
           "default_plan_forms", "form_seconds", "layer_forms", "plan_forms", "plan_kernels",
           "screen_plan_tasks", "trailing_forms", "untuned_blocks"]
