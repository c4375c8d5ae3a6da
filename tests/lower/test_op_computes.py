"""Every op with a compute, lowered and compiled under its default schedule, against its NumPy
reference on small shapes — most of them with extents that do not divide the vector width."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from lower_helpers import (
    assert_close,
    op_function,
    random_array,
    reference_outputs,
    run_lowered,
    tensor,
)

from autorelay.op import registry

pytestmark = pytest.mark.cpu

F = "float32"
A = tensor((3, 19))  # 19: not a multiple of any vector width
B3 = tensor((2, 3, 5))
POS = (0.2, 3.0)  # inputs for log/sqrt/pow/divide

UNARY = ["negative", "abs", "exp", "tanh", "sigmoid", "erf", "floor", "ceil", "round", "trunc", "sign",
         "copy", "zeros_like", "ones_like", "nn.relu"]
UNARY_POS = ["log", "sqrt", "rsqrt", "log2", "log10"]
BINARY = ["add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
          "greater", "greater_equal"]
BINARY_POS = ["divide", "power", "mod", "floor_mod", "floor_divide"]


def case(op: str, types: list[Any], attrs: dict[str, Any] | None = None,
         rng: tuple[float, float] = (-2.0, 2.0),
         rtol: float = 1e-5, ident: str = "") -> Any:
    return pytest.param(op, types, attrs or {}, rng, rtol, id=ident or op)


CASES = [
    *[case(op, [A]) for op in UNARY],
    case("negative", [tensor((4, 9), "int32")], ident="negative-int32"),
    case("abs", [tensor((4, 9), "int32")], ident="abs-int32"),
    *[case(op, [A], rng=POS) for op in UNARY_POS],
    case("isnan", [A]), case("isinf", [A]), case("isfinite", [A]),
    case("logical_not", [tensor((5, 3), "bool")]),
    *[case(op, [A, tensor((19,))]) for op in BINARY],
    *[case(op, [tensor((3, 1, 5)), tensor((4, 1))], ident=f"{op}-bcast") for op in ("add", "multiply")],
    case("add", [tensor((6, 5), "int32"), tensor((6, 5), "int32")], ident="add-int32"),
    # integer division and remainders, zero divisors included (shape arithmetic: ONNX Div, Mod on int64)
    *[case(op, [tensor((6, 5), dt), tensor((6, 5), dt)], rng=(-7, 7), ident=f"{op}-{dt}")
      for op in ("divide", "mod", "floor_mod", "floor_divide") for dt in ("int32", "int64", "uint8")],
    *[case(op, [A, A], rng=POS) for op in BINARY_POS],
    # bitwise ops; the shift counts run past the bit width and below 0 (NumPy's answers: 0 or -1)
    *[case(op, [tensor((6, 5), dt), tensor((6, 5), dt)], rng=(-3, 70), ident=f"{op}-{dt}")
      for op in ("bitwise_and", "bitwise_or", "bitwise_xor", "left_shift", "right_shift")
      for dt in ("int8", "uint8", "int32", "int64")],
    *[case("bitwise_not", [tensor((3, 7), dt)], rng=(-100, 100), ident=f"bitwise_not-{dt}")
      for dt in ("int8", "uint8", "int64")],
    *[case(op, [tensor((4, 7), "bool"), tensor((4, 7), "bool")]) for op in
      ("logical_and", "logical_or", "logical_xor")],
    case("where", [tensor((3, 19), "bool"), A, tensor((19,))]),
    case("cast", [A], {"dtype": "int32"}), case("cast", [tensor((3, 5), "int32")], {"dtype": "float32"},
                                                ident="cast-int-float"),
    case("cast_like", [A, tensor((2,), "float64")]),
    case("reinterpret", [A], {"dtype": "int32"}),
    case("reinterpret", [tensor((3, 19), "int16")], {"dtype": "uint16"}, rng=(-3, 3),
         ident="reinterpret-int16"),
    case("reinterpret", [tensor((4, 9), "bool")], {"dtype": "uint8"}, ident="reinterpret-bool"),
    case("clip", [A], {"a_min": -0.5, "a_max": 1.25}),
    case("zeros", [], {"shape": (3, 5)}), case("ones", [], {"shape": (2, 9), "dtype": "int32"}),
    case("full", [tensor(())], {"shape": (3, 7)}), case("full_like", [A, tensor(())]),
    case("broadcast_to", [tensor((3, 1))], {"shape": (2, 3, 7)}),
    case("broadcast_to_like", [tensor((1, 19)), A]),
    case("reshape_like", [tensor((3, 4)), tensor((2, 6))]),
    case("collapse_sum_like", [tensor((2, 3, 5)), tensor((3, 1))]),
    case("reshape", [B3], {"newshape": (5, -1)}), case("squeeze", [tensor((3, 1, 5, 1))], {"axis": [1]}),
    case("expand_dims", [A], {"axis": 1, "num_newaxis": 2}),
    case("transpose", [B3], {"axes": (2, 0, 1)}), case("transpose", [B3], ident="transpose-default"),
    case("reverse", [B3], {"axis": 1}),
    case("strided_slice", [tensor((7, 9))], {"begin": (1, 8), "end": (6, 0), "strides": (2, -3)}),
    case("take", [tensor((5, 6)), tensor((2, 3), "int32")], {"axis": 1}, rng=(-1, 7)),
    case("take", [tensor((5, 6)), tensor((4,), "int64")], {"mode": "wrap"}, rng=(-40, 40),
         ident="take-flat-wrap"),
    case("gather", [tensor((4, 6)), tensor((4, 3), "int32")], {"axis": 1}, rng=(-6, 5)),
    case("one_hot", [tensor((2, 3), "int32"), tensor(()), tensor(())], {"depth": 5, "axis": 1}, rng=(-1, 5)),
    case("concatenate", [[tensor((2, 3)), tensor((2, 5)), tensor((2, 1))]], {"axis": 1}),
    case("stack", [[tensor((2, 3)), tensor((2, 3))]], {"axis": 1}),
    case("split", [tensor((4, 10))], {"indices_or_sections": (3, 7), "axis": 1}),
    case("tile", [tensor((2, 3))], {"reps": (2, 1, 2)}),
    case("repeat", [tensor((2, 3))], {"repeats": 3, "axis": 0}),
    *[case(op, [B3], {"axis": [0, 2]}) for op in ("sum", "max", "min", "mean")],
    case("sum", [B3], {"axis": 1, "keepdims": True}, ident="sum-keepdims"),
    case("sum", [B3], ident="sum-all"),
    case("mean", [B3], {"axis": [1], "exclude": True}, ident="mean-exclude"),
    case("all", [tensor((4, 5), "bool")], {"axis": 1}), case("any", [tensor((4, 5), "bool")], {"axis": 0}),
    case("variance", [B3, tensor((2, 1, 5))], {"axis": 1, "keepdims": True}),
    case("nn.leaky_relu", [A], {"alpha": 0.1}),
    case("nn.prelu", [tensor((2, 3, 5)), tensor((3,))]),
    case("nn.bias_add", [tensor((2, 3, 5)), tensor((3,))]),
    case("nn.batch_flatten", [tensor((2, 3, 5))]),
    case("nn.softmax", [A]), case("nn.softmax", [B3], {"axis": 1}, ident="softmax-axis1"),
    case("nn.log_softmax", [A]),
    case("nn.layer_norm", [tensor((4, 19)), tensor((19,)), tensor((19,))], rtol=1e-4),
    case("nn.pad", [tensor((2, 3, 5)), tensor(())], {"pad_width": ((0, 0), (1, 2), (3, 0))}),
    case("nn.pad_grad", [tensor((2, 6, 8)), tensor((2, 3, 5))], {"pad_width": ((0, 0), (1, 2), (3, 0))}),
    *[case("nn.pad", [tensor((2, 3, 5)), tensor(())], {"pad_width": ((1, 0), (2, 2), (0, 4)), "pad_mode": m},
           ident=f"pad-{m}") for m in ("edge", "reflect")],
    # mirrored copies add up: both ends, one end, an edge-padded axis of one element
    *[case("nn.pad_grad", [tensor((4, 7, 9)), tensor((2, 3, 5))], {"pad_width": ((1, 1), (2, 2), (0, 4)),
                                                                   "pad_mode": m}, ident=f"pad_grad-{m}")
      for m in ("edge", "reflect")],
    case("nn.pad_grad", [tensor((5, 4)), tensor((1, 4))], {"pad_width": ((3, 1), (0, 0)), "pad_mode": "edge"},
         ident="pad_grad-edge-one-element"),
    case("nn.dense", [tensor((3, 21)), tensor((19, 21))], rtol=1e-4),
    case("nn.matmul", [tensor((3, 21)), tensor((19, 21))], {"transpose_b": True}, rtol=1e-4),
    case("nn.matmul", [tensor((3, 21)), tensor((21, 19))], rtol=1e-4, ident="matmul-nn"),
    case("nn.matmul", [tensor((21, 3)), tensor((21, 19))], {"transpose_a": True}, rtol=1e-4,
         ident="matmul-tn"),
    case("nn.matmul", [tensor((21, 3)), tensor((19, 21))], {"transpose_a": True, "transpose_b": True},
         rtol=1e-4, ident="matmul-tt"),
    case("nn.matmul", [tensor((2, 3, 5, 21)), tensor((21, 19))], rtol=1e-4, ident="matmul-4d"),
    case("nn.dense", [tensor((2, 5, 21)), tensor((19, 21))], rtol=1e-4, ident="dense-3d"),
    case("nn.batch_matmul", [tensor((2, 5, 7)), tensor((2, 19, 7))], rtol=1e-4),
    case("nn.batch_matmul", [tensor((2, 7, 5)), tensor((1, 7, 19))],
         {"transpose_a": True, "transpose_b": False}, rtol=1e-4, ident="batch_matmul-ta-bcast"),
    case("nn.batch_matmul", [tensor((1, 5, 7)), tensor((3, 7, 19))], {"transpose_b": False}, rtol=1e-4,
         ident="batch_matmul-nn-bcast-a"),
    case("nn.batch_matmul", [tensor((2, 7, 5)), tensor((2, 19, 7))], {"transpose_a": True}, rtol=1e-4,
         ident="batch_matmul-tt"),
    case("layout_transform", [tensor((1, 8, 3, 5))], {"src_layout": "NCHW", "dst_layout": "NCHW4c"}),
    case("layout_transform", [tensor((1, 2, 3, 5, 4))], {"src_layout": "NCHW4c", "dst_layout": "NHWC"},
         ident="layout_transform-unblock"),
    case("layout_transform", [tensor((1, 3, 2, 5, 16))], {"src_layout": "NCHW16c", "dst_layout": "NCHW8c"},
         ident="layout_transform-finer-block"),
    case("layout_transform", [tensor((1, 2, 3, 5, 8))], {"src_layout": "NCHW8c", "dst_layout": "NCHW16c"},
         ident="layout_transform-coarser-block"),
    case("layout_transform", [tensor((1, 2, 3, 2, 16))], {"src_layout": "NCHW16c", "dst_layout": "NHWC4c"},
         ident="layout_transform-finer-block-moved"),
    case("nn.conv2d", [tensor((1, 3, 9, 11)), tensor((5, 3, 3, 3))], {"padding": (1, 1)}, rtol=1e-4),
    case("nn.conv2d", [tensor((1, 4, 9, 9)), tensor((6, 4, 3, 3))], {"strides": (2, 2), "dilation": (1, 2)},
         rtol=1e-4, ident="conv2d-stride-dilation"),
    case("nn.conv2d", [tensor((1, 6, 10, 10)), tensor((6, 1, 3, 3))], {"groups": 6, "padding": (1, 1)},
         rtol=1e-4, ident="conv2d-depthwise"),
    case("nn.conv2d", [tensor((1, 2, 6, 6, 4)), tensor((3, 2, 3, 3, 4, 8))],
         {"data_layout": "NCHW4c", "kernel_layout": "OIHW4i8o", "out_layout": "NCHW8c", "padding": (1, 1)},
         rtol=1e-4, ident="conv2d-nchwc"),
    case("nn.conv2d", [tensor((1, 2, 9, 8, 4)), tensor((3, 2, 3, 2, 4, 8))],
         {"data_layout": "NCHW4c", "kernel_layout": "OIHW4i8o", "out_layout": "NCHW8c",
          "padding": (3, 1, 2, 4), "dilation": (3, 2), "strides": (1, 2)},
         rtol=1e-4, ident="conv2d-nchwc-dilated"),
    case("nn.conv2d", [tensor((1, 4, 7, 7, 4)), tensor((4, 2, 3, 3, 4, 4))],
         {"data_layout": "NCHW4c", "kernel_layout": "OIHW4i4o", "groups": 2, "padding": (2, 2),
          "dilation": (2, 2)},
         rtol=1e-4, ident="conv2d-nchwc-grouped-dilated"),
    case("nn.conv2d", [tensor((1, 6, 11, 9)), tensor((6, 1, 3, 5))],
         {"groups": 6, "padding": (2, 4, 3, 1), "dilation": (2, 3), "strides": (2, 1)},
         rtol=1e-4, ident="conv2d-depthwise-dilated"),
    case("nn.conv2d", [tensor((1, 2, 9, 9, 4)), tensor((2, 1, 3, 3, 1, 4))],
         {"data_layout": "NCHW4c", "kernel_layout": "OIHW1i4o", "groups": 8, "padding": (2, 2),
          "dilation": (2, 3)},
         rtol=1e-4, ident="conv2d-depthwise-nchwc-dilated"),
    case("nn.conv2d", [tensor((1, 2, 8, 8, 4)), tensor((2, 1, 3, 3, 2, 4))],
         {"data_layout": "NCHW4c", "kernel_layout": "OIHW2i4o", "groups": 4, "padding": (4, 1, 2, 3),
          "dilation": (3, 2)},
         rtol=1e-4, ident="conv2d-packed-groups-nchwc-dilated"),
    case("nn.conv2d", [tensor((1, 2, 7, 7, 4)), tensor((2, 1, 3, 3, 1, 4))],
         {"data_layout": "NCHW4c", "kernel_layout": "OIHW1i4o", "groups": 8, "padding": (1, 1),
          "strides": (2, 2)},
         rtol=1e-4, ident="conv2d-depthwise-nchwc"),
    case("nn.conv2d_transpose", [tensor((1, 4, 5, 5)), tensor((4, 3, 4, 4))],
         {"strides": (2, 2), "padding": (1, 1)}, rtol=1e-4),
    case("nn.max_pool2d", [tensor((1, 3, 9, 9))], {"pool_size": (3, 3), "strides": (2, 2),
                                                   "padding": (1, 1)}),
    case("nn.max_pool2d", [tensor((1, 2, 8, 8))], {"pool_size": (3, 3), "strides": (2, 2), "ceil_mode": True},
         ident="max_pool2d-ceil"),
    # quantized values: padding reads the type's minimum (the real -inf)
    case("nn.max_pool2d", [tensor((2, 3, 9, 9), "uint8")],
         {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)}, rng=(0, 255), ident="max_pool2d-u8"),
    case("nn.max_pool2d", [tensor((1, 3, 8, 8), "int8")],
         {"pool_size": (2, 2), "strides": (2, 2), "padding": (1, 1)}, rng=(-128, 127), ident="max_pool2d-s8"),
    case("nn.avg_pool2d", [tensor((1, 3, 9, 9))], {"pool_size": (3, 3), "strides": (2, 2),
                                                   "padding": (1, 1)}),
    case("nn.avg_pool2d", [tensor((1, 3, 9, 9))],
         {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1), "count_include_pad": True},
         ident="avg_pool2d-include-pad"),
    case("nn.global_avg_pool2d", [tensor((2, 3, 5, 7))]),
    case("nn.max_pool2d", [tensor((1, 2, 7, 7, 4))],
         {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1), "layout": "NCHW4c"},
         ident="max_pool2d-nchwc"),
    case("nn.global_avg_pool2d", [tensor((1, 2, 5, 3, 4))], {"layout": "NCHW4c"}, ident="global_avg-nchwc"),
    case("nn.adaptive_avg_pool2d", [tensor((1, 3, 10, 7))], {"output_size": (4, 3)}),
    case("nn.global_max_pool2d", [tensor((2, 3, 5, 7))]),
]


@pytest.mark.parametrize(("op", "types", "attrs", "rng", "rtol"), CASES)
def test_compute_matches_reference(op: str, types: list[Any], attrs: dict[str, Any], rng: tuple, rtol: float):
    fn = op_function(op, types, attrs)
    gen = np.random.default_rng(7)
    flat = [t for x in types for t in (x if isinstance(x, list) else [x])]
    inputs = [random_array(t.concrete_shape, t.dtype, gen, *rng) for t in flat]
    want = reference_outputs(fn, inputs)
    assert_close(run_lowered(fn, inputs), want, rtol=rtol, atol=rtol)
    # property: any legal config of the template computes the same thing
    assert_close(run_lowered(fn, inputs, sample=random.Random(f"{op}{attrs}")), want, rtol=rtol, atol=rtol)


def test_every_compute_has_a_case():
    from test_op_computes_more import MORE_CASES

    covered = {p.values[0] for p in CASES + MORE_CASES} | {q[0] for q in QNN} | set(TESTED_ELSEWHERE)
    with_compute = {o.name for o in registry.all_ops() if o.compute is not None}
    missing = sorted(with_compute - covered)
    assert not missing, f"ops with a compute but no test case: {missing}"


# integer ops whose kernels are checked bit for bit against integer oracles in their own files
TESTED_ELSEWHERE = {op: "tests/op/test_qnn_nn.py" for op in
                    ("qnn.conv2d", "qnn.dense", "qnn.add", "qnn.concatenate")}
TESTED_ELSEWHERE.update({op: "tests/lower/test_bf16_op_computes.py" for op in
                         ("bf16.quantize", "bf16.dequantize", "bf16.dense", "bf16.conv2d")})

QNN = [
    ("qnn.quantize", {"out_dtype": "int8"}, [(3, 19), (), ()], False),
    ("qnn.quantize", {"out_dtype": "uint8", "axis": 0}, [(3, 19), (3,), (3,)], False),
    ("qnn.dequantize", {"axis": 1}, [(4, 5), (5,), (5,)], True),
    ("qnn.requantize", {"rounding": "UPWARD"}, [(3, 19), (), (), (), ()], True),
    ("qnn.requantize", {"rounding": "TONEAREST", "axis": 0}, [(3, 19), (3,), (3,), (), ()], True),
]


@pytest.mark.parametrize(("op", "attrs", "shapes", "int_data"), QNN,
                         ids=[f"{q[0]}-{i}" for i, q in enumerate(QNN)])
def test_qnn_computes(op: str, attrs: dict, shapes: list, int_data: bool):
    """Scales are positive float32 and zero points int32, so these cases pick their own inputs."""
    gen = np.random.default_rng(3)
    data = gen.integers(-128, 128, shapes[0]).astype("int8") if int_data else \
        (gen.standard_normal(shapes[0]) * 40).astype("float32")
    params = []
    for k, shp in enumerate(shapes[1:]):
        is_scale = k % 2 == 0
        params.append(gen.uniform(0.05, 0.5, shp).astype("float32") if is_scale else
                      gen.integers(-5, 6, shp).astype("int32"))
    types = [tensor(a.shape, str(a.dtype)) for a in (data, *params)]
    if op == "qnn.requantize":  # its kernel rescales by multipliers derived from constant scales
        types = [types[0], params[0], types[2], params[2], types[4]]
        inputs = [data, params[1], params[3]]
    else:
        inputs = [data, *params]
    fn = op_function(op, types, attrs)
    assert_close(run_lowered(fn, inputs), reference_outputs(fn, inputs))


def test_requantize_with_run_time_scales_has_no_compute():
    """Scales only known at run time: no kernel (the build reports a NumPy fallback), never a guess."""
    from autorelay.lower.lower import NoCompute, lower

    types = [tensor((3, 4), "int32"), tensor((), "float32"), tensor((), "int32"), tensor((), "float32"),
             tensor((), "int32")]
    with pytest.raises(NoCompute, match="constant scales"):
        lower(op_function("qnn.requantize", types, {}))


@pytest.mark.parametrize("dtype", ["int32", "int64", "int8", "int16"])
def test_integer_division_never_traps(dtype: str):
    """x86's `idiv` raises SIGFPE (the process dies) on a zero divisor and on the minimum divided by
    -1. Compiled integer division, quotient and both remainders, gives the references' answers for
    both: 0 for a zero divisor, and the wrapped quotient and a zero remainder for min / -1."""
    import autorelay

    lo = np.iinfo(dtype).min
    a = np.array([lo, lo, 7, -7, lo, 5, -3, 0, 9, lo + 1], dtype)
    b = np.array([-1, 0, -1, 2, 3, 0, -1, -1, -4, -1], dtype)
    for op in ("divide", "mod", "floor_mod", "floor_divide"):
        fn = op_function(op, [tensor(a.shape, dtype), tensor(b.shape, dtype)], {})
        want = reference_outputs(fn, [a, b])
        mod = autorelay.parse(f"def @main(%a: Tensor[(10,), {dtype}], %b: Tensor[(10,), {dtype}]) "
                              f"{{ {op}(%a, %b) }}")
        exe = autorelay.build(mod, target="llvm")
        assert not exe.report.fallbacks, str(exe.report)
        np.testing.assert_array_equal(exe(a, b), want[0], err_msg=op)


@pytest.mark.parametrize("dtype", ["int16", "uint16", "uint32", "uint64", "uint8"])
def test_every_integer_type_compiles_with_its_signedness(dtype: str):
    """Every integer type the IR holds has kernels: arithmetic that wraps, comparisons, min/max,
    shifts and division read the unsigned types as unsigned (values past the signed range among the
    inputs), and casts widen, narrow and convert to float by the type's sign; against the reference
    interpreter (NumPy)."""
    import autorelay

    info = np.iinfo(dtype)
    rng = np.random.default_rng(5)
    draw = rng.integers(info.min, info.max, (2, 13), dtype=dtype, endpoint=True)
    a = np.concatenate([np.array([info.max, info.min, info.max // 2 + 3], dtype), draw[0]])
    b = np.concatenate([np.array([3, 0, info.max], dtype), draw[1]])
    other = "int64" if dtype != "uint64" else "uint32"
    body = (f"(add(%a, %b), multiply(%a, %b), subtract(%a, %b), less(%a, %b), maximum(%a, %b), "
            f"minimum(%a, %b), right_shift(%a, %s), left_shift(%a, %s), divide(%a, %b), floor_mod(%a, %b), "
            f'cast(%a, dtype="float32"), cast(%a, dtype="float64"), cast(%a, dtype="{other}"), '
            f'cast(%a, dtype="int8"), cast(cast(%s, dtype="float32"), dtype="{dtype}"))')
    src = (f"def @main(%a: Tensor[(16,), {dtype}], %b: Tensor[(16,), {dtype}], %s: Tensor[(16,), {dtype}]) "
           f"{{ {body} }}")
    mod = autorelay.parse(src)
    shifts = (np.arange(16) % np.iinfo(dtype).bits).astype(dtype)
    exe = autorelay.build(mod, target="llvm")
    assert not exe.report.fallbacks, str(exe.report)
    want = autorelay.evaluate(autorelay.infer_types(mod), a, b, shifts)
    for i, (got, ref) in enumerate(zip(exe(a, b, shifts), want)):
        assert got.dtype == ref.dtype
        np.testing.assert_array_equal(got, ref, err_msg=f"output {i}")
