"""The int8 file against its payload: the writer stores each equal vector and table once, and
``--strip-names`` drops what no runtime reads. Both leave the model computing bit-identically in
LiteRT and TFLite Micro, the verifier accepting it and every buffer 16-byte aligned; the byte
accounting adds up to the file and the schema's floor stays below every file."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from edge_export.flatbuffer import read_flatbuffer
from edge_export.flatbuffer import PAYLOAD_CATEGORIES, byte_accounting, payload_bytes, schema_floor
from edge_export.flatbuffer import misaligned_buffers, pack_model, read_model
from edge_export.passes.flatbuffer import (
    run_flatbuffer_passes,
    share_quantization_vectors_pass,
    strip_tensor_names_pass,
    strip_unread_fields_pass,
)
from edge_export.passes.flatbuffer.strip_unread_fields_pass import CONVERTER_METADATA
from edge_export.runtime.interpreter import TFLiteRunner
from testing_models import mobilenet_v2_like, small_cnn, transformer_encoder_like

MODELS = {
    "small_cnn": (small_cnn, (1, 3, 16, 16)),
    "mobilenet_v2_like": (lambda: mobilenet_v2_like(width=8).eval(), (1, 3, 16, 16)),
    "transformer": (lambda: transformer_encoder_like().eval(), (1, 16, 32)),
}
STRIPPING = [strip_tensor_names_pass, strip_unread_fields_pass]


@dataclass(frozen=True)
class Int8Files:
    named: bytes  # what an int8 export without --strip-names writes
    stripped: bytes  # the same with --strip-names (names and unread fields dropped)
    shape: tuple


@pytest.fixture(scope="module")
def int8_files() -> dict[str, Int8Files]:
    from edge_export.config import InputSpec, QuantizeMode
    from edge_export.conversion.litert import convert_module
    from edge_export.quantization import synthetic_calibration
    from edge_export.quantization.flatbuffer_recipes import quantize_flatbuffer

    built = {}
    for name, (make, shape) in MODELS.items():
        torch.manual_seed(0)
        module = make()
        fp32 = convert_module(module, (torch.randn(shape, generator=torch.Generator().manual_seed(0)),))
        calibration = synthetic_calibration([InputSpec(shape=shape, name="x")], 4, seed=1)
        named = run_flatbuffer_passes(quantize_flatbuffer(fp32, QuantizeMode.INT8, calibration), [share_quantization_vectors_pass]).model_bytes
        built[name] = Int8Files(named, run_flatbuffer_passes(named, STRIPPING).model_bytes, shape)
    return built


def _inputs(shape: tuple, n: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(n)]


def _stock_packing(data: bytes) -> bytes:
    """The generated packer's bytes for the same model: every vector, string and table written
    once per reference (and no alignment)."""
    from ai_edge_litert.tools import flatbuffer_utils

    return bytes(flatbuffer_utils.convert_object_to_bytearray(read_model(data)))


@pytest.mark.parametrize("name", list(MODELS))
def test_stripped_int8_file_computes_bit_identically_in_litert(int8_files, name):
    files = int8_files[name]
    named, stripped = TFLiteRunner(files.named), TFLiteRunner(files.stripped)
    for x in _inputs(files.shape):
        for a, b in zip(named.run([x]), stripped.run([x])):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", ["small_cnn", "mobilenet_v2_like"])
def test_stripped_int8_file_loads_and_computes_bit_identically_in_tflite_micro(int8_files, name):
    from edge_export.targets.micro.runner import MicroRunner

    files = int8_files[name]
    named, stripped = MicroRunner(files.named), MicroRunner(files.stripped)
    for x in _inputs(files.shape):
        np.testing.assert_array_equal(stripped.run([x])[0], named.run([x])[0])


@pytest.mark.parametrize("name", list(MODELS))
def test_stripped_file_is_verified_aligned_and_holds_the_same_model(int8_files, name):
    files = int8_files[name]
    before, after = read_flatbuffer(files.named), read_flatbuffer(files.stripped)  # both verified
    assert misaligned_buffers(files.stripped) == []
    assert [(t.shape, t.dtype, t.quant) for t in after.tensors] == [(t.shape, t.dtype, t.quant) for t in before.tensors]
    assert after.op_counts == before.op_counts
    assert [t.name for t in after.input_tensors + after.output_tensors] == [t.name for t in before.input_tensors + before.output_tensors]
    for t in after.tensors:
        if t.is_constant:
            np.testing.assert_array_equal(after.constant(t.index), before.constant(t.index))
    assert after.min_runtime_version == before.min_runtime_version  # inspect and the report read it


@pytest.mark.parametrize("name", list(MODELS))
def test_stripping_drops_the_converters_entries_and_shrinks_the_structure(int8_files, name):
    files = int8_files[name]
    model = read_model(files.stripped)
    assert model.description is None
    assert not any(bytes(md.name) in CONVERTER_METADATA for md in model.metadata or ())
    named, stripped = byte_accounting(files.named), byte_accounting(files.stripped)
    assert named["description"] > 0 and "description" not in stripped
    assert stripped["metadata"] < named["metadata"]
    # Structure went, and repeated constants (the MobileNetV2-like model has some): each distinct
    # constant is stored once.
    assert all(stripped.get(k, 0) <= named[k] for k in PAYLOAD_CATEGORIES if k in named)
    model = read_model(files.named)
    weights_and_biases = {
        bytes(model.buffers[t.buffer].data) for t in model.subgraphs[0].tensors
        if t.buffer and model.buffers[t.buffer].data is not None and (t.type == 9 or (t.type == 2 and t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale)))
    }
    assert stripped["int8 weights"] + stripped.get("int32 biases", 0) == sum(len(d) for d in weights_and_biases)
    assert len(files.stripped) < len(files.named)


@pytest.mark.parametrize("name", list(MODELS))
def test_writer_stores_each_equal_vector_string_and_table_once(int8_files, name):
    """Against the generated packer (each written once per reference), the shared categories shrink
    and the file is smaller although every buffer is padded to 16 bytes."""
    files = int8_files[name]
    ours, stock = byte_accounting(files.stripped), byte_accounting(_stock_packing(files.stripped))
    assert ours["tensor names"] < stock["tensor names"]  # one empty string for every inner tensor
    assert ours["shapes"] + ours["operator inputs/outputs"] < stock["shapes"] + stock["operator inputs/outputs"]
    assert ours["quantization tables"] < stock["quantization tables"]
    assert ours.get("operator options", 0) <= stock.get("operator options", 0)
    assert len(files.stripped) < len(_stock_packing(files.stripped))
    # Read back, every tensor still has its own shape, name and quantization values.
    a, b = read_flatbuffer(files.stripped), read_flatbuffer(_stock_packing(files.stripped))
    assert [(t.name, t.shape, t.quant) for t in a.tensors] == [(t.name, t.shape, t.quant) for t in b.tensors]


def test_equal_shapes_and_quantization_tables_are_one_object_in_the_file(int8_files):
    from ai_edge_litert import schema_py_generated as schema

    data = int8_files["transformer"].stripped
    sg = schema.Model.GetRootAs(data, 0).Subgraphs(0)
    shapes: dict[bytes, set[int]] = {}
    tables: dict[tuple, set[int]] = {}
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        if t.ShapeLength():
            shapes.setdefault(t.ShapeAsNumpy().tobytes(), set()).add(t._tab.Vector(t._tab.Offset(4)))  # Tensor.shape: slot 4
        q = t.Quantization()
        if q is not None and q.ScaleLength():
            tables.setdefault((q.ScaleAsNumpy().tobytes(), q.ZeroPointAsNumpy().tobytes(), q.QuantizedDimension()), set()).add(q._tab.Pos)
    uses = Counter(sg.Tensors(i).ShapeAsNumpy().tobytes() for i in range(sg.TensorsLength()) if sg.Tensors(i).ShapeLength())
    assert max(uses.values()) > 1  # shapes repeat in a transformer...
    assert all(len(positions) == 1 for positions in shapes.values())  # ...and each is stored once
    assert all(len(positions) == 1 for positions in tables.values())
    assert len(tables) < sum(1 for i in range(sg.TensorsLength()) if sg.Tensors(i).Quantization() is not None)


def test_without_strip_names_names_and_converter_entries_stay(int8_files):
    model = read_model(int8_files["small_cnn"].named)
    assert all(t.name for t in model.subgraphs[0].tensors)
    assert model.description
    assert any(bytes(md.name) == b"min_runtime_version" for md in model.metadata)


def _bloated(data: bytes) -> bytes:
    """The same model with everything the pass drops added back: shape signatures equal to the
    shapes, min/max beside the scales, an empty buffer of its own for every activation, converter
    metadata with a buffer, and a description."""
    from ai_edge_litert import schema_py_generated as schema

    model = read_model(data)
    for tensor in model.subgraphs[0].tensors:
        tensor.shapeSignature = np.array(tensor.shape, dtype=np.int32)
        q = tensor.quantization
        if q is not None and q.scale is not None and len(q.scale):
            q.min, q.max = np.full(len(q.scale), -1.0, np.float32), np.full(len(q.scale), 1.0, np.float32)
        if tensor.buffer == 0:
            model.buffers.append(schema.BufferT())
            tensor.buffer = len(model.buffers) - 1
    entry = schema.MetadataT()
    entry.name, entry.buffer = b"CONVERSION_METADATA", len(model.buffers)
    extra = schema.BufferT()
    extra.data = np.frombuffer(b"\x10\x00\x00\x00converter options", dtype=np.uint8)
    model.buffers.append(extra)
    model.metadata = [*model.metadata, entry]
    model.description = b"MLIR Converted."
    return pack_model(model)


@pytest.mark.parametrize("name", ["small_cnn", "transformer"])
def test_pass_drops_exactly_what_the_runtimes_do_not_read(int8_files, name):
    files = int8_files[name]
    bloated = _bloated(files.stripped)
    assert len(bloated) > len(files.stripped)
    model = read_model(bloated)
    assert strip_unread_fields_pass(model) is True
    assert strip_unread_fields_pass(model) is False  # nothing left to drop
    # Byte for byte the file the pass made from the un-bloated model.
    assert pack_model(model) == files.stripped
    runner = TFLiteRunner(bloated)
    stripped = TFLiteRunner(files.stripped)
    for x in _inputs(files.shape, 2):
        for a, b in zip(runner.run([x]), stripped.run([x])):
            np.testing.assert_array_equal(a, b)


def test_pass_keeps_a_dynamic_shape_signature():
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT()
    model.buffers = [schema.BufferT()]
    tensor = schema.TensorT()
    tensor.shape, tensor.shapeSignature = np.array([1, 4], np.int32), np.array([-1, 4], np.int32)
    sg = schema.SubGraphT()
    sg.tensors, sg.inputs, sg.outputs, sg.operators = [tensor], [0], [0], []
    model.subgraphs = [sg]
    strip_unread_fields_pass(model)
    assert list(tensor.shapeSignature) == [-1, 4]


@pytest.mark.parametrize("name", list(MODELS))
def test_byte_accounting_adds_up_and_the_floor_lies_between_payload_and_file(int8_files, name):
    data = int8_files[name].stripped
    accounting = byte_accounting(data)
    assert sum(accounting.values()) == len(data)
    payload = payload_bytes(read_model(data))
    assert all(accounting.get(k, 0) == payload[k] for k in PAYLOAD_CATEGORIES)
    floor = schema_floor(data)
    assert sum(payload.values()) < floor["total"] < len(data)
    assert floor["total"] == sum(v for k, v in floor.items() if k != "total")
    # The floor does not depend on how the file was written.
    assert schema_floor(int8_files[name].named)["total"] == floor["total"]
    assert schema_floor(_stock_packing(data))["total"] == floor["total"]


@pytest.mark.parametrize("name", list(MODELS))
def test_writer_fills_the_gaps_before_aligned_buffers_with_vectors_the_model_needs(int8_files, name):
    """Buffer tables packed right after their data leave (4 - size) mod 16 bytes before each
    16-byte aligned buffer; the writer puts shapes, index vectors and scales there instead, so the
    file's whole padding is below what the buffers alone would leave, and every buffer is aligned."""
    data = int8_files[name].stripped
    model = read_model(data)
    sizes = [len(b.data) for b in model.buffers if b.data is not None and len(b.data)]
    gaps_without_fillers = sum((4 - size) % 16 for size in sizes)
    assert gaps_without_fillers > 0
    assert byte_accounting(data)["alignment padding"] < gaps_without_fillers
    assert misaligned_buffers(data) == []


def test_gap_fill_closes_a_gap_only_with_fillers_that_fit_unpadded():
    from edge_export.flatbuffer.aligned_builder import _gap_fill

    # Kinds are (vector size mod 16, int64): a filler vector is its 4-byte length and its data.
    four, eight, twelve, wide_four = (4, False), (8, False), (12, False), (4, True)
    # 4 bytes written, 16 bytes of data next: the data is 12 bytes short of its boundary.
    assert _gap_fill(4, 16, {twelve: 1}) == (twelve,)
    assert _gap_fill(4, 16, {four: 1, eight: 1}) == (four, eight)
    assert _gap_fill(4, 16, {four: 1}) == ()  # one 4-byte filler cannot close it: padded as before
    # An int64 vector's data needs 8-byte alignment: not first at offset 4, but after a 4-byte
    # filler; preferred when it fits (it would cost 4 bytes of padding among the tables later).
    assert _gap_fill(4, 16, {wide_four: 1}) == ()
    assert _gap_fill(4, 16, {four: 2, wide_four: 1, twelve: 1}) == (four, wide_four, four)
    # Already on the boundary: only int64 vectors are worth placing there.
    assert _gap_fill(0, 16, {four: 2, twelve: 1}) == ()
    assert _gap_fill(0, 16, {wide_four: 1, twelve: 1}) == (wide_four, twelve)


def test_pass_stores_repeated_constant_data_once(int8_files):
    """A second copy of every constant (each tensor given a buffer of its own with the same bytes)
    is folded back: the file is the original byte for byte, and computes the same."""
    from ai_edge_litert import schema_py_generated as schema

    files = int8_files["small_cnn"]
    model = read_model(files.stripped)
    for tensor in model.subgraphs[0].tensors:
        data = model.buffers[tensor.buffer].data
        if tensor.buffer and data is not None and len(data):
            copy = schema.BufferT()
            copy.data = np.array(data, copy=True)
            model.buffers.append(copy)
            tensor.buffer = len(model.buffers) - 1
    doubled = pack_model(model)
    constant_bytes = sum(len(b.data) for b in read_model(files.stripped).buffers if b.data is not None)
    assert len(doubled) >= len(files.stripped) + constant_bytes
    again = read_model(doubled)
    assert strip_unread_fields_pass(again) is True
    assert pack_model(again) == files.stripped
