"""How much a per-layer layout plan can gain over each per-model pipeline, given the kernels there are.

    python experiments/layer_forms.py [--model resnet-18] [--db URL] [--threads 2] [--rounds 5]

Profiles the layout search's candidate builds (`search.layout_costs.kernel_costs`: every uniform
layout, direct and as Winograd F(2x2)/F(4x4)) kernel by kernel, with the log's best schedules
(`--db`) or the default ones (no `--db`), and prints each conv layer's time in every form it can
take. Then, per per-model pipeline, the sum of its convolutions' times (the form it runs on each
layer, read off its own build) against the sum of every layer's fastest form: the most a plan can
take off the convolutions by choosing forms, before any re-layout it would need. The kernels every
build shares (pooling, the classifier) are in neither sum, so end to end the ratio is smaller.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from autorelay.codegen import resolve_target
from autorelay.transform.layout_plan import built_layers, conv_layers
from autorelay.transform.pass_base import Pipeline
from autorelay.transform.pipelines import graph_passes, pipeline_layout
from search.layout_costs import Form, LayerCost, candidate_blocks, kernel_costs, winograd_tile
from search.models import load_model
from search.pipeline_choice import candidates


def pipeline_forms(model, graph, pipeline: str) -> dict[str, Form]:
    """Each conv layer's form in the per-model `pipeline`'s build: (the pipeline's channel block
    where the layer is blocked, as `kernel_costs` files it even where the build shrank the block to
    a divisor of the channels, 0 for NCHW; its Winograd output tile, 0 for direct). `graph`: the
    model after `graph_passes`, where the layers are named."""
    fused = model.optimized(pipeline)
    asked = pipeline_layout(pipeline)[0]
    return {name: (asked if block else 0, winograd_tile(fn))
            for name, (block, fn) in built_layers(graph, fused).items()}


def ceiling(costs: dict[str, LayerCost], forms: dict[str, Form]) -> tuple[float, float, list[str]]:
    """(the pipeline's conv seconds, the fastest forms' seconds, layers whose pipeline form was not
    measured) over the layers both have."""
    mine = best = 0.0
    missing = []
    for name, form in forms.items():
        cost = costs.get(name)
        if cost is None or form not in cost.forms:
            missing.append(name)
            continue
        mine += cost.forms[form]
        best += min(cost.forms.values())
    return mine, best, missing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet-18")
    ap.add_argument("--db", default=None, help="tuning log (default: default schedules only)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5, help="round-robin profiles of the builds")
    args = ap.parse_args()
    model = load_model(args.model)
    target = resolve_target("llvm", args.threads)
    blocks = candidate_blocks(target)
    if args.db is None:
        costs = kernel_costs(model, None, target, blocks, rounds=args.rounds, workers=args.threads)
    else:
        import tuning_db

        with tuning_db.open(args.db) as db:
            costs = kernel_costs(model, db, target, blocks, rounds=args.rounds, workers=args.threads)
    forms = sorted({f for c in costs.values() for f in c.forms})
    print(f"{args.model}, {target}, {'schedules of ' + args.db if args.db else 'default schedules'}: "
          "ms per call, each form's median over the rounds (* the layer's fastest)")
    heads = [f"{b or 'NCHW'}/{'F' + str(t) if t else 'direct'}" for b, t in forms]
    print("layer".ljust(10), *(h.rjust(12) for h in heads))
    for name in conv_layers(model.mod):
        c = costs[name]
        fastest = min(c.forms.values()) if c.forms else None
        cells = [(f"{c.forms[f] * 1e3:.3f}" + ("*" if c.forms[f] == fastest else " ")).rjust(12)
                 if f in c.forms else " " * 12 for f in forms]
        print(name.ljust(10), *cells)
    print()
    graph = model.optimized(Pipeline(graph_passes()))
    for pipeline in candidates(target, args.threads):
        mine, best, missing = ceiling(costs, pipeline_forms(model, graph, pipeline))
        note = f" ({len(missing)} layers' forms not measured: {', '.join(missing)})" if missing else ""
        print(f"{pipeline:>15}: convolutions {mine * 1e3:.3f} ms; every layer's fastest form "
              f"{best * 1e3:.3f} ms; at most {mine / best:.3f}x{note}")


if __name__ == "__main__":
    main()
