"""Every kernel case compiles for an AVX2 and an AVX-512 CPU, whatever CPU runs the tests.

The target is forced by name (`llvm -mcpu=znver3`, `llvm -mcpu=znver5`), so both vector widths'
spaces and defaults are exercised on every CI run. A kernel runs against its oracle where this host
has the target's features; elsewhere its assembly is checked instead: AVX2 code must not touch
AVX-512 registers (it would fault on an AVX2 machine), and AVX-512 code uses them.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from kernel_cases import CASES, inputs_for

from autorelay.codegen import resolve_target
from autorelay.codegen.llvm.host import host_supports
from autorelay.codegen.llvm.jit import assembly
from autorelay.errors import ScheduleError
from autorelay.kernel import emit_kernel, load_kernel
from autorelay.schedule.templates import template_for

pytestmark = pytest.mark.cpu
WIDTHS = {"avx2": "llvm -mcpu=znver3 -threads=2", "avx512": "llvm -mcpu=znver5 -threads=2"}


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_default_and_random_configs_for_each_width(case, width):
    target = resolve_target(WIDTHS[width])
    assert target.vector_lanes() == (16 if width == "avx512" else 8)
    cdef = case.build()
    space = template_for(cdef).space(cdef, target)
    rng = random.Random(f"{case.name}-{width}-{space.size}")
    configs = [None, *(space.get(i) for i in rng.sample(range(space.size), min(2, space.size)))]
    runs = host_supports(target)
    arrays = inputs_for(cdef, seed=2) if runs else []
    expect = case.oracle(*arrays) if runs else None
    built = 0
    for cfg in configs:
        try:
            code = emit_kernel(cdef, cfg, target)
        except ScheduleError:
            assert cfg is not None, "the default config must be legal"
            continue
        built += 1
        if runs:
            got = load_kernel(code).run(*arrays)
            np.testing.assert_allclose(got, expect, rtol=case.rtol, atol=case.rtol,
                                       err_msg=f"{width} config {cfg.as_dict() if cfg else 'default'}")
        else:
            asm = assembly(code.code.text, target)
            assert ("zmm" in asm) if width == "avx512" and cfg is None and "dense" in case.name else True
            if width == "avx2":
                assert "zmm" not in asm, "AVX2 code uses AVX-512 registers"
    assert built > 0


def test_avx2_code_never_uses_avx512_registers():
    """Checked on every host: forcing an AVX2 CPU keeps the code AVX2 even on an AVX-512 machine."""
    case = next(c for c in CASES if c.name.startswith("dense"))
    code = emit_kernel(case.build(), None, resolve_target(WIDTHS["avx2"]))
    asm = assembly(code.code.text, code.target)
    assert "ymm" in asm and "zmm" not in asm
    wide = emit_kernel(case.build(), None, resolve_target(WIDTHS["avx512"]))
    assert "zmm" in assembly(wide.code.text, wide.target)
