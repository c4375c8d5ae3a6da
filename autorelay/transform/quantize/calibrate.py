"""Calibrate: run calibration batches through the float model and choose each point's range.

Every point of the annotation (`<layer>:in`, `<layer>:out`, `<join>:out`) is captured at once: a copy
of `@main` returns the tuple of those tensors, run by the reference interpreter (default) or by an
`autorelay.build` executable (faster on big models, pays compile time). Per point the values are
kept exactly up to `SAMPLE_CAP` per batch (beyond that a seeded uniform subsample), and the exact
min / max of everything.

Range methods (all return the real interval `(lo, hi)` that uint8 with a zero point will cover):

* `max`: the observed min and max.
* `percentile`: `np.percentile` at `100 - p` and `p` (default 99.99), which drops rare outliers.
* `kl`: the entropy method of TensorRT (Migacz, GTC 2017), as TVM implements it: a 2048-bin histogram of
  |x|; for each candidate threshold the clipped reference distribution P (outliers folded into the
  last bin) is compared with Q, P merged into as many bins as the integer grid has levels on that
  side (255 for non-negative tensors, 127 for signed ones) and expanded back; the threshold with the
  least KL(P || Q) wins. Exact zeros (a ReLU's) are left out of the histogram: they are exact at any
  threshold, and their spike would otherwise pull the threshold down.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autorelay.ir.expr import Expr, Function, Tuple
from autorelay.ir.module import IRModule
from autorelay.transform.quantize.annotate import annotate, prepare_for_quantize
from autorelay.transform.quantize.layers import quantizable_layers

METHODS = ("max", "percentile", "kl")
SAMPLE_CAP = 1 << 18  # values kept per point per batch
KL_BINS = 2048


@dataclass(frozen=True)
class Calibration:
    """Real ranges per calibration point (`conv2d_0:in`, `conv2d_0:out`, `add_1:out`, …)."""

    method: str
    ranges: Mapping[str, tuple[float, float]]
    layers: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)

    def range(self, point: str) -> tuple[float, float]:
        try:
            return self.ranges[point]
        except KeyError:
            raise KeyError(f"calibration has no range for {point}; it was made for another model?") from None

    def to_json(self) -> str:
        return json.dumps({"method": self.method, "ranges": {k: list(v) for k, v in self.ranges.items()},
                           "layers": list(self.layers), "options": dict(self.options)}, sort_keys=True)

    @staticmethod
    def from_json(text: str | Mapping[str, Any]) -> Calibration:
        d = json.loads(text) if isinstance(text, str) else dict(text)
        return Calibration(d["method"], {k: (float(v[0]), float(v[1])) for k, v in d["ranges"].items()},
                           tuple(d.get("layers", ())), dict(d.get("options", {})))


# ---- range methods on a sample --------------------------------------------------------------


def range_max(x: np.ndarray) -> tuple[float, float]:
    return float(np.min(x)), float(np.max(x))


def range_percentile(x: np.ndarray, percentile: float = 99.99) -> tuple[float, float]:
    if not 50.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (50, 100], got {percentile}")
    lo, hi = np.percentile(x, [100.0 - percentile, percentile])
    return float(lo), float(hi)


def _kl(p: np.ndarray, q: np.ndarray, eps: float = 1e-4) -> float:
    """KL(P || Q) over P's support; Q's empty bins get a little mass so it stays finite."""
    p = p / p.sum()
    q = np.where(q > 0, q / max(q.sum(), 1e-30), eps)
    q = q / q.sum()
    m = p > 0
    return float(np.sum(p[m] * np.log(p[m] / q[m])))


def kl_threshold(hist: np.ndarray, edges: np.ndarray, levels: int) -> float:
    """The |x| threshold whose `levels`-level quantization loses least information (KL divergence)."""
    hist = hist.astype(np.float64)
    nbins = len(hist)
    if nbins <= levels:
        return float(edges[-1])
    best_kl, best_i = np.inf, nbins
    tail = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])  # tail[i] = sum(hist[i:])
    for i in range(levels, nbins + 1):
        ref = hist[:i].copy()
        ref[-1] += tail[i]
        nonzero = hist[:i] != 0
        group = (np.arange(i) * levels) // i
        sums = np.bincount(group, weights=hist[:i], minlength=levels)
        counts = np.bincount(group, weights=nonzero, minlength=levels)
        q = np.where(nonzero, sums[group] / np.maximum(counts[group], 1), 0.0)
        kl = _kl(ref, q)
        if kl < best_kl:
            best_kl, best_i = kl, i
    return float(edges[best_i])


def range_kl(x: np.ndarray, bins: int = KL_BINS) -> tuple[float, float]:
    lo, hi = range_max(x)
    amax = max(abs(lo), abs(hi))
    if amax == 0.0:
        return lo, hi
    mags = np.abs(x)
    # A ReLU's exact zeros are exact at any threshold; left in, their spike dominates P and drives the
    # threshold far down (clipping much of the real signal), so they are not part of the histogram.
    mags = mags[mags > 0]
    hist, edges = np.histogram(mags, bins=bins, range=(0.0, amax))
    t = kl_threshold(hist, edges, 255 if lo >= 0.0 else 127)
    return max(lo, -t), min(hi, t)


def choose_range(x: np.ndarray, method: str, percentile: float = 99.99) -> tuple[float, float]:
    if method == "max":
        return range_max(x)
    if method == "percentile":
        return range_percentile(x, percentile)
    if method == "kl":
        return range_kl(x)
    raise ValueError(f"unknown calibration method {method!r}; use one of {', '.join(METHODS)}")


# ---- running the calibration set ------------------------------------------------------------


def _progress(items: Iterable, total: int | None, enabled: bool) -> Iterable:
    if not enabled:
        return items
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:
        return _simple_progress(items, total)
    return tqdm(items, total=total, desc="calibrating", unit="batch", leave=False)


def _simple_progress(items: Iterable, total: int | None) -> Iterable:
    for i, item in enumerate(items):
        sys.stderr.write(f"\rcalibrating batch {i + 1}{f'/{total}' if total else ''}")
        yield item
    sys.stderr.write("\n")


def _capture_runner(fn: Function, nodes: list[Expr], runner: str):
    capture = IRModule.from_expr(Function(fn.params, Tuple(tuple(nodes))))
    names = [p.name_hint for p in fn.params]
    if runner == "interpreter":
        from autorelay.runtime.interpreter import Interpreter

        interp = Interpreter(capture)
        return names, lambda args: interp.call("main", *args)
    if runner == "build":
        from autorelay.build_module import build

        exe = build(capture, target="llvm", pipeline="default")
        return names, lambda args: tuple(np.array(v) for v in exe(*args))
    raise ValueError(f"unknown calibration runner {runner!r}; use interpreter or build")


def calibrate(mod: IRModule, params: Mapping[str, np.ndarray] | None,
              batches: Iterable[Mapping[str, np.ndarray]], method: str = "max", percentile: float = 99.99,
              *, runner: str = "interpreter",
              progress: bool = True, seed: int = 0) -> Calibration:
    """Ranges of every calibration point of `mod` over `batches` (dicts: input name -> array)."""
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; use one of {', '.join(METHODS)}")
    prepared = prepare_for_quantize(mod, params)
    ann = annotate(prepared)
    points = ann.points()
    nodes: list[Expr] = []
    slot: dict[int, int] = {}
    for node in points.values():
        if id(node) not in slot:
            slot[id(node)] = len(nodes)
            nodes.append(node)
    names, run = _capture_runner(ann.fn, nodes, runner)
    rng = np.random.default_rng(seed)
    samples: list[list[np.ndarray]] = [[] for _ in nodes]
    total = len(batches) if hasattr(batches, "__len__") else None  # type: ignore[arg-type]
    seen = 0
    for batch in _progress(batches, total, progress):
        missing = [n for n in names if n not in batch]
        if missing:
            have = ", ".join(batch)
            raise ValueError(f"calibration batch lacks input(s) {', '.join(missing)} (has {have})")
        values = run([batch[n] for n in names])
        for k, v in enumerate(values):
            flat = np.asarray(v, np.float32).reshape(-1)
            if flat.size > SAMPLE_CAP:
                extremes = np.array([flat.min(), flat.max()], np.float32)
                flat = np.concatenate([extremes, rng.choice(flat, SAMPLE_CAP, replace=False)])
            samples[k].append(flat)
        seen += 1
    if seen == 0:
        raise ValueError("calibrate: the calibration set is empty")
    ranges: dict[str, tuple[float, float]] = {}
    by_node: dict[int, tuple[float, float]] = {}
    for k, node in enumerate(nodes):
        by_node[id(node)] = choose_range(np.concatenate(samples[k]), method, percentile)
    for name, node in points.items():
        ranges[name] = by_node[id(node)]
    _warn_degenerate(ranges)
    options = {"percentile": percentile} if method == "percentile" else {}
    return Calibration(method, ranges, tuple(quantizable_layers(mod)), options)


# ranges no 8-bit step can resolve sensibly: the int8 model would output (nearly) zero there
_TINY, _HUGE = 1e-20, 1e20


def _warn_degenerate(ranges: Mapping[str, tuple[float, float]]) -> None:
    """Warn (not fail: the caller may mean it) when calibration saw only zeros, denormal-small or
    astronomically large values at some point, as with an all-zero or unnormalised calibration set:
    the quantized model then computes nothing useful there."""
    bad = [name for name, (lo, hi) in ranges.items()
           if not (np.isfinite(lo) and np.isfinite(hi)) or not _TINY < max(abs(lo), abs(hi)) < _HUGE]
    if bad:
        import warnings

        shown = ", ".join(f"{n} {ranges[n]}" for n in bad[:3]) + (" ..." if len(bad) > 3 else "")
        warnings.warn(f"calibration saw only zeros, or magnitudes below {_TINY:g} or above {_HUGE:g}, at "
                      f"{len(bad)} of {len(ranges)} points ({shown}): the quantized model's values there "
                      f"will be meaningless; check the calibration data", UserWarning, stacklevel=3)
