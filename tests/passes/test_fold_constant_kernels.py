"""The numpy kernels fold_constant_operators_pass evaluates (passes/flatbuffer/constant_kernels.py),
each checked against LiteRT's own kernel: a model of one operator on constant inputs runs in the
interpreter, and the fold must give the same value for every option the kernel reads. Then DETR's
sine position embedding, a chain of such operators, folds whole and its int8 model is fully integer."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_export.passes.flatbuffer.constant_kernels import evaluate

_TYPES = {"float32": "FLOAT32", "int32": "INT32", "bool": "BOOL", "int64": "INT64"}


def _one_operator_model(opcode: str, inputs: list[np.ndarray], out_shape, out_dtype, options=None) -> bytes:
    """A model whose only operator reads constants ``inputs`` and writes the subgraph's output."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model, sg = schema.ModelT(), schema.SubGraphT()
    code = schema.OperatorCodeT()
    code.builtinCode = getattr(schema.BuiltinOperator, opcode)
    code.deprecatedBuiltinCode, code.version = min(code.builtinCode, 127), 1
    model.version, model.operatorCodes, model.buffers, sg.tensors = 3, [code], [schema.BufferT()], []
    for k, value in enumerate([*inputs, None]):
        buffer, tensor = schema.BufferT(), schema.TensorT()
        dtype = np.dtype(out_dtype) if value is None else value.dtype
        if value is not None:
            buffer.data = np.frombuffer(np.ascontiguousarray(value).tobytes(), np.uint8)
        model.buffers.append(buffer)
        tensor.name, tensor.type, tensor.buffer = f"t{k}".encode(), getattr(schema.TensorType, _TYPES[dtype.name]), len(model.buffers) - 1
        tensor.shape = list(out_shape if value is None else value.shape)
        sg.tensors.append(tensor)
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = 0, list(range(len(inputs))), [len(inputs)]
    if options is not None:
        op.builtinOptionsType, op.builtinOptions = getattr(schema.BuiltinOptions, type(options).__name__[:-1]), options
    sg.operators, sg.inputs, sg.outputs, model.subgraphs = [op], [], [len(inputs)], [sg]
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), b"TFL3")
    return bytes(builder.Output())


def _runtime_value(opcode, inputs, out_shape, out_dtype, options=None) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=_one_operator_model(opcode, inputs, out_shape, out_dtype, options))
    interpreter.allocate_tensors()
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def _options(name: str, **fields):
    from ai_edge_litert import schema_py_generated as schema

    options = getattr(schema, f"{name}OptionsT")()
    for key, value in fields.items():
        setattr(options, key, value)
    return options


def _assert_folds_like_the_runtime(opcode, inputs, out_shape, out_dtype="float32", options=None, exact=True):
    want = _runtime_value(opcode, inputs, out_shape, out_dtype, options)
    got = evaluate(opcode, inputs, options, list(out_shape), np.dtype(out_dtype))
    assert got is not None and got.shape == tuple(out_shape) and got.dtype == want.dtype
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


_X = np.arange(-11, 13, dtype=np.float32).reshape(2, 3, 4) * 0.75


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [1, 2])
def test_cumsum(exclusive, reverse, axis):
    options = _options("Cumsum", exclusive=exclusive, reverse=reverse)
    _assert_folds_like_the_runtime("CUMSUM", [_X, np.array(axis, np.int32)], _X.shape, options=options)
    _assert_folds_like_the_runtime("CUMSUM", [_X.astype(np.int32), np.array(axis, np.int32)], _X.shape, "int32", options)


@pytest.mark.parametrize("begin, size, shape", [([0, 1, 1], [2, -1, 2], (2, 2, 2)), ([1, 0, 3], [1, 3, 1], (1, 3, 1))])
def test_slice(begin, size, shape):
    _assert_folds_like_the_runtime("SLICE", [_X, np.int32(begin), np.int32(size)], shape)


@pytest.mark.parametrize(
    "begin, end, strides, masks, shape",
    [
        ([0, 0, 0], [2, 3, 4], [1, 1, 2], {}, (2, 3, 2)),  # DETR's pos[..., 0::2]
        ([0, 0, 1], [2, 3, 4], [1, 1, 2], {}, (2, 3, 2)),  # and pos[..., 1::2]
        ([1, -2, -3], [0, 0, -1], [1, 1, 1], {"beginMask": 1, "endMask": 3}, (2, 2, 2)),
        ([0, 2, 3], [0, 0, 0], [1, -1, -2], {"beginMask": 1, "endMask": 7}, (2, 3, 2)),
        ([0, 1, 0], [2, 2, 4], [1, 1, 1], {"shrinkAxisMask": 2}, (2, 4)),
        ([0, 0, 0], [2, 3, 9], [1, 2, 3], {}, (2, 2, 2)),  # an end past the edge is clamped
    ],
)
def test_strided_slice(begin, end, strides, masks, shape):
    options = _options("StridedSlice", **masks)
    _assert_folds_like_the_runtime("STRIDED_SLICE", [_X, np.int32(begin), np.int32(end), np.int32(strides)], shape, options=options)


def test_a_strided_slice_with_an_ellipsis_or_a_new_axis_is_left_to_the_runtime():
    values = [_X, np.int32([0, 0]), np.int32([2, 3]), np.int32([1, 1])]
    for masks in ({"ellipsisMask": 1}, {"newAxisMask": 1}, {"offset": True}):
        assert evaluate("STRIDED_SLICE", values, _options("StridedSlice", **masks), [2, 3, 4], np.dtype("float32")) is None


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_concatenation(axis):
    other = -_X
    shape = list(_X.shape)
    shape[axis] *= 2
    _assert_folds_like_the_runtime("CONCATENATION", [_X, other], shape, options=_options("Concatenation", axis=axis))


def test_a_concatenation_with_a_fused_activation_is_left_to_the_runtime():
    options = _options("Concatenation", axis=0, fusedActivationFunction=1)
    assert evaluate("CONCATENATION", [_X, _X], options, [4, 3, 4], np.dtype("float32")) is None


@pytest.mark.parametrize("align_corners, half_pixel", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("size_in, size_out", [((5, 7), (3, 10)), ((4, 4), (9, 2)), ((3, 1), (1, 5)), ((320, 320), (10, 10))])
def test_resize_nearest_neighbor(align_corners, half_pixel, size_in, size_out):
    x = np.random.default_rng(0).standard_normal((1, *size_in, 2)).astype(np.float32)
    options = _options("ResizeNearestNeighbor", alignCorners=align_corners, halfPixelCenters=half_pixel)
    _assert_folds_like_the_runtime("RESIZE_NEAREST_NEIGHBOR", [x, np.int32(size_out)], (1, *size_out, 2), options=options)


@pytest.mark.parametrize(
    "source, target",
    [(_X, "bool"), (_X > 0, "float32"), (_X, "int32"), (_X.astype(np.int32), "float32"), (_X > 1, "int32")],
)
def test_cast(source, target):
    options = _options("Cast")
    _assert_folds_like_the_runtime("CAST", [np.asarray(source)], source.shape, target, options)


def test_a_cast_of_a_float_an_integer_cannot_hold_is_left_to_the_runtime():
    for value in (np.float32([1.0, np.inf]), np.float32([1.0, np.nan]), np.float32([3e9])):
        assert evaluate("CAST", [value], None, list(value.shape), np.dtype("int32")) is None


@pytest.mark.parametrize("indices, shape", [([[0, 1], [1, 2]], (2, 4)), ([[1], [0], [1]], (3, 3, 4)), ([[[1, 2, 3]], [[0, 0, 0]]], (2, 1))])
def test_gather_nd(indices, shape):
    _assert_folds_like_the_runtime("GATHER_ND", [_X, np.int32(indices)], shape)


def test_a_gather_nd_out_of_range_is_left_to_the_runtime():
    assert evaluate("GATHER_ND", [_X, np.int32([[2, 0]])], None, [1, 4], np.dtype("float32")) is None
    assert evaluate("GATHER_ND", [_X, np.int32([[-1, 0]])], None, [1, 4], np.dtype("float32")) is None


@pytest.mark.parametrize("opcode", ["LOGICAL_AND", "LOGICAL_OR"])
def test_logical_operators_broadcast(opcode):
    a, b = (_X > 0).reshape(2, 3, 4)[:, :, :1], (_X < 3)[:1]
    _assert_folds_like_the_runtime(opcode, [a, b], (2, 3, 4), "bool")
    _assert_folds_like_the_runtime("LOGICAL_NOT", [_X > 0], _X.shape, "bool")


@pytest.mark.parametrize("opcode", ["SIN", "COS"])
def test_sine_and_cosine(opcode):
    x = np.concatenate([_X.ravel(), np.float32([1e3, -7.5e3, 1e-7, 0.0])])
    _assert_folds_like_the_runtime(opcode, [x], x.shape, exact=False)


class SinePositionEmbedding(torch.nn.Module):
    """DETR's (transformers' DetrSinePositionEmbedding with DetrModel's default pixel mask): a mask of
    ones resized to the feature map, cumulative sums normalised, divided by temperature powers, sin
    and cos interleaved, added to the features."""

    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.dim = dim
        self.conv = torch.nn.Conv2d(3, 2 * dim, 4, stride=4)

    def forward(self, x):
        features = self.conv(x)
        mask = torch.nn.functional.interpolate(torch.ones_like(x[:, :1]), size=features.shape[-2:]).to(torch.bool)[:, 0]
        y_embed, x_embed = mask.cumsum(1, dtype=torch.float32), mask.cumsum(2, dtype=torch.float32)
        y_embed = (y_embed - 0.5) / (y_embed[:, -1:, :] + 1e-6) * 2 * torch.pi
        x_embed = (x_embed - 0.5) / (x_embed[:, :, -1:] + 1e-6) * 2 * torch.pi
        dim_t = torch.arange(self.dim, dtype=torch.float32)
        dim_t = 10000 ** (2 * torch.div(dim_t, 2, rounding_mode="floor") / self.dim)
        pos_x, pos_y = x_embed[:, :, :, None] / dim_t, y_embed[:, :, :, None] / dim_t
        pos_x = torch.stack((pos_x[:, :, :, 0::2].sin(), pos_x[:, :, :, 1::2].cos()), dim=4).flatten(3)
        pos_y = torch.stack((pos_y[:, :, :, 0::2].sin(), pos_y[:, :, :, 1::2].cos()), dim=4).flatten(3)
        return features + torch.cat((pos_y, pos_x), dim=3).permute(0, 3, 1, 2)


_CHAIN = {"RESIZE_NEAREST_NEIGHBOR", "CAST", "CUMSUM", "SLICE", "STRIDED_SLICE", "SIN", "COS", "CONCATENATION", "POW", "FLOOR_DIV", "DIV"}


@pytest.fixture(scope="module")
def sine_embedding():
    from edge_export.conversion.litert import convert_module

    torch.manual_seed(0)
    module = SinePositionEmbedding().eval()
    return module, convert_module(module, (torch.rand(1, 3, 32, 32),))


def test_the_sine_position_embedding_folds_whole_and_computes_the_same(sine_embedding):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.passes.flatbuffer import fold_constant_operators_pass, run_flatbuffer_passes
    from edge_export.runtime.interpreter import TFLiteRunner

    module, fp32 = sine_embedding
    before = read_flatbuffer(fp32)
    assert {"CUMSUM", "SIN", "COS", "CAST", "RESIZE_NEAREST_NEIGHBOR"} <= set(before.op_counts)
    after = run_flatbuffer_passes(fp32, [fold_constant_operators_pass]).model
    assert not _CHAIN & set(after.op_counts), after.op_counts
    x = np.random.default_rng(1).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(TFLiteRunner(after).run([x])[0], TFLiteRunner(before).run([x])[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(TFLiteRunner(after).run([x])[0], module(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_the_sine_position_embedding_quantizes_fully_integer(sine_embedding):
    """Before: CAST, CUMSUM, SIN and COS have no int8 recipe and stayed float (DETR's flatbuffer int8)."""
    from edge_export.config import InputSpec, QuantizeMode
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization import check_integer, synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer
    from edge_export.runtime.interpreter import TFLiteRunner

    module, fp32 = sine_embedding
    calibration = synthetic_calibration([InputSpec(shape=(1, 3, 32, 32), name="x")], 8, seed=1)
    model = read_flatbuffer(quantize_flatbuffer(fp32, QuantizeMode.INT8, calibration))
    assert check_integer(model).fully_integer, model.op_counts
    x = np.random.default_rng(2).uniform(0, 1, (1, 3, 32, 32)).astype(np.float32)
    want = module(torch.from_numpy(x)).detach().numpy()
    got = TFLiteRunner(model).run([x])[0]
    assert 10 * np.log10((want**2).sum() / ((got - want) ** 2).sum()) >= 25.0


_W = np.random.default_rng(3).standard_normal((5, 4)).astype(np.float32)


@pytest.mark.parametrize("activation", [0, 1, 3])
@pytest.mark.parametrize("keep_num_dims", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_fully_connected(activation, keep_num_dims, with_bias):
    bias = [np.float32([0.5, -1.0, 2.0, 0.0, 7.0])] if with_bias else []
    options = _options("FullyConnected", fusedActivationFunction=activation, keepNumDims=keep_num_dims)
    shape = (2, 3, 5) if keep_num_dims else (6, 5)
    _assert_folds_like_the_runtime("FULLY_CONNECTED", [_X, _W, *bias], shape, options=options, exact=False)


@pytest.mark.parametrize("adj_x, adj_y", [(False, False), (True, False), (False, True), (True, True)])
def test_batch_matmul(adj_x, adj_y):
    rng = np.random.default_rng(4)
    a = rng.standard_normal((2, 4, 3) if adj_x else (2, 3, 4)).astype(np.float32)
    b = rng.standard_normal((1, 5, 4) if adj_y else (1, 4, 5)).astype(np.float32)  # broadcast over the batch
    _assert_folds_like_the_runtime("BATCH_MATMUL", [a, b], (2, 3, 5), options=_options("BatchMatMul", adjX=adj_x, adjY=adj_y), exact=False)


@pytest.mark.parametrize("beta", [1.0, 0.25])
def test_softmax(beta):
    _assert_folds_like_the_runtime("SOFTMAX", [_X], _X.shape, options=_options("Softmax", beta=beta), exact=False)


@pytest.mark.parametrize("axes, keep, shape", [([2], True, (2, 3, 1)), ([-1], False, (2, 3)), ([0, 2], False, (3,)), ([1, 0], True, (1, 1, 4))])
def test_mean(axes, keep, shape):
    _assert_folds_like_the_runtime("MEAN", [_X, np.int32(axes)], shape, options=_options("Reducer", keepDims=keep), exact=False)


def test_squared_difference():
    _assert_folds_like_the_runtime("SQUARED_DIFFERENCE", [_X, _X[:1, :1]], _X.shape, exact=False)


def test_a_fully_connected_with_an_activation_the_fold_does_not_know_is_left_to_the_runtime():
    options = _options("FullyConnected", fusedActivationFunction=4)  # TANH
    assert evaluate("FULLY_CONNECTED", [_X, _W, None], options, [6, 5], np.dtype("float32")) is None


def test_a_resize_to_or_from_an_empty_size_is_left_to_the_runtime():
    x = np.zeros((1, 0, 3, 1), np.float32)
    assert evaluate("RESIZE_NEAREST_NEIGHBOR", [x, np.int32([2, 2])], None, [1, 2, 2, 1], np.dtype("float32")) is None
    assert evaluate("RESIZE_NEAREST_NEIGHBOR", [_X.reshape(1, 2, 3, 4), np.int32([0, 2])], None, [1, 0, 2, 4], np.dtype("float32")) is None
