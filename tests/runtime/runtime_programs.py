"""Shared fixtures of the runtime tests: a hand-written List program (the prelude's own List is
deliberately not used, so these tests do not depend on it) and seeded float32 inputs."""

from __future__ import annotations

import numpy as np

LIST = """#[version = "0.0.5"]
type List[A] { Cons(A, List[A]), Nil, }
def @length[A](%l: List[A]) -> int32 {
  match (%l) {
    Cons(_, %t) => add(1, @length(%t)),
    Nil => 0,
  }
}
def @map[A, B](%f: fn (A) -> B, %l: List[A]) -> List[B] {
  match (%l) {
    Cons(%h, %t) => Cons(%f(%h), @map(%f, %t)),
    Nil => Nil,
  }
}
"""

# nested constructor patterns with a fallthrough, and a tuple pattern
PATTERNS = LIST + """
def @first_two(%l: List[Tensor[(), int32]]) -> Tensor[(), int32] {
  match (%l) {
    Cons(%a, Cons(%b, _)) => add(%a, %b),
    Cons(%a, Nil) => %a,
    Nil => -1,
  }
}
def @swap(%p: (Tensor[(), int32], Tensor[(), int32])) {
  match (%p) {
    (%a, %b) => (%b, %a),
  }
}
"""


def f32(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def interpret_main(mod, params, *inputs):
    """The reference interpreter's answer for `main(*inputs, *params)`: the oracle the compiled
    executors (VM, AoT) are checked against."""
    from autorelay.runtime.interpreter import Interpreter

    main = mod["main"]
    return Interpreter(mod).call("main", *inputs, *[params[p.name_hint] for p in main.params[len(inputs):]])
