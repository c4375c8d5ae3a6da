"""A short run of the digits training example: the IR gradient must actually train the CNN."""

from __future__ import annotations

import time

import numpy as np
from experiment_scripts import load_script


def load_example():
    return load_script("train_digits")


def test_brief_training_lowers_the_loss_and_beats_chance() -> None:
    ex = load_example()
    x_train, x_test, y_train, y_test = ex.load_digits_split(seed=0)
    t0 = time.perf_counter()
    trainer = ex.DigitsTrainer(batch=32, lr=0.1, seed=0)
    result = trainer.train(x_train, y_train, epochs=2, log=None)
    accuracy = trainer.accuracy(x_test, y_test)
    elapsed = time.perf_counter() - t0

    first, last = np.mean(result.step_losses[:5]), np.mean(result.step_losses[-5:])
    assert first > 1.5  # about log(10) = 2.3 at the start
    assert last < 0.5 * first, f"loss went from {first:.3f} to {last:.3f}"
    assert accuracy > 0.7, f"test accuracy {accuracy:.3f} (chance is 0.1)"
    assert elapsed < 20.0, f"took {elapsed:.1f} s"


def test_gradient_of_the_loss_matches_finite_differences_on_a_tiny_batch() -> None:
    """The trained program's gradient itself, checked on one parameter tensor (the output bias)."""
    import autorelay
    from autorelay.runtime.interpreter import evaluate

    ex = load_example()
    fn = ex.loss_function(batch=2)
    x_train, _, y_train, _ = ex.load_digits_split(seed=0)
    params = ex.init_params(seed=3)
    onehot = np.eye(ex.CLASSES, dtype="float32")[y_train[:2]]
    args = [x_train[:2], onehot, *params.values()]
    _, grads = evaluate(autorelay.gradient(fn), *args)
    b3 = len(args) - 1
    eps = 1e-2
    numeric = np.zeros(ex.CLASSES)
    for i in range(ex.CLASSES):
        plus, minus = [a.copy() for a in args], [a.copy() for a in args]
        plus[b3][i] += eps
        minus[b3][i] -= eps
        numeric[i] = (float(evaluate(fn, *plus)) - float(evaluate(fn, *minus))) / (2 * eps)
    np.testing.assert_allclose(grads[b3], numeric, rtol=2e-2, atol=2e-3)
