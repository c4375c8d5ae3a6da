"""Shared helpers: wrap one op call (or a Relay snippet) as a typed primitive function, lower it,
compile it under the default config and run it."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

import autorelay
from autorelay.codegen.llvm.host import host_target
from autorelay.ir.attrs import Attrs
from autorelay.ir.expr import Function, Var
from autorelay.ir.module import IRModule
from autorelay.ir.types import TensorType, TupleType
from autorelay.kernel import compile_kernel
from autorelay.lower import lower
from autorelay.op import registry
from autorelay.schedule.templates import template_for
from autorelay.te.tensor import ComputeDef

PRIMITIVE = Attrs({"Primitive": 1})


def random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator, low: float = -2.0,
                 high: float = 2.0) -> np.ndarray:
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype.startswith("int") or dtype.startswith("uint"):
        return rng.integers(int(low), int(high) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)


def op_function(name: str, arg_types: list[Any], attrs: dict[str, Any]) -> Function:
    """A typed primitive function calling op `name` on parameters of `arg_types` (a list of
    TensorTypes is one tuple-typed argument, passed as a Tuple of parameters; a NumPy array is a
    constant argument)."""
    from autorelay.ir.expr import Constant, Tuple

    params: list[Var] = []
    args = []
    for t in arg_types:
        if isinstance(t, np.ndarray):
            args.append(Constant(t))
        elif isinstance(t, list):
            vs = [Var(f"x{len(params) + k}", f) for k, f in enumerate(t)]
            params += vs
            args.append(Tuple(tuple(vs)))
        else:
            v = Var(f"x{len(params)}", t)
            params.append(v)
            args.append(v)
    call = registry.call(name, *args, **attrs)
    mod = autorelay.infer_types(IRModule.from_expr(Function(tuple(params), call)))
    fn = mod["main"]
    return Function(fn.params, fn.body, fn.body.checked_type, (), PRIMITIVE)


def run_lowered(fn: Function, inputs: list[np.ndarray],
                sample: random.Random | None = None) -> list[np.ndarray]:
    """Lower `fn`, build one kernel per output and run them on `inputs`: under the template's
    default config, or — given `sample` — under a config drawn at random from its space (any
    legal config must give the same answer)."""
    lowered = lower(fn)
    consts = [s.value for s in lowered.sources if s.kind == "const"]
    arrays = [inputs[s.index] if s.kind == "param" else None for s in lowered.sources]
    it = iter(consts)
    arrays = [a if a is not None else next(it) for a in arrays]
    outs = []
    target = host_target()
    for o in lowered.cdef.outputs:
        cdef = ComputeDef(lowered.cdef.inputs, (o,), "t")
        config = None
        if sample is not None:
            config = template_for(cdef).space(cdef, target).sample(sample)
        k = compile_kernel(cdef, config, target)
        outs.append(np.asarray(k.run(*arrays)))
    return outs


def reference_outputs(fn: Function, inputs: list[np.ndarray]) -> list[np.ndarray]:
    out = autorelay.evaluate(fn, *inputs)
    return [np.asarray(o) for o in out] if isinstance(out, tuple) else [np.asarray(out)]


def assert_close(got: list[np.ndarray], want: list[np.ndarray], rtol: float = 1e-5,
                 atol: float = 1e-5) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        if w.dtype == np.bool_ or w.dtype.kind in "iu":
            np.testing.assert_array_equal(g.astype(w.dtype), w)
        else:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def tensor(shape: tuple[int, ...], dtype: str = "float32") -> TensorType:
    return TensorType(shape, dtype)


def tuple_of(*ts: TensorType) -> TupleType:
    return TupleType(tuple(ts))
