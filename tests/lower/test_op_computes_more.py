"""The computes added for the last op families — trigonometry, prod/argmax/argmin/cumsum, resize and
upsampling, conv1d, lrn, dropout, batch_norm, cross_entropy — the direct (gather) form of
conv2d_transpose and conv1d_transpose, the Winograd convolution ops and scatter_elements, each
lowered under its default schedule against the op's NumPy reference on small shapes, most with
extents that divide no vector width.
`test_op_computes` checks coverage over both files."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from lower_helpers import assert_close, op_function, random_array, reference_outputs, run_lowered, tensor

pytestmark = pytest.mark.cpu

A = tensor((3, 19))
B3 = tensor((2, 3, 5))
I32 = tensor((3, 19), "int32")
MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
ROUNDING = ("round", "floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def case(op: str, types: list[Any], attrs: dict[str, Any] | None = None,
         rng: tuple[float, float] = (-2.0, 2.0), rtol: float = 1e-5, ident: str = "") -> Any:
    return pytest.param(op, types, attrs or {}, rng, rtol, id=ident or op)


def _resize(method: str, mode: str, src: tuple, size: tuple, **extra: Any) -> Any:
    attrs = {"size": size, "method": method, "coordinate_transformation_mode": mode, **extra}
    return case("image.resize2d", [tensor(src)], attrs, rng=(-5.0, 5.0),
                ident=f"resize2d-{method}-{mode}-{'x'.join(map(str, size))}")


MORE_CASES = [
    case("nn.winograd_weight_transform", [tensor((5, 4, 3, 3))]),
    case("nn.conv2d_winograd", [tensor((1, 6, 7, 9)), tensor((16, 5, 6))], {"padding": (1, 1, 1, 1)},
         rtol=1e-4),
    case("nn.conv2d_winograd", [tensor((2, 3, 6, 5)), tensor((16, 4, 3))], {"padding": (0, 1, 2, 0)},
         rtol=1e-4, ident="conv2d_winograd-asymmetric"),
    *[case(op, [A], rng=(-4.0, 4.0)) for op in ("sin", "cos", "atan")],
    case("tan", [A], rng=(-1.4, 1.4)),
    case("prod", [B3], {"axis": [0, 2]}, rng=(0.5, 1.5)),
    case("prod", [tensor((4, 7), "int32")], {"axis": 1, "keepdims": True}, rng=(-3, 3), ident="prod-int32"),
    case("prod", [tensor((3, 4))], rng=(0.8, 1.2), ident="prod-all"),
    # small integer ranges make ties, where the first (or last) index must win
    case("argmax", [B3], {"axis": 1}),
    case("argmax", [I32], {"axis": 1}, ident="argmax-ties"),
    case("argmax", [I32], {"axis": 1, "select_last_index": True}, ident="argmax-ties-last"),
    case("argmin", [tensor((2, 3, 5), "int32")], {"axis": [0, 2], "keepdims": True},
         ident="argmin-ties-multi"),
    case("argmin", [B3], ident="argmin-all"),
    case("argmin", [I32], {"axis": 0, "select_last_index": True}, ident="argmin-ties-last"),
    case("cumsum", [B3], {"axis": 1}),
    case("cumsum", [B3], ident="cumsum-flat"),
    case("cumsum", [tensor((4, 7), "int32")], {"axis": -1, "exclusive": True, "dtype": "int64"}, rng=(-3, 3),
         ident="cumsum-exclusive-int"),
    # longer than two blocks: scanned in blocks, with a carry that is blocked again past 64 blocks
    case("cumsum", [tensor((5000,), "int64")], {"axis": 0}, rng=(-3, 3), ident="cumsum-blocked-2-levels-int"),
    case("cumsum", [tensor((2, 97, 3))], {"axis": 1, "exclusive": True}, rtol=1e-4,
         ident="cumsum-blocked-exclusive-middle-axis"),
    case("cumsum", [tensor((13, 11))], rtol=1e-4, ident="cumsum-blocked-flat"),
    *[_resize(m, mode, (1, 2, 5, 7), (9, 4)) for m in ("nearest_neighbor", "linear") for mode in MODES],
    # 3 -> 7 along W puts a source coordinate exactly on an integer: nearest must round it like NumPy
    *[_resize(m, mode, (1, 2, 6, 3), (1, 7)) for m in ("nearest_neighbor", "linear") for mode in MODES],
    *[_resize("cubic", mode, (1, 2, 5, 7), size, cubic_alpha=-0.75) for mode in MODES
      for size in ((9, 4), (1, 13))],
    case("image.resize2d", [tensor((2, 5, 7, 3))], {"size": (3, 9), "layout": "NHWC", "method": "cubic"},
         ident="resize2d-cubic-nhwc"),
    *[case("image.resize2d", [tensor((1, 2, 5, 7))],
           {"size": (8, 3), "method": "nearest_neighbor", "rounding_method": r}, rng=(-5.0, 5.0),
           ident=f"resize2d-rounding-{r}") for r in ROUNDING],
    case("image.resize2d", [tensor((2, 5, 7, 3))], {"size": (9, 4), "layout": "NHWC"}, ident="resize2d-nhwc"),
    case("image.resize2d", [tensor((1, 2, 5, 7), "int32")], {"size": (9, 4), "method": "nearest_neighbor"},
         rng=(-9, 9), ident="resize2d-int32"),
    case("image.resize2d", [tensor((1, 2, 5, 7))], {"size": (9, 4), "out_dtype": "int32"}, rng=(-9.0, 9.0),
         ident="resize2d-out-int32"),
    case("nn.upsampling", [tensor((1, 3, 4, 5))], {"scale_h": 2.0, "scale_w": 1.5}),
    case("nn.upsampling", [tensor((1, 3, 4, 5))], {"scale_h": 2.0, "scale_w": 2.0, "method": "bilinear"},
         ident="upsampling-bilinear"),
    case("nn.upsampling", [tensor((1, 3, 4, 5))],
         {"scale_h": 1.5, "scale_w": 2.5, "method": "bilinear", "align_corners": True},
         ident="upsampling-bilinear-align"),
    case("nn.upsampling", [tensor((1, 4, 5, 3))], {"scale_h": 3.0, "scale_w": 2.0, "layout": "NHWC"},
         ident="upsampling-nhwc"),
    case("nn.conv1d", [tensor((2, 3, 11)), tensor((5, 3, 3))], {"padding": (1, 2)}, rtol=1e-4),
    # resize's gradient (grad, data): up and down, every coordinate mode, both methods, NHWC
    *[case("image.resize2d_grad", [tensor((1, 2, *size)), tensor((1, 2, *src))],
           {"size": size, "method": method, "coordinate_transformation_mode": mode}, rtol=1e-5,
           ident=f"resize2d_grad-{method}-{mode}-{'x'.join(map(str, src))}-to-{'x'.join(map(str, size))}")
      for method in ("linear", "nearest_neighbor") for mode in MODES
      for src, size in (((4, 9), (11, 5)), ((5, 3), (16, 3)), ((7, 6), (3, 13)))],
    case("image.resize2d_grad", [tensor((1, 8, 10, 3)), tensor((1, 3, 5, 3))],
         {"size": (8, 10), "method": "nearest_neighbor", "rounding_method": "ceil", "layout": "NHWC"},
         ident="resize2d_grad-nearest-ceil-nhwc"),
    # weight gradients (grad, data): the output gradient's extents follow from the window
    case("nn.conv2d_backward_weight", [tensor((2, 6, 5, 3)), tensor((2, 4, 9, 9))],
         {"strides": (2, 2), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2, "channels": 6,
          "kernel_size": (3, 3)}, rtol=1e-4, ident="conv2d_backward_weight-grouped"),
    case("nn.conv2d_backward_weight", [tensor((1, 5, 9, 11)), tensor((1, 3, 9, 11))],
         {"padding": (1, 1, 1, 1), "channels": 5, "kernel_size": (3, 3)}, rtol=1e-4),
    case("nn.conv1d_backward_weight", [tensor((2, 5, 6)), tensor((2, 3, 11))],
         {"strides": (2,), "padding": (1, 1), "channels": 5, "kernel_size": (3,)}, rtol=1e-4),
    # pooling gradients (grad, data), gathered per pixel over the window taps that read it: padding,
    # overlapping and dilated windows, ceil-mode overhang, channel blocks
    case("nn.max_pool2d_grad", [tensor((2, 3, 5, 5)), tensor((2, 3, 9, 9))],
         {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)}, ident="max_pool2d_grad-stem"),
    case("nn.max_pool2d_grad", [tensor((1, 2, 4, 6)), tensor((1, 2, 8, 7))],
         {"pool_size": (2, 3), "strides": (2, 1), "dilation": (2, 1), "padding": (1, 0, 0, 1),
          "ceil_mode": True}, ident="max_pool2d_grad-dilated-ceil"),
    case("nn.max_pool2d_grad", [tensor((1, 2, 3, 3, 4)), tensor((1, 2, 6, 6, 4))],
         {"pool_size": (2, 2), "strides": (2, 2), "layout": "NCHW4c"}, ident="max_pool2d_grad-nchw4c"),
    *[case("nn.adaptive_avg_pool2d_grad", [tensor((2, 3, *out)), tensor((2, 3, *src))], {"output_size": out},
           ident=f"adaptive_avg_pool2d_grad-{'x'.join(map(str, src))}-to-{'x'.join(map(str, out))}")
      for src, out in (((7, 9), (3, 4)), ((5, 3), (7, 3)), ((6, 6), (1, 1)), ((4, 10), (4, 3)))],
    case("nn.avg_pool2d_grad", [tensor((2, 3, 4, 4)), tensor((2, 3, 7, 8))],
         {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)}, ident="avg_pool2d_grad-padded"),
    case("nn.avg_pool2d_grad", [tensor((1, 2, 3, 3)), tensor((1, 2, 6, 6))],
         {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 0, 1, 2), "count_include_pad": True},
         ident="avg_pool2d_grad-include-pad"),
    case("nn.avg_pool2d_grad", [tensor((1, 1, 3, 4, 8)), tensor((1, 1, 6, 7, 8))],
         {"pool_size": (2, 2), "strides": (2, 2), "ceil_mode": True, "layout": "NCHW8c"},
         ident="avg_pool2d_grad-ceil-nchw8c"),
    case("nn.conv1d", [tensor((1, 4, 13)), tensor((6, 2, 3))],
         {"strides": (2,), "dilation": (2,), "groups": 2, "padding": (1,)}, rtol=1e-4,
         ident="conv1d-grouped"),
    case("nn.conv1d", [tensor((1, 4, 9)), tensor((4, 1, 3))], {"groups": 4}, rtol=1e-4, ident="conv1d-dw"),
    # grouped 2-d convolutions that are neither plain nor the depthwise kernel
    case("nn.conv2d", [tensor((2, 8, 9, 7)), tensor((12, 4, 3, 3))],
         {"groups": 2, "padding": (1, 0, 2, 1), "strides": (2, 1)}, rtol=1e-4, ident="conv2d-grouped"),
    case("nn.conv2d", [tensor((1, 6, 8, 8)), tensor((6, 1, 3, 3))],
         {"groups": 6, "padding": (2, 2), "dilation": (2, 2)}, rtol=1e-4, ident="conv2d-dw-dilated"),
    case("nn.conv2d", [tensor((1, 6, 5, 6)), tensor((9, 2, 1, 3))], {"groups": 3}, rtol=1e-4,
         ident="conv2d-grouped-1x3"),
    # grouped convolutions in channel blocks (each group's channels whole blocks): output block f reads
    # its group's input blocks, also where a register tile spans blocks of two groups
    case("nn.conv2d", [tensor((2, 4, 7, 6, 4)), tensor((8, 2, 3, 3, 4, 4))],
         {"groups": 2, "padding": (1, 1), "strides": (2, 1), "data_layout": "NCHW4c",
          "kernel_layout": "OIHW4i4o"}, rtol=1e-4, ident="conv2d-grouped-nchw4c"),
    case("nn.conv2d", [tensor((1, 4, 6, 6, 4)), tensor((4, 1, 3, 3, 4, 8))],
         {"groups": 4, "padding": (1, 2, 0, 1), "data_layout": "NCHW4c", "kernel_layout": "OIHW4i8o",
          "out_layout": "NCHW8c"}, rtol=1e-4, ident="conv2d-grouped-blocks-4-to-8"),
    case("nn.lrn", [tensor((1, 7, 3, 5))], {"size": 3, "alpha": 0.1}),
    case("nn.lrn", [tensor((2, 5, 11))], {"size": 4, "axis": -1, "alpha": 0.5, "beta": 0.6, "bias": 1.0},
         ident="lrn-even-size-last-axis"),
    case("nn.dropout", [A], {"rate": 0.3}),
    case("nn.batch_norm", [B3, *[tensor((3,))] * 4], rng=(0.1, 2.0)),
    case("nn.batch_norm", [tensor((2, 5, 3)), *[tensor((3,))] * 4],
         {"axis": -1, "center": False, "scale": False}, rng=(0.1, 2.0), ident="batch_norm-last-axis-plain"),
    case("nn.cross_entropy", [tensor((3, 7)), tensor((3, 7))], rng=(0.1, 1.0)),
    # scatter: indices in [-n, n) drawn with the data; one update per column (update), or several
    # landing on one element (the reductions)
    case("scatter_elements", [tensor((4, 5)), tensor((1, 5), "int64"), tensor((1, 5))], rng=(-4, 3)),
    # one update per column: where it lands, max/min must still see the value already there
    *[case("scatter_elements", [tensor((4, 5)), tensor((1, 5), "int64"), tensor((1, 5))],
           {"reduction": how}, rng=(-4, 3), ident=f"scatter_elements-{how}-single")
      for how in ("max", "min")],
    *[case("scatter_elements", [tensor((3, 7)), tensor((2, 9), "int32"), tensor((2, 9))],
           {"axis": 1, "reduction": how}, rng=(-7, 6), ident=f"scatter_elements-{how}")
      for how in ("add", "max", "min")],
    case("scatter_elements", [tensor((5, 3), "int32"), tensor((4, 2), "int64"), tensor((4, 2), "int32")],
         {"axis": 0, "reduction": "mul"}, rng=(-5, 4), ident="scatter_elements-mul-int32"),
    # the gather form of the transposed convolution: ragged taps per phase, groups, output_padding
    case("nn.conv2d_transpose", [tensor((2, 3, 6, 7)), tensor((3, 5, 3, 3))],
         {"strides": (2, 2), "padding": (1, 1), "output_padding": (1, 1)}, rtol=1e-4, ident="convT-outpad"),
    case("nn.conv2d_transpose", [tensor((1, 3, 5, 4)), tensor((3, 2, 5, 3))],
         {"strides": (3, 2), "padding": (2, 0, 1, 2)}, rtol=1e-4, ident="convT-ragged-asym-pad"),
    case("nn.conv2d_transpose", [tensor((1, 4, 5, 5)), tensor((4, 2, 4, 3))],
         {"strides": (2, 3), "padding": (1, 1), "groups": 2}, rtol=1e-4, ident="convT-grouped"),
    case("nn.conv2d_transpose", [tensor((1, 4, 5, 5)), tensor((4, 3, 3, 3))], rtol=1e-4,
         ident="convT-stride1"),
    # the same in 1-d: ragged taps (kernel 5, stride 2), asymmetric padding and output_padding,
    # groups, a kernel the stride divides (an audio decoder's 16 / 8), stride 1
    case("nn.conv1d_transpose", [tensor((2, 3, 9)), tensor((3, 4, 5))],
         {"strides": (2,), "padding": (2, 1), "output_padding": (1,)}, rtol=1e-4, ident="convT1d-ragged"),
    case("nn.conv1d_transpose", [tensor((1, 4, 7)), tensor((4, 3, 3))],
         {"strides": (3,), "padding": (1, 1), "groups": 2}, rtol=1e-4, ident="convT1d-grouped"),
    case("nn.conv1d_transpose", [tensor((1, 3, 6)), tensor((3, 2, 16))],
         {"strides": (8,), "padding": (4, 4)}, rtol=1e-4, ident="convT1d-upsample8"),
    case("nn.conv1d_transpose", [tensor((1, 2, 5)), tensor((2, 3, 3))], rtol=1e-4, ident="convT1d-stride1"),
    # dilated: every tap, masked where it falls between input elements
    case("nn.conv1d_transpose", [tensor((1, 4, 6)), tensor((4, 3, 3))],
         {"strides": (2,), "dilation": (3,), "padding": (2, 1), "groups": 2}, rtol=1e-4,
         ident="convT1d-dilated"),
    case("nn.conv2d_transpose", [tensor((1, 3, 5, 4)), tensor((3, 2, 3, 2))],
         {"strides": (2, 3), "dilation": (2, 3), "padding": (1, 0, 2, 1), "output_padding": (1, 2)},
         rtol=1e-4, ident="convT-dilated"),
]


@pytest.mark.parametrize(("op", "types", "attrs", "rng", "rtol"), MORE_CASES)
def test_compute_matches_reference(op: str, types: list[Any], attrs: dict[str, Any], rng: tuple, rtol: float):
    fn = op_function(op, types, attrs)
    gen = np.random.default_rng(11)
    inputs = [random_array(t.concrete_shape, t.dtype, gen, *rng) for t in types]
    want = reference_outputs(fn, inputs)
    assert_close(run_lowered(fn, inputs), want, rtol=rtol, atol=rtol)
    # property: any legal config of the template computes the same thing
    assert_close(run_lowered(fn, inputs, sample=random.Random(f"{op}{attrs}")), want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize(("src", "size"), [((4, 9), (11, 5)), ((7, 3), (3, 8)), ((5, 6), (10, 12))])
def test_nearest_resize_picks_the_reference_pixel(src: tuple, size: tuple):
    """A ramp input makes every output element name its source pixel exactly, in every mode."""
    x = np.arange(src[0] * src[1], dtype="float32").reshape(1, 1, *src)
    for mode in MODES:
        for rounding in ("", *ROUNDING):
            attrs = {"size": size, "method": "nearest_neighbor", "coordinate_transformation_mode": mode,
                     "rounding_method": rounding}
            fn = op_function("image.resize2d", [tensor(x.shape)], attrs)
            assert_close(run_lowered(fn, [x]), reference_outputs(fn, [x]), rtol=0, atol=0)


def test_conv2d_transpose_skips_the_dilated_zeros():
    """The stride-2, 4x4-kernel compute (dcgan's layers) sums 2x2 taps per output, not 4x4."""
    from autorelay.lower import lower
    from autorelay.te.expr import Reduce

    fn = op_function("nn.conv2d_transpose", [tensor((1, 8, 4, 4)), tensor((8, 4, 4, 4))],
                     {"strides": (2, 2), "padding": (1, 1)})
    out = lower(fn).cdef.outputs[0]
    assert isinstance(out.op.body, Reduce)
    assert [a.extent for a in out.op.body.axes] == [8, 2, 2]


def test_max_pool_gradient_goes_to_the_first_maximal_element():
    """Ties everywhere (values in {0, 1}), a window of -inf beside its padding and a NaN: each
    window's gradient goes to the tap NumPy's argmax picks, as in the reference."""
    gen = np.random.default_rng(5)
    x = gen.integers(0, 2, (1, 2, 7, 7)).astype("float32")
    x[0, 0, :2, :2] = -np.inf  # the first window holds only -inf and padding (also -inf)
    x[0, 1, 3, 4] = np.nan
    g = gen.standard_normal((1, 2, 4, 4)).astype("float32")
    fn = op_function("nn.max_pool2d_grad", [tensor(g.shape), tensor(x.shape)],
                     {"pool_size": (3, 3), "strides": (2, 2), "padding": (1, 1)})
    want = reference_outputs(fn, [g, x])
    assert_close(run_lowered(fn, [g, x]), want, rtol=0, atol=0)


@pytest.mark.parametrize("exclusive", [False, True])
def test_cumsum_reads_a_bounded_prefix_per_position(exclusive: bool):
    """A scan of 10^6 positions (a detector's NonZero over its anchor scores) lowers to stages
    that each sum at most two blocks per position: a masked sum over the whole prefix would read
    5 * 10^11 elements."""
    from autorelay.lower.lower import lower_primitive
    from autorelay.op.reduce_sort import SCAN_BLOCK
    from autorelay.te.expr import Reduce
    from autorelay.te.tensor import topo_order

    attrs = {"axis": 0, "exclusive": exclusive}
    cdef = lower_primitive(op_function("cumsum", [tensor((10**6,), "int64")], attrs))
    stages = [t for t in topo_order([cdef.output]) if t.op is not None]
    reduce_extents = [int(np.prod([a.extent for a in t.op.body.axes])) for t in stages
                      if isinstance(t.op.body, Reduce)]
    assert len(reduce_extents) >= 3 and max(reduce_extents) <= 2 * SCAN_BLOCK, reduce_extents
