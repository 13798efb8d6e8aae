"""The verifier in read_flatbuffer, case by case. Several cases are the reduced form of mutated files
that crashed the native interpreter (XNNPACK) in the fuzz test before the verifier rejected them."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from edge_export.errors import FlatbufferError
from edge_export.flatbuffer import read_flatbuffer
from tools_models import cnn_models  # noqa: F401  (a pytest fixture)


def edit(model_bytes: bytes, change) -> bytes:
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    change(model, model.subgraphs[0])
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def first_tensor(sg, predicate):
    return next(t for t in sg.tensors if predicate(t))


def activation(sg):
    """A per-tensor quantized int8 tensor inside the graph (not a model input or output)."""
    io = set(sg.inputs) | set(sg.outputs)
    for i, t in enumerate(sg.tensors):
        q = t.quantization
        if i not in io and t.type == 9 and q is not None and q.scale is not None and len(q.scale) == 1:
            return t
    raise AssertionError("no int8 activation")


def test_original_files_verify(cnn_models):
    for data in (cnn_models.fp32, cnn_models.int8, cnn_models.uint8_io):
        model = read_flatbuffer(data)
        assert model.operators and model.signatures[0]["input_tensors"] == list(model.inputs)


def test_every_truncation_is_rejected(cnn_models):
    data = cnn_models.int8
    for length in range(0, len(data), 7):
        with pytest.raises(FlatbufferError):
            read_flatbuffer(data[:length])


def test_error_names_the_origin(cnn_models):
    with pytest.raises(FlatbufferError, match=r"^model\.tflite is not a valid LiteRT flatbuffer"):
        read_flatbuffer(cnn_models.int8[:100], origin="model.tflite")


def set_zero_point(value):
    def change(model, sg):
        activation(sg).quantization.zeroPoint = np.array([value], dtype=np.int64)

    return change


def set_scale(value):
    def change(model, sg):
        activation(sg).quantization.scale = np.array([value], dtype=np.float32)

    return change


def set_input_shape(shape, signature=None):
    def change(model, sg):
        t = sg.tensors[sg.inputs[0]]
        t.shape = np.array(shape, dtype=np.int32)
        t.shapeSignature = np.array(signature or shape, dtype=np.int32)

    return change


def set_pool_option(name, value):
    def change(model, sg):
        for op in sg.operators:
            if op.builtinOptions is not None and hasattr(op.builtinOptions, name):
                setattr(op.builtinOptions, name, value)
                return
        raise AssertionError(f"no operator has {name}")

    return change


def bad_opcode_index(model, sg):
    sg.operators[0].opcodeIndex = len(model.operatorCodes) + 3


def bad_buffer_index(model, sg):
    sg.tensors[0].buffer = len(model.buffers) + 10


def bad_operator_tensor(model, sg):
    sg.operators[1].inputs = np.array([len(sg.tensors) + 5], dtype=np.int32)


def signature_points_at_an_inner_tensor(model, sg):
    model.signatureDefs[0].inputs[0].tensorIndex = sg.operators[1].outputs[0]


def weight_bigger_than_its_buffer(model, sg):
    w = first_tensor(sg, lambda t: t.buffer > 0 and len(t.shape) == 4)
    # Double a non-channel dimension, so that only the size is wrong (per-channel params still fit).
    w.shape = np.array([w.shape[0], w.shape[1] * 2, *w.shape[2:]], dtype=np.int32)


def invalid_utf8_name(model, sg):
    sg.tensors[3].name = b"conv\xe9\xff"


@pytest.mark.parametrize(
    "change, message",
    [
        (set_zero_point(300), "zero point outside the range of int8"),  # crashed XNNPACK
        (set_zero_point(-2147483776), "zero point"),
        (set_scale(3.5e-43), "subnormal"),  # crashed XNNPACK
        (set_scale(-0.5), "negative"),
        (set_scale(0.0), "zero"),  # crashed XNNPACK
        (set_scale(float("inf")), "non-finite"),
        (set_input_shape([1, 3, -16, 16]), "negative dimension"),
        (set_input_shape([1, 3, 16, 268435472]), "2 GB"),  # hung XNNPACK for a minute
        (set_input_shape([1, 3, 16, 16], [1, -2, 16, 16]), "shape signature"),
        (set_pool_option("padding", 116), "padding"),  # crashed XNNPACK
        (set_pool_option("strideW", 0), "strideW"),
        (bad_opcode_index, "operator code index"),
        (bad_buffer_index, "buffer"),
        (bad_operator_tensor, "refers to tensor"),
        (signature_points_at_an_inner_tensor, "not an input"),
        (weight_bigger_than_its_buffer, "bytes of constant data"),
        (invalid_utf8_name, "UTF-8"),  # made the interpreter's Python binding raise
    ],
)
def test_semantic_checks(cnn_models, change, message):
    with pytest.raises(FlatbufferError, match=message):
        read_flatbuffer(edit(cnn_models.int8, change))


def test_dynamic_dimension_in_shape_signature_is_allowed(cnn_models):
    model = read_flatbuffer(edit(cnn_models.int8, set_input_shape([1, 3, 16, 16], [-1, 3, 16, 16])))
    assert model.input_tensors[0].has_dynamic_dims


def root_table(data: bytes) -> int:
    return struct.unpack_from("<I", data, 0)[0]


@pytest.mark.parametrize(
    "patch, message",
    [
        # The root table's vtable offset points before the start of the file.
        (lambda d, root: struct.pack_into("<i", d, root, root + 4096), "vtable"),
        # The vtable claims the table is larger than the file.
        (lambda d, root: struct.pack_into("<H", d, root - struct.unpack_from("<i", d, root)[0] + 2, 0xFFFF), "outside"),
        # The root offset is misaligned.
        (lambda d, root: struct.pack_into("<I", d, 0, root + 1), "misaligned"),
    ],
)
def test_structural_checks(cnn_models, patch, message):
    data = bytearray(cnn_models.fp32)
    patch(data, root_table(data))
    with pytest.raises(FlatbufferError, match=message):
        read_flatbuffer(bytes(data))


def test_vector_length_past_the_end_is_rejected(cnn_models):
    """Rewrite the length of the model's subgraphs vector so that it runs off the end of the file."""
    data = bytearray(cnn_models.fp32)
    root = root_table(data)
    vtable = root - struct.unpack_from("<i", data, root)[0]
    field = root + struct.unpack_from("<H", data, vtable + 8)[0]  # Model.subgraphs is field 2
    vector = field + struct.unpack_from("<I", data, field)[0]
    struct.pack_into("<I", data, vector, 0x0FFFFFFF)
    with pytest.raises(FlatbufferError, match="outside the file"):
        read_flatbuffer(bytes(data))


# ---- inputs a kernel requires (issue 13: these passed the verifier and then segfaulted LiteRT) ----


def omit_input(opcode: str, position: int):
    """Replace one input of the first ``opcode`` operator with -1, the flatbuffer's "omitted"."""

    def change(model, sg):
        from ai_edge_litert import schema_py_generated as schema

        code = getattr(schema.BuiltinOperator, opcode)
        for op in sg.operators:
            oc = model.operatorCodes[op.opcodeIndex]
            if max(oc.builtinCode, oc.deprecatedBuiltinCode) == code:
                inputs = list(op.inputs)
                inputs[position] = -1
                op.inputs = np.array(inputs, dtype=np.int32)
                return
        raise AssertionError(f"no {opcode} operator")

    return change


def truncate_inputs(opcode: str, keep: int):
    def change(model, sg):
        from ai_edge_litert import schema_py_generated as schema

        code = getattr(schema.BuiltinOperator, opcode)
        op = next(op for op in sg.operators if max(model.operatorCodes[op.opcodeIndex].builtinCode, model.operatorCodes[op.opcodeIndex].deprecatedBuiltinCode) == code)
        op.inputs = np.array(list(op.inputs)[:keep], dtype=np.int32)

    return change


def weight_buffer_longer_than_its_shape(model, sg):
    w = first_tensor(sg, lambda t: t.buffer > 0 and len(t.shape) == 4)
    buf = model.buffers[w.buffer]
    buf.data = np.concatenate([np.asarray(buf.data), np.zeros(64, dtype=np.uint8)])


def write_over_an_earlier_output(model, sg):
    """The last operator writes the tensor the first CONV_2D wrote (found by benchmarks/flatbuffer_fuzz.py)."""
    sg.operators[-1].outputs = np.array([sg.operators[1].outputs[0]], dtype=np.int32)


def run_an_operator_before_its_input(model, sg):
    """The first CONV_2D and the MAX_POOL_2D after it swapped: the pool reads the conv's output first."""
    sg.operators[1], sg.operators[2] = sg.operators[2], sg.operators[1]


def transpose_becomes_split(model, sg):
    """TRANSPOSE's opcode turned into SPLIT, whose first input (the axis) is then the float image."""
    from ai_edge_litert import schema_py_generated as schema

    for code in model.operatorCodes:
        if max(code.builtinCode, code.deprecatedBuiltinCode) == schema.BuiltinOperator.TRANSPOSE:
            code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.SPLIT


def conv_becomes_split(model, sg):
    """CONV_2D's opcode turned into SPLIT, which then reads Conv2DOptions as SplitOptions."""
    from ai_edge_litert import schema_py_generated as schema

    for code in model.operatorCodes:
        if max(code.builtinCode, code.deprecatedBuiltinCode) == schema.BuiltinOperator.CONV_2D:
            code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.SPLIT


@pytest.mark.parametrize(
    "change, message",
    [
        (write_over_an_earlier_output, r"writes tensor \d+, which operator 1 already writes"),  # segfaulted XNNPACK
        (run_an_operator_before_its_input, r"reads tensor \d+ before operator 2 writes it"),
        (transpose_becomes_split, r"\(SPLIT\) takes a float32 tensor as its input 0"),  # segfaulted XNNPACK
        (conv_becomes_split, r"\(SPLIT\) carries Conv2DOptions; its kernel reads SplitOptions"),  # segfaulted
        (omit_input("TRANSPOSE", 1), r"\(TRANSPOSE\) omits its input 1"),  # segfaulted validate and bench
        (omit_input("CONV_2D", 1), r"\(CONV_2D\) omits its input 1"),
        (omit_input("CONV_2D", 0), r"\(CONV_2D\) omits its input 0"),
        (omit_input("RESHAPE", 1), r"\(RESHAPE\) omits its input 1"),  # segfaulted bench
        (omit_input("FULLY_CONNECTED", 1), r"\(FULLY_CONNECTED\) omits its input 1"),
        (truncate_inputs("TRANSPOSE", 1), r"\(TRANSPOSE\) has 1 inputs; the kernel needs at least 2"),
        (weight_buffer_longer_than_its_shape, "constant buffer holds"),
    ],
)
def test_required_operator_inputs_and_exact_buffers(cnn_models, change, message):
    with pytest.raises(FlatbufferError, match=message):
        read_flatbuffer(edit(cnn_models.fp32, change))


def test_omitted_optional_bias_is_accepted(cnn_models):
    """A bias is the one input CONV_2D and FULLY_CONNECTED may omit: such files are legitimate."""
    model = read_flatbuffer(edit(cnn_models.fp32, omit_input("CONV_2D", 2)))
    assert next(op for op in model.operators if op.opcode == "CONV_2D").inputs[2] == -1


def short_weight_buffer(model, sg):
    w = first_tensor(sg, lambda t: t.buffer > 0 and len(t.shape) == 4)
    model.buffers[w.buffer].data = np.asarray(model.buffers[w.buffer].data)[:-4]


@pytest.mark.parametrize(
    "change",
    [omit_input("TRANSPOSE", 1), omit_input("CONV_2D", 1), bad_operator_tensor, short_weight_buffer],
    ids=["transpose-without-perm", "conv-without-filter", "tensor-index-out-of-range", "short-buffer"],
)
def test_bench_refuses_crashing_mutants_with_one_paragraph(cnn_models, tmp_path, change):
    """In a child process: before the verifier knew these, the runtime died by SIGSEGV."""
    from cli_harness import run_cli_subprocess

    path = tmp_path / "mutant.tflite"
    path.write_bytes(edit(cnn_models.fp32, change))
    result = run_cli_subprocess("bench", path, "--runs", "1", "--warmup", "0")
    assert result.exit_code == 2, (result.exit_code, result.stderr[-2000:])
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "is not a valid LiteRT flatbuffer" in errors[0], result.stderr
