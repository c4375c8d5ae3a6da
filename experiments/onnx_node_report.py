"""Pass rate by op of the ONNX backend node test cases (shipped in the onnx wheel) that use only
ops the importer converts: import + infer_types + interpreter against the expected outputs.

    python experiments/onnx_node_report.py [--failures]

Each case ends as `pass`, `refused` (the importer rejects an unsupported variant or element type
with a one-line OnnxImportError) or `wrong` (a mismatch or any other exception). A case counts once
for every op type it contains; the `single` columns count only the one-op cases.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict

from autorelay.frontend.onnx import OnnxImportError
from autorelay.frontend.onnx.node_cases import run_case, supported_cases


def classify(case) -> tuple[str, str]:
    try:
        ok, msg = run_case(case)
    except OnnxImportError as err:
        return "refused", str(err)
    except Exception as err:  # a report lists every failure and keeps going
        return "wrong", f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return ("pass", msg) if ok else ("wrong", msg)


def main() -> None:
    show = "--failures" in sys.argv
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
