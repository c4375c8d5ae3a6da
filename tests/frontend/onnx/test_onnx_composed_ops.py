"""ONNX ops the importer writes as compositions of IR ops (DepthToSpace, SpaceToDepth, Trilu,
EyeLike, OneHot, Hardmax, GatherND, the inverse and hyperbolic functions, Swish, Shrink, Group/RMS/
MeanVariance/Lp normalisation, AffineGrid, GridSample, ReverseSequence, the signal windows, CumProd,
Col2Im) or with
`scatter_elements` (ScatterElements, ScatterND), and the integer ones (the Bitwise ops, BitShift,
Mod), compiled with no NumPy fallback and checked against ONNX Runtime.
The ONNX node test cases check the same converters through the reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import autorelay

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402
from ort_oracle import assert_matches_ort, make_model, value_info  # noqa: E402

RNG = np.random.default_rng(7)


def _build_and_check(model, feeds, rtol=1e-5, atol=1e-5):
    mod, params = autorelay.frontend.from_onnx(model)
    exe = autorelay.build(mod, params=params)
    assert not exe.report.fallbacks, exe.report
    assert_matches_ort(exe, model, feeds, rtol=rtol, atol=atol)


def _const(name, value):
    tensor = onnx.numpy_helper.from_array(np.asarray(value), name)
    return helper.make_node("Constant", [], [name], value=tensor)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(mode):
    """A pixel shuffle between two convolutions' worth of data, and SpaceToDepth undoing DCR."""
    nodes = [helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode=mode),
             helper.make_node("Relu", ["y"], ["r"]),
             helper.make_node("SpaceToDepth", ["r"], ["z"], blocksize=2)]
    outputs = [value_info("y", None), value_info("z", None)]
    model = make_model(nodes, [value_info("x", (2, 12, 3, 5))], outputs)
    _build_and_check(model, {"x": RNG.standard_normal((2, 12, 3, 5)).astype("float32")})


@pytest.mark.parametrize(("upper", "k"), [(1, 0), (0, -1), (1, 2), (0, 3)])
def test_trilu_masks_every_matrix_of_a_batch(upper, k):
    nodes = [_const("k", np.array(k, "int64")), helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)]
    model = make_model(nodes, [value_info("x", (2, 3, 4, 5))], [value_info("y", None)], opset=14)
    _build_and_check(model, {"x": RNG.standard_normal((2, 3, 4, 5)).astype("float32")})


def test_one_hot_hardmax_and_eye_like():
    nodes = [_const("depth", np.array([5], "int64")), _const("values", np.array([-1.0, 2.0], "float32")),
             helper.make_node("OneHot", ["i", "depth", "values"], ["oh"], axis=1),
             helper.make_node("Hardmax", ["x"], ["hm"], axis=1),
             helper.make_node("EyeLike", ["m"], ["eye"], k=1)]
    model = make_model(nodes, [value_info("i", (3, 2), TensorProto.INT64), value_info("x", (2, 6, 3)),
                               value_info("m", (4, 6))],
                       [value_info(n, None) for n in ("oh", "hm", "eye")])
    x = RNG.standard_normal((2, 6, 3)).astype("float32")
    x[0, 2, 1] = x[0, 4, 1] = 9.0  # a tie: the first maximum wins
    feeds = {"i": np.array([[0, 4], [-1, 2], [-5, 7]], "int64"), "x": x,
             "m": np.zeros((4, 6), "float32")}
    _build_and_check(model, feeds)


@pytest.mark.parametrize("batch_dims", [0, 1])
def test_gather_nd_reads_slices_at_index_tuples(batch_dims):
    data_shape = (3, 4, 5, 2)
    k = 2
    ishape = (3, 6, k) if batch_dims else (6, k)
    bound = data_shape[batch_dims:batch_dims + k]
    ind = np.stack([RNG.integers(-b, b, ishape[:-1]) for b in bound], -1).astype("int64")  # negatives too
    node = helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=batch_dims)
    model = make_model([node], [value_info("x", data_shape), value_info("i", ishape, TensorProto.INT64)],
                       [value_info("y", None)])
    _build_and_check(model, {"x": RNG.standard_normal(data_shape).astype("float32"), "i": ind})


def test_inverse_and_hyperbolic_functions_and_activations():
    ops = ["Acos", "Asin", "Atanh", "Sinh", "Cosh", "Asinh"]
    nodes = [helper.make_node(op, ["x"], [op]) for op in ops]
    nodes += [helper.make_node("Acosh", ["w"], ["Acosh"]),
              helper.make_node("Shrink", ["w"], ["Shrink"], lambd=1.5, bias=0.25)]
    model = make_model(nodes, [value_info("x", (4, 50)), value_info("w", (4, 50))],
                       [value_info(n, None) for n in [*ops, "Acosh", "Shrink"]])
    x = RNG.uniform(-0.999, 0.999, (4, 50)).astype("float32")
    x[0, :3] = [-1.0, 1.0, 0.0]
    _build_and_check(model, {"x": x, "w": RNG.uniform(1.0, 30.0, (4, 50)).astype("float32")}, rtol=2e-5)


def test_normalisations():
    nodes = [_const("s", RNG.standard_normal(6).astype("float32")),
             _const("b", RNG.standard_normal(6).astype("float32")),
             _const("r", RNG.standard_normal((5, 7)).astype("float32")),
             helper.make_node("GroupNormalization", ["x", "s", "b"], ["gn"], num_groups=3, epsilon=1e-3),
             helper.make_node("RMSNormalization", ["x", "r"], ["rms"], axis=-2),
             helper.make_node("MeanVarianceNormalization", ["x"], ["mvn"]),
             helper.make_node("LpNormalization", ["x"], ["lp"], axis=1, p=1),
             helper.make_node("Swish", ["x"], ["sw"], alpha=0.5)]
    outs = ["gn", "rms", "mvn", "lp", "sw"]
    model = make_model(nodes, [value_info("x", (2, 6, 5, 7))], [value_info(n, None) for n in outs], opset=24)
    _build_and_check(model, {"x": RNG.standard_normal((2, 6, 5, 7)).astype("float32")}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_into_a_larger_tensor(reduction):
    """Indices narrower than the data on the other axis, negative ones, and (with a reduction)
    two updates landing on one element."""
    ind = np.array([[0, -1, 2], [3, 1, 0]], "int64")
    if reduction != "none":
        ind[1, 1] = -2  # the second row's first two updates both land on its column 3
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction=reduction)
    model = make_model([node], [value_info("x", (3, 5)), value_info("i", (2, 3), TensorProto.INT64),
                                value_info("u", (2, 3))], [value_info("y", None)], opset=18)
    feeds = {"x": RNG.standard_normal((3, 5)).astype("float32"), "i": ind,
             "u": RNG.standard_normal((2, 3)).astype("float32")}
    _build_and_check(model, feeds)


@pytest.mark.parametrize(("k", "reduction"), [(1, "none"), (2, "none"), (2, "add")])
def test_scatter_nd_writes_slices_at_index_tuples(k, reduction):
    data_shape = (4, 3, 5)
    ind = np.array([[1, 2], [-1, 0], [0, 2]], "int64")[:, :k]
    if reduction == "none" and k == 2:
        ind = np.array([[1, 2], [-1, 0], [0, 1]], "int64")
    upd_shape = ind.shape[:-1] + data_shape[k:]
    node = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction=reduction)
    model = make_model([node], [value_info("x", data_shape), value_info("i", ind.shape, TensorProto.INT64),
                                value_info("u", upd_shape)], [value_info("y", None)], opset=18)
    feeds = {"x": RNG.standard_normal(data_shape).astype("float32"), "i": ind,
             "u": RNG.standard_normal(upd_shape).astype("float32")}
    _build_and_check(model, feeds)


def test_scatter_elements_names_both_shapes_when_they_disagree():
    src = """def @main(%d: Tensor[(3, 5), float32], %i: Tensor[(2, 4), int64], %u: Tensor[(2, 3), float32]) {
  scatter_elements(%d, %i, %u, axis=1)
}"""
    message = r"scatter_elements: indices \(2, 4\) and updates \(2, 3\)"
    with pytest.raises(autorelay.TypeCheckError, match=message):
        autorelay.infer_types(autorelay.parse(src))


@pytest.mark.parametrize(("op", "inputs", "attrs", "message"), [
    ("DepthToSpace", [("x", (1, 3, 4, 4))], {"blocksize": 2}, "3 channels do not divide into blocks of 2x2"),
    ("SpaceToDepth", [("x", (1, 3, 4, 4))], {"blocksize": 3}, "a 4x4 map does not divide into blocks of 3x3"),
    ("GatherND", [("x", (2, 3)), ("i", (4, 3))], {}, r"indices of shape \(4, 3\) \(batch_dims=0\)"),
    ("ScatterND", [("x", (2, 3)), ("i", (4, 1)), ("u", (4, 2))], {},
     r"updates of shape \(4, 2\) do not fit indices \(4, 1\) into data \(2, 3\) \(expected \(4, 3\)\)"),
    ("Trilu", [("x", (5,))], {}, r"rank >= 2, got shape \(5,\)"),
])
def test_bad_shapes_name_the_node_and_the_shapes(op, inputs, attrs, message):
    ins = [value_info(n, s, TensorProto.INT64 if n == "i" else TensorProto.FLOAT) for n, s in inputs]
    model = make_model([helper.make_node(op, [n for n, _ in inputs], ["y"], **attrs)], ins,
                       [value_info("y", None)], opset=18)
    with pytest.raises(autorelay.frontend.onnx.OnnxImportError, match=message):
        autorelay.frontend.from_onnx(model)


@pytest.mark.parametrize("dtype", ["int32", "uint8", "int8", "int64"])
def test_bitwise_ops_and_the_integer_remainders(dtype):
    """BitwiseAnd/Or/Xor/Not and Mod (both signs) on integers, compiled: a weight-only quantized
    export unpacks its 4-bit nibbles with exactly these. Divisors avoid 0 (ONNX Runtime's Mod
    raises there)."""
    onnx_type = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    nodes = [helper.make_node("BitwiseAnd", ["a", "b"], ["and"]),
             helper.make_node("BitwiseOr", ["a", "b"], ["or"]),
             helper.make_node("BitwiseXor", ["a", "b"], ["xor"]),
             helper.make_node("BitwiseNot", ["a"], ["not"]),
             helper.make_node("Mod", ["a", "d"], ["mod"]),
             helper.make_node("Mod", ["a", "d"], ["fmod"], fmod=1)]
    model = make_model(nodes, [value_info(n, (3, 11), onnx_type) for n in "abd"],
                       [value_info(n, None, onnx_type) for n in ("and", "or", "xor", "not", "mod", "fmod")],
                       opset=18)
    info = np.iinfo(dtype)
    a, b = (RNG.integers(info.min, info.max, (3, 11), endpoint=True).astype(dtype) for _ in range(2))
    d = RNG.integers(1, 9, (3, 11)).astype(dtype) * (1 if info.min == 0 else RNG.choice([-1, 1], (3, 11)))
    _build_and_check(model, {"a": a, "b": b, "d": d.astype(dtype)})


def test_bit_shift_in_both_directions():
    nodes = [helper.make_node("BitShift", ["x", "n"], ["left"], direction="LEFT"),
             helper.make_node("BitShift", ["x", "n"], ["right"], direction="RIGHT")]
    u8 = TensorProto.UINT8
    model = make_model(nodes, [value_info("x", (4, 9), u8), value_info("n", (9,), u8)],
                       [value_info(n, None, u8) for n in ("left", "right")])
    x = RNG.integers(0, 256, (4, 9)).astype("uint8")
    _build_and_check(model, {"x": x, "n": np.arange(9, dtype="uint8") % 8})


@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample(mode, padding, align):
    """A spatial transformer's sampling: grid values past [-1, 1] (so every padding mode shows, for
    bicubic on taps inside as well as outside), on a data shape that is not square."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding,
                            align_corners=align)
    model = make_model([node], [value_info("x", (2, 3, 5, 7)), value_info("grid", (2, 4, 6, 2))],
                       [value_info("y", None)], opset=16)
    grid = RNG.uniform(-1.7, 1.7, (2, 4, 6, 2)).astype("float32")
    grid[0, 0, :3] = [[-1, -1], [1, 1], [0.5, -0.25]]  # corners and a tie for nearest
    _build_and_check(model, {"x": RNG.standard_normal((2, 3, 5, 7)).astype("float32"), "grid": grid})


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_grid_sample_opset_20_names_and_volumes(mode):
    """Opset 20's mode names, on images and volumes (5-D data: trilinear, here with reflection
    padding; cubic is defined for images only, so it is refused there)."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode)
    model = make_model([node], [value_info("x", (1, 2, 4, 4)), value_info("grid", (1, 3, 3, 2))],
                       [value_info("y", None)], opset=20)
    _build_and_check(model, {"x": RNG.standard_normal((1, 2, 4, 4)).astype("float32"),
                             "grid": RNG.uniform(-1, 1, (1, 3, 3, 2)).astype("float32")})
    sampler = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode="reflection")
    volume = make_model([sampler],
                        [value_info("x", (2, 2, 3, 5, 4)), value_info("grid", (2, 3, 4, 2, 3))],
                        [value_info("y", None)], opset=20)
    if mode == "cubic":
        with pytest.raises(autorelay.frontend.onnx.OnnxImportError, match="cubic sampling is defined for 4"):
            autorelay.frontend.from_onnx(volume)
        return
    _build_and_check(volume, {"x": RNG.standard_normal((2, 2, 3, 5, 4)).astype("float32"),
                              "grid": RNG.uniform(-1.2, 1.2, (2, 3, 4, 2, 3)).astype("float32")})


@pytest.mark.parametrize("sizes", [(1, 2, 1, 13), (1, 2, 9, 1)])
def test_cubic_resize_to_one_pixel_samples_coordinate_zero(sizes):
    """`pytorch_half_pixel` samples coordinate 0 for an output of one pixel (the spec, ONNX
    Runtime). The import's weight matrices sampled -0.5: the same pixel for nearest and linear,
    but a cubic kernel weighs its four taps differently there."""
    nodes = [_const("sizes", np.array(sizes, "int64")),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="cubic",
                              coordinate_transformation_mode="pytorch_half_pixel")]
    model = make_model(nodes, [value_info("x", (1, 2, 5, 7))], [value_info("y", None)], opset=13)
    _build_and_check(model, {"x": RNG.standard_normal((1, 2, 5, 7)).astype("float32")})


@pytest.mark.parametrize(("time_axis", "batch_axis"), [(0, 1), (1, 0)])
def test_reverse_sequence(time_axis, batch_axis):
    shape = (5, 4, 3) if time_axis == 0 else (4, 5, 3)
    node = helper.make_node("ReverseSequence", ["x", "lens"], ["y"], time_axis=time_axis,
                            batch_axis=batch_axis)
    model = make_model([node], [value_info("x", shape), value_info("lens", (4,), TensorProto.INT64)],
                       [value_info("y", None)])
    _build_and_check(model, {"x": RNG.standard_normal(shape).astype("float32"),
                             "lens": np.array([5, 1, 3, 0], "int64")})


@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid_then_grid_sample(align):
    """A spatial transformer: AffineGrid's grid, sampled by GridSample."""
    size = np.array([2, 3, 5, 6], "int64")
    nodes = [_const("size", size),
             helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align),
             helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=align)]
    model = make_model(nodes, [value_info("theta", (2, 2, 3)), value_info("x", (2, 3, 7, 4))],
                       [value_info("grid", None), value_info("y", None)], opset=20)
    theta = np.array([[[0.9, -0.3, 0.1], [0.2, 1.1, -0.2]], [[1.2, 0.0, 0.3], [0.0, 0.7, 0.0]]], "float32")
    _build_and_check(model, {"theta": theta, "x": RNG.standard_normal((2, 3, 7, 4)).astype("float32")})


@pytest.mark.parametrize("align", [0, 1])
def test_a_volumetric_spatial_transformer(align):
    """3-d: AffineGrid's (N, D, H, W, 3) grid from (N, 3, 4) matrices, sampled trilinearly."""
    nodes = [_const("size", np.array([2, 2, 3, 4, 5], "int64")),
             helper.make_node("AffineGrid", ["theta", "size"], ["grid"], align_corners=align),
             helper.make_node("GridSample", ["x", "grid"], ["y"], align_corners=align)]
    model = make_model(nodes, [value_info("theta", (2, 3, 4)), value_info("x", (2, 2, 4, 5, 3))],
                       [value_info("grid", None), value_info("y", None)], opset=20)
    theta = (np.eye(3, 4)[None] + RNG.uniform(-0.3, 0.3, (2, 3, 4))).astype("float32")
    _build_and_check(model, {"theta": theta, "x": RNG.standard_normal((2, 2, 4, 5, 3)).astype("float32")})


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(op, periodic):
    nodes = [_const("n", np.array(10, "int64")), helper.make_node(op, ["n"], ["y"], periodic=periodic),
             helper.make_node("Mul", ["x", "y"], ["z"])]
    model = make_model(nodes, [value_info("x", (3, 10))], [value_info("z", None)], opset=17)
    _build_and_check(model, {"x": RNG.standard_normal((3, 10)).astype("float32")})


@pytest.mark.parametrize("output_shape", [None, (2, 3, 9, 10)])
def test_max_pool_indices_unpooled(output_shape):
    """MaxPool's indices, as a segmentation decoder unpools with them (windows that tile the input);
    with output_shape, back to an input whose last row the floor-mode pooling left out."""
    shape = output_shape or (2, 3, 8, 10)
    nodes = [helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("MaxUnpool", ["p", "i"] + (["shape"] if output_shape else []), ["y"],
                              kernel_shape=[2, 2], strides=[2, 2])]
    if output_shape:
        nodes.insert(0, _const("shape", np.array(output_shape, "int64")))
    model = make_model(nodes, [value_info("x", shape)], [value_info("y", None)], opset=11)
    _build_and_check(model, {"x": RNG.standard_normal(shape).astype("float32")})


@pytest.mark.parametrize(("sizes", "axes"), [((3, 9), (2, 3)), ((4, 7), (-2, -1)), ((2, 6, 8, 3), None)])
def test_center_crop_pad(sizes, axes):
    """Crops and pads, even and odd differences, named or all axes."""
    attrs = {} if axes is None else {"axes": list(axes)}
    nodes = [_const("s", np.array(sizes, "int64")),
             helper.make_node("CenterCropPad", ["x", "s"], ["y"], **attrs)]
    model = make_model(nodes, [value_info("x", (2, 3, 5, 6))], [value_info("y", None)], opset=18)
    _build_and_check(model, {"x": RNG.standard_normal((2, 3, 5, 6)).astype("float32")})


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize(("dtype", "axis"), [("float32", 1), ("float32", -1), ("int32", 0)])
def test_cum_prod(exclusive, reverse, dtype, axis):
    """Opset 26's CumProd along each kind of axis, a zero inside the scanned rows (the products after
    it are zero, the ones before it are not)."""
    shape = (3, 5, 4)
    x = (RNG.uniform(0.5, 1.5, shape) if dtype == "float32" else RNG.integers(-3, 4, shape)).astype(dtype)
    x[1, 2, 1] = 0
    onnx_type = TensorProto.FLOAT if dtype == "float32" else TensorProto.INT32
    nodes = [_const("axis", np.array(axis, "int64")),
             helper.make_node("CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)]
    model = make_model(nodes, [value_info("x", shape, onnx_type)], [value_info("y", None, onnx_type)],
                       opset=26)
    _build_and_check(model, {"x": x})


@pytest.mark.parametrize(("image", "block", "attrs"), [
    ((5, 5), (2, 2), {}),
    ((6, 7), (3, 2), dict(strides=[2, 1], dilations=[1, 2], pads=[1, 0, 1, 0])),
    ((7, 6), (2, 3), dict(pads=[0, 1, 1, 2])),
    ((4, 5, 6), (2, 2, 3), dict(strides=[1, 2, 1])),  # a volume
])
def test_col2im_sums_overlapping_blocks(image, block, attrs):
    """Opset 18's Col2Im (PyTorch's `fold`): overlapping, strided, dilated and padded blocks."""
    nd = len(image)
    dil, strides = attrs.get("dilations", [1] * nd), attrs.get("strides", [1] * nd)
    pads = attrs.get("pads", [0] * 2 * nd)
    counts = [(image[i] + pads[i] + pads[nd + i] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
              for i in range(nd)]
    x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(counts)))).astype("float32")
    nodes = [_const("image", np.array(image, "int64")), _const("block", np.array(block, "int64")),
             helper.make_node("Col2Im", ["x", "image", "block"], ["y"], **attrs)]
    model = make_model(nodes, [value_info("x", x.shape)], [value_info("y", None)], opset=18)
    _build_and_check(model, {"x": x})
