"""Golden tests: the loop IR and LLVM IR of a few kernels are pinned, so a refactor shows its diff.

The target is fixed (not the host) so the files do not depend on the machine. Regenerate after an
intended change with `UPDATE_GOLDEN=1 python -m pytest tests/kernels/test_kernel_golden.py` and
review the diff.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autorelay.codegen.llvm.emit import emit_module
from autorelay.schedule.apply import apply
from autorelay.schedule.templates import template_for
from autorelay.target import Target
from autorelay.te import nn
from autorelay.te import tensor as te
from autorelay.tir.printer import func_str

GOLDEN = Path(__file__).parent / "golden"
TARGET = Target("haswell", "+avx,+avx2,+fma,+sse4.2", 1, "x86_64-unknown-linux-gnu")


def _lower(cdef):
    tmpl = template_for(cdef)
    func, _ = apply(cdef, tmpl.steps(cdef, tmpl.default(cdef, TARGET), TARGET))
    return func


def _dense():
    a, w = te.placeholder((30, 20), name="A"), te.placeholder((24, 20), name="W")
    return te.make_def([a, w], nn.dense(a, w), "dense")


def _matmul_kn():
    """A [K, M] (transposed) and B [K, N] both packed into panels (two Packs each)."""
    a, b = te.placeholder((20, 30), name="A"), te.placeholder((20, 70), name="B")
    return te.make_def([a, b], nn.matmul(a, b, transpose_a=True), "matmul")


def _softmax():
    x = te.placeholder((4, 10), name="X")
    return te.make_def([x], nn.softmax(x), "softmax")


def _conv_nchwc():
    x, w = te.placeholder((1, 1, 6, 6, 8), name="X"), te.placeholder((1, 1, 3, 3, 8, 8), name="W")
    return te.make_def([x, w], nn.conv2d_nchwc(x, w, 1, 1), "conv")


def _relu():
    x = te.placeholder((3, 20), name="X")
    return te.make_def([x], nn.relu(x), "relu")


CASES = {
    "dense_loop_ir.txt": lambda: func_str(_lower(_dense())),
    "matmul_tn_loop_ir.txt": lambda: func_str(_lower(_matmul_kn())),
    "softmax_loop_ir.txt": lambda: func_str(_lower(_softmax())),
    "conv_nchwc_loop_ir.txt": lambda: func_str(_lower(_conv_nchwc())),
    "relu_llvm_ir.ll": lambda: emit_module(_lower(_relu()), TARGET, "relu")[0],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_code_matches_golden(name):
    text = CASES[name]()
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} changed; review and regenerate with UPDATE_GOLDEN=1"
