"""`autorelay.build` of zoo CNNs (small sizes) against the reference interpreter.

Tolerance: float32 kernels reassociate sums (vector lanes, tiles), so outputs may differ from the
interpreter's NumPy reduction order by a few ulps per accumulation; we allow rtol = atol = 1e-4 of
the output scale, far below any real bug (a wrong tap or channel changes results at the 1e-1 level).
"""

from __future__ import annotations

import numpy as np
import pytest

import autorelay
from autorelay.frontend import zoo

pytestmark = pytest.mark.cpu

MODELS = [
    ("resnet-18", {"image_size": 32}),
    ("mobilenet-v2", {"image_size": 32}),
    ("mlp", {}),
    ("transformer", {}),
    ("squeezenet-1.1", {"image_size": 64}),
    ("nature-dqn", {}),
    ("dcgan", {}),
    ("resnet-34", {"image_size": 32}),
    ("resnet-50", {"image_size": 32}),
    ("vgg-16", {"image_size": 32}),
    ("inception", {"image_size": 16}),
]


def _interpreter(mod, params, inputs) -> np.ndarray:
    args = [inputs[p.name_hint] if p.name_hint in inputs else params[p.name_hint] for p in mod["main"].params]
    return np.asarray(autorelay.evaluate(mod, *args))


@pytest.mark.parametrize(("name", "options"), MODELS, ids=[m[0] for m in MODELS])
def test_zoo_model_matches_interpreter(name: str, options: dict):
    try:
        mod, params = zoo.get(name, **options)
    except TypeError:  # the model takes no size option
        mod, params = zoo.get(name)
    inputs = zoo.random_inputs(mod, params, seed=3)
    exe = autorelay.build(mod, params=params)
    got = np.asarray(exe.run(**inputs))
    want = _interpreter(mod, params, inputs)
    scale = max(float(np.abs(want).max()), 1e-3)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    report = exe.report
    kinds = report.sources
    assert sum(kinds.values()) >= 1
    # every compiled step names its workload and where its schedule came from
    for row in report.rows:
        if row.kind == "kernel" and row.source != "relayout":  # relayout: packing an activation
            assert len(row.workload_key) == 32 and row.source == "default"
    # every op of the zoo has a compute: nothing runs through the NumPy references
    assert report.fallbacks == [], [(r.name, r.detail) for r in report.fallbacks]
    assert exe.peak_memory_bytes <= report.unplanned_bytes


@pytest.mark.parametrize("pipeline", ["tune", "nchwc"])
@pytest.mark.parametrize("name", ["resnet-18", "mobilenet-v2"])
def test_blocked_layout_pipelines_compile_without_fallbacks(name: str, pipeline: str):
    """The NCHW16c (`tune`) and NCHW8c (`nchwc`, Winograd kept in NCHW) convolutions, depthwise
    convolutions, pooling and layout transforms all have computes and agree with the interpreter."""
    mod, params = zoo.get(name, image_size=32)
    inputs = zoo.random_inputs(mod, params, seed=4)
    exe = autorelay.build(mod, params=params, pipeline=pipeline)
    assert exe.report.fallbacks == []
    want = _interpreter(mod, params, inputs)
    np.testing.assert_allclose(np.asarray(exe.run(**inputs)), want, rtol=1e-4,
                               atol=1e-4 * max(float(np.abs(want).max()), 1e-3))


@pytest.mark.parametrize(("pipeline", "cpu", "packed"), [
    ("nchwc16-direct", "skylake-avx512", 3 + 4),  # both narrow stages (3 and 4 blocks) packed
    ("nchwc", "znver3", 3),  # the 8-channel groups are whole blocks of 8 already
])
def test_resnext_packs_its_narrow_groups_into_blocks(pipeline: str, cpu: str, packed: int):
    """ResNeXt-50's 4- and 8-channel groups run packed whole into the pipeline's blocks (the
    depthwise kernel's shuffled form, no re-layout around them), on AVX-512 and AVX2 vectors; its
    logits agree with the interpreter's (the softmax of random weights saturates to one-hot)."""
    from autorelay.codegen import resolve_target
    from autorelay.codegen.llvm.host import host_supports
    from autorelay.ir import Function, IRModule

    target = f"llvm -mcpu={cpu}"
    if not host_supports(resolve_target(target)):
        pytest.skip(f"this host cannot run {cpu} code")
    mod, params = zoo.get("resnext-50", image_size=32)
    main = mod["main"]
    assert main.body.op.name == "nn.softmax"
    logits = IRModule.from_expr(Function(main.params, main.body.args[0]))
    inputs = zoo.random_inputs(logits, params, seed=6)
    exe = autorelay.build(logits, target, params=params, pipeline=pipeline, threads=2)
    assert exe.report.fallbacks == []
    configs = [r.detail for r in exe.report.rows if r.kind == "kernel"]
    assert sum("unroll_group" in c for c in configs) == packed, configs  # the packed form's knob
    want = _interpreter(logits, params, inputs)
    np.testing.assert_allclose(np.asarray(exe.run(**inputs)), want, rtol=1e-4,
                               atol=1e-4 * max(float(np.abs(want).max()), 1e-3))
