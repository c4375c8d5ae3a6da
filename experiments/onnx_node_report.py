"""Pass rate by op of the ONNX backend node test cases (shipped in the onnx wheel) that use only
ops the importer converts: import + infer_types + interpreter against the expected outputs.

    python experiments/onnx_node_report.py [--failures]
    python experiments/onnx_node_report.py --bar [--failures]   # issue #21's op set, failures by reason

Each case ends as `pass`, `refused` (the importer rejects an unsupported variant or element type
with a one-line OnnxImportError) or `wrong` (a mismatch or any other exception). A case counts once
for every op type it contains; the `single` columns count only the one-op cases.

`--bar` measures issue #21's bar instead: every case that *tests* one of `BAR_OPS` (plain cases
and their `_expanded` function bodies, including cases whose graph uses an op the importer lacks,
which count as refused), pooled into one pass rate (the bar is >= 95%), per op, and the failures
grouped by reason (the importer's message without node names and indices).
"""

from __future__ import annotations

import argparse
import re
import time
from collections import defaultdict

from autorelay.frontend.onnx import OnnxImportError
from autorelay.frontend.onnx.node_cases import Case, cases_testing, run_case, supported_cases

# Issue #21: "Conv, ConvTranspose, Gemm, MatMul, pooling, Reshape, Slice, Pad, Squeeze/Unsqueeze,
# Reduce*, Split, Concat, Gather, LSTM/GRU/RNN and the activations: >= 95% pass".
BAR_OPS = frozenset(
    [
        "Conv", "ConvTranspose", "Gemm", "MatMul", "MaxPool", "AveragePool", "GlobalMaxPool",
        "GlobalAveragePool", "LpPool", "Reshape", "Slice", "Pad", "Squeeze", "Unsqueeze", "ReduceSum",
        "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
        "ReduceLogSumExp", "ReduceSumSquare", "Split", "Concat", "Gather", "LSTM", "GRU", "RNN", "Relu",
        "LeakyRelu", "Elu", "Selu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "HardSigmoid", "HardSwish",
        "Softplus", "Softsign", "PRelu", "ThresholdedRelu", "Celu", "Gelu", "Mish",
    ]
)


def classify(case) -> tuple[str, str]:
    try:
        ok, msg = run_case(case)
    except OnnxImportError as err:
        return "refused", str(err)
    except Exception as err:  # a report lists every failure and keeps going
        return "wrong", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return ("pass", msg) if ok else ("wrong", msg)


def reason_of(msg: str) -> str:
    """The message without what differs between cases: node index and name, quoted value names."""
    msg = re.sub(r"node #\d+ '[^']*' \((\w+)\)", r"\1", msg)
    msg = re.sub(r" ?\(nodes: [^)]*\)", "", msg)
    return re.sub(r"'[^']*'", "'…'", msg)


def bar_report(show_cases: bool) -> None:
    t0 = time.perf_counter()
    cases: list[Case] = cases_testing(BAR_OPS)
    per_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    by_reason: dict[tuple[str, str], list[str]] = defaultdict(list)
    totals: dict[str, int] = defaultdict(int)
    for case in cases:
        status, msg = classify(case)
        totals[status] += 1
        for op in set(case.tests) & BAR_OPS:
            per_op[op]["cases"] += 1
            per_op[op][status] += 1
        if status != "pass":
            by_reason[(status, reason_of(msg))].append(case.name)
    print(f"| {'op':<18} | cases | pass | refused | wrong |")
    print(f"|{'-' * 20}|-------|------|---------|-------|")
    for op in sorted(BAR_OPS):
        r = per_op[op]
        print(f"| {op:<18} | {r['cases']:>5} | {r['pass']:>4} | {r['refused']:>7} | {r['wrong']:>5} |")
    n = len(cases)
    print(
        f"\nbar ({len(BAR_OPS)} ops): {n} cases, {totals['pass']} pass, {totals['refused']} refused, "
        f"{totals['wrong']} wrong; pooled pass rate {totals['pass'] / max(n, 1):.1%} "
        f"({time.perf_counter() - t0:.0f} s)\n"
    )
    for (status, reason), names in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        print(f"{len(names):>3} {status}: {reason}")
        if show_cases:
            print("      " + ", ".join(names))


def main() -> None:
    ap = argparse.ArgumentParser(description="Pass rate by op of the ONNX backend node cases.")
    ap.add_argument("--failures", action="store_true", help="list every case that does not pass")
    ap.add_argument("--bar", action="store_true", help="only issue #21's op set, failures by reason")
    args = ap.parse_args()
    if args.bar:
        bar_report(args.failures)
        return
    show = args.failures
    t0 = time.perf_counter()
    rows: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    totals: dict[str, int] = defaultdict(int)
    notes = []
    cases = supported_cases()
    for case in cases:
        status, msg = classify(case)
        totals[status] += 1
        if status != "pass":
            notes.append((status, case.name, msg))
        for op in case.op_types:
            rows[op]["cases"] += 1
            rows[op][status] += 1
            if len(case.op_types) == 1:
                rows[op]["single"] += 1
                rows[op]["single_pass"] += status == "pass"
    head = f"| {'op':<18} | cases | pass | refused | wrong | pass rate | single-op cases (pass) |"
    print(head)
    print("|" + "|".join("-" * len(c) for c in head.split("|")[1:-1]) + "|")
    for op in sorted(rows):
        r = rows[op]
        print(
            f"| {op:<18} | {r['cases']:>5} | {r['pass']:>4} | {r['refused']:>7} | {r['wrong']:>5} | "
            f"{r['pass'] / r['cases']:>9.0%} | {r['single']:>15} ({r['single_pass']:>3}) |"
        )
    n = len(cases)
    print(
        f"\n{n} cases: {totals['pass']} pass, {totals['refused']} refused, {totals['wrong']} wrong; "
        f"pass rate {totals['pass'] / max(n, 1):.0%} of all, "
        f"{totals['pass']}/{n - totals['refused']} of those imported "
        f"({time.perf_counter() - t0:.0f} s)"
    )
    if show:
        for status, name, msg in notes:
            print(f"{status.upper():8} {name}: {msg}")


if __name__ == "__main__":
    main()
