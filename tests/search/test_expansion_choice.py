"""Which bands take their expansion in: each expansion edge is matched, by its convolutions'
shapes, with its expanded kernel and with the two kernels that kernel replaces; the faster side
wins per block; the layout search times the winners as one more finalist."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autorelay.codegen import resolve_target
from autorelay.ir.expr import Call, Function
from autorelay.ir.visitor import post_order
from autorelay.primitive import KernelMemo
from autorelay.transform.layout_plan import LayoutPlan, conv_layers
from search import expansion_choice, layout_search
from search.expansion_choice import faster_expansions, kernel_signatures
from search.fusion_choice import BANDS, EXPANSIONS, fusion_candidates
from search.kernel_profiles import profile_keys
from search.layout_costs import LayerCost
from search.models import build_model, load_model, run_inputs
from search.pipeline_choice import prepare_plan

pytestmark = pytest.mark.cpu

TARGET = "llvm -mcpu=znver3"


@pytest.fixture(scope="module")
def mobilenet():
    """MobileNet-v2 at 32 px in blocks of 8: its plan, expansion candidates, and the banded and
    expanded builds' prepared models."""
    model = load_model("mobilenet-v2", image_size=32)
    plan = LayoutPlan.uniform(conv_layers(model.mod), 8, winograd=0)
    banded, expanded = (prepare_plan(model, TARGET, 1, replace(plan, fusion=f)) for f in (BANDS, EXPANSIONS))
    return model, plan, fusion_candidates(model, plan).expansions, banded, expanded


def test_each_expansion_is_matched_with_its_kernel_and_the_pair_it_replaces(mobilenet):
    _, _, expansions, banded, expanded = mobilenet
    apart, together = kernel_signatures(banded.module), kernel_signatures(expanded.module)
    assert len(expansions) == 17
    for ex in expansions.values():
        assert len(ex.convs) == 3 and ex.convs in together.values()
        assert ex.convs[:1] in apart.values() and ex.convs[1:] in apart.values()
    # fabricated times: every kernel of the banded build 1 s; the expanded kernels 1.5 s (faster than
    # their pairs' 2 s), then 2.5 s (slower), then only one workload faster
    pairs = (banded.module, {k: 1.0 for k in apart})

    def expanded_at(seconds: float) -> tuple:
        return expanded.module, dict.fromkeys(together, seconds)

    won = faster_expansions(expansions, pairs, expanded_at(1.5))
    assert set(won) == set(expansions) and all(t == (1.5, 2.0) for t in won.values())
    assert faster_expansions(expansions, pairs, expanded_at(2.5)) == {}
    edge, first = next(iter(expansions.items()))
    key = next(k for k, sig in together.items() if sig == first.convs)
    one = faster_expansions(expansions, pairs, (expanded.module, {key: 0.5}))
    assert edge in one and {expansions[e].convs for e in one} == {first.convs}
    # a kernel without a time (not in the profile) decides nothing
    assert faster_expansions(expansions, (banded.module, {}), (expanded.module, {key: 0.5})) == {}


def test_profile_keys_times_every_kernel_of_each_build(mobilenet):
    model, _, _, banded, _ = mobilenet
    exe = build_model(model, None, prepared=banded)
    args = run_inputs(exe, model)
    (times,) = profile_keys([(exe, args, 2)], rounds=2)
    assert set(times) == {row.workload_key for row in exe.report.rows}
    assert all(t > 0 for t in times.values())


@pytest.mark.parametrize("winners", ["measured", "every one"])
def test_the_faster_expansions_become_a_finalist(mobilenet, monkeypatch, winners):
    """`_expansion_finalist` on the banded variant: the winners (measured here, or every edge by a
    stand-in) give the variant `<fusion>+expansions`, whose plan leaves the losers' edges off and
    whose build computes what the banded build computes; no winner, no variant."""
    model, plan, expansions, banded, _ = mobilenet
    if winners == "every one":
        monkeypatch.setattr(layout_search, "faster_expansions",
                            lambda ex, *_: {e: (1.0, 2.0) for e in ex})
    builds = layout_search._Builds(model, None, resolve_target(TARGET, 1), 1, KernelMemo(), None)
    builds.add({"bands": banded})
    args = run_inputs(builds.exes["bands"], model)
    variants = {"bands": replace(plan, fusion=BANDS)}
    names, won = layout_search._expansion_finalist(builds, variants, "bands", expansions, args,
                                                   lambda p: prepare_plan(model, TARGET, 1, p))
    assert set(won) <= set(expansions) and all(t < pair for t, pair in won.values())
    if not won:
        assert names == [] and list(variants) == ["bands"]
        return
    assert names == ["bands+expansions"] and set(builds.exes) == {"bands", "bands+expansions"}
    fusion = variants["bands+expansions"].fusion
    assert fusion.expansions and fusion.disabled_edges == set(expansions) - set(won)
    if winners == "every one":
        assert set(won) == set(expansions)
        rows = builds.exes["bands+expansions"].report.rows
        assert sum(r.name.count("conv2d") == 3 for r in rows) == 17
    np.testing.assert_allclose(builds.exes["bands+expansions"](*args), builds.exes["bands"](*args),
                               rtol=1e-4, atol=1e-5)


def test_no_bands_no_probe(mobilenet):
    model, plan, expansions, _, _ = mobilenet
    builds = layout_search._Builds(model, None, resolve_target(TARGET, 1), 1, KernelMemo(), None)
    variants = {"plan": plan}
    got = layout_search._expansion_finalist(builds, variants, "plan", expansions, [], lambda p: None)
    assert got == ([], {})
    assert not builds.exes and {type(e) for e in expansions.values()} == {expansion_choice.Expansion}


def test_the_search_keeps_the_expansion_finalist_when_it_is_fastest(monkeypatch):
    """`search_layout` end to end, with stand-ins for the measurements: every layer's direct form in
    blocks of 8 is the cheapest (so the layout program blocks every layer, whatever this host's
    timings), every expansion wins its kernel comparison, and a build's time is its kernel count
    (so fusing more is faster). The best band variant then grows its expansions, that finalist
    wins, and the plan keeps it."""
    model = load_model("mobilenet-v2", image_size=32)
    measured = layout_search.kernel_costs

    def blocks_of_8_cheapest(*args, **kwargs) -> dict[str, LayerCost]:
        out = {}
        for name, cost in measured(*args, **kwargs).items():
            out[name] = LayerCost(keys=dict(cost.keys))
            for form in cost.forms:
                out[name].add(form, 1.0 if form == (8, 0) else 2.0, "stand-in")
        return out

    monkeypatch.setattr(layout_search, "kernel_costs", blocks_of_8_cheapest)
    monkeypatch.setattr(layout_search, "faster_expansions", lambda ex, *_: {e: (1.0, 2.0) for e in ex})
    monkeypatch.setattr(layout_search, "time_interleaved",
                        lambda exes, args, rounds=1: [float(len(e.report.rows)) for e in exes])
    r = layout_search.search_layout(model, None, TARGET, 1, repeat=1, rounds=1, store=False)
    assert r.fusion == "plan+depthwise bands+expansions" and r.winner == "plan"
    assert r.plan.fusion.expansions and not r.plan.fusion.disabled_edges & set(r.expansion_edges)
    assert set(r.expansion_kernels) == set(r.expansion_edges) and len(r.expansion_edges) == 17
    calls = [n for n in post_order(r.prepared.module["main"].body)
             if isinstance(n, Call) and isinstance(n.op, Function) and n.op.is_primitive]
    assert sum(str(c.op.body).count("nn.conv2d") == 3 for c in calls) == 17  # one kernel per block
    assert "expanded kernels faster" in r.table()
