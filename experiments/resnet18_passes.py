"""ResNet-18 through the default pipeline: the pass report and the number of fused kernels.

Takes the zoo's ResNet-18 (batch norms included), binds its weights as constants, runs
`pipeline("default")` and prints the time and op counts of every pass, the op histogram before
and after, and the number of primitive functions FuseOps produced. Asserts that no `nn.batch_norm`
(and no scale `multiply`) survives: SimplifyInference + FoldConstant + FoldScaleAxis fold every
batch norm into the preceding convolution's weights and a per-channel bias.

    python experiments/resnet18_passes.py [--image-size 224] [--check]

`--check` also compares the optimised model with the original in the reference interpreter.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from autorelay.frontend import zoo
from autorelay.transform import bind_params, op_histogram, pipeline, primitive_functions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image-size", type=int, default=224)
    ap.add_argument("--check", action="store_true", help="compare outputs in the interpreter")
    args = ap.parse_args()

    mod, params = zoo.get("resnet-18", image_size=args.image_size)
    mod = bind_params(mod, params)
    before = op_histogram(mod)
    t0 = time.perf_counter()
    result = pipeline("default").run(mod)
    wall = time.perf_counter() - t0
    after = op_histogram(result.module)
    prims = primitive_functions(result.module)

    print(f"ResNet-18 (1x3x{args.image_size}x{args.image_size}), default pipeline\n")
    print(result.report())
    print(f"\nwall time including type checks: {wall:.2f} s")
    print("\nops before:", dict(sorted(before.items())))
    print("ops after: ", dict(sorted(after.items())))
    print(f"\nprimitive functions after FuseOps: {len(prims)}")
    assert before["nn.batch_norm"] > 0
    assert "nn.batch_norm" not in after, "a batch norm survived the default pipeline"
    assert "multiply" not in after, "a batch-norm scale was not folded into its convolution"

    if args.check:
        from autorelay.frontend.zoo import random_inputs
        from autorelay.runtime.interpreter import evaluate

        inputs = random_inputs(mod, {})
        ref = evaluate(mod, *inputs.values())
        got = evaluate(result.module, *inputs.values())
        err = float(np.max(np.abs(np.asarray(got) - np.asarray(ref))))
        print(f"max |optimised - original| = {err:.2e}")
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-5)


if __name__ == "__main__":
    main()
