"""Each flatbuffer pass on its own, the pipeline's single pack, and the model object's constants
and I/O names."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest

from edge_export.config import IODtype
from edge_export.errors import InternalError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.flatbuffer import align_buffers, misaligned_buffers, pack_model, read_model
from edge_export.passes.flatbuffer import pipeline as pipeline_module
from edge_export.passes.flatbuffer import (
    attach_metadata_pass,
    rename_signature_pass,
    reorder_operators_for_edgetpu_pass,
    run_flatbuffer_passes,
    set_io_dtype_pass,
    share_quantization_vectors_pass,
    restore_tensor_names_pass,
    strip_tensor_names_pass,
)
from edge_export.runtime.interpreter import TFLiteRunner


def _outputs(data: bytes, example) -> list[np.ndarray]:
    return TFLiteRunner(data).run([t.numpy() for t in example])


# ---- share_quantization_vectors_pass -------------------------------------------------------------


def test_share_quantization_vectors_pass_asks_for_a_repack_only_with_quantization_vectors(converted):
    assert share_quantization_vectors_pass(read_model(converted.int8)) is True
    assert share_quantization_vectors_pass(read_model(converted.fp32)) is False
    shared = run_flatbuffer_passes(converted.int8, [share_quantization_vectors_pass])
    stock = read_model(converted.int8)  # the generated packer: every vector written in full
    import flatbuffers

    builder = flatbuffers.Builder(0)
    builder.Finish(stock.Pack(builder), file_identifier=b"TFL3")
    assert shared.modified_by == ("share_quantization_vectors_pass",)
    assert len(shared.model_bytes) < len(builder.Output())
    before, after = read_flatbuffer(converted.int8), read_flatbuffer(shared.model_bytes)
    assert [t.quant for t in before.tensors] == [t.quant for t in after.tensors]


# ---- strip_tensor_names_pass --------------------------------------------------------------------


def test_strip_tensor_names_pass_keeps_only_io_names(converted):
    model = read_model(converted.fp32)
    assert strip_tensor_names_pass(model) is True
    assert strip_tensor_names_pass(model) is False  # nothing left to strip
    sg = model.subgraphs[0]
    io = {*sg.inputs, *sg.outputs}
    assert all(t.name == b"" for i, t in enumerate(sg.tensors) if i not in io)
    assert all(sg.tensors[i].name for i in io)
    stripped = run_flatbuffer_passes(converted.fp32, [strip_tensor_names_pass]).model_bytes
    assert not read_flatbuffer(stripped).has_inner_tensor_names
    for a, b in zip(_outputs(stripped, converted.example), _outputs(converted.fp32, converted.example)):
        np.testing.assert_array_equal(a, b)


# ---- restore_tensor_names_pass ------------------------------------------------------------------


def test_restore_tensor_names_pass_undoes_strip_from_the_map(converted, tmp_path):
    import json

    from edge_export.errors import UsageError
    from edge_export.artifacts.tensor_names import build_tensor_name_map, load_tensor_name_map

    named = read_flatbuffer(converted.fp32)
    stripped = run_flatbuffer_passes(named, [strip_tensor_names_pass]).model
    path = tmp_path / "m.tensors.json"
    path.write_bytes(build_tensor_name_map(named, stripped))
    name_map = load_tensor_name_map(path)
    assert json.loads(path.read_text())["model_size_bytes"] == stripped.size_bytes
    name_map.check_belongs_to(stripped, path, tmp_path / "m.tflite")
    with pytest.raises(UsageError, match="belongs to another model"):
        name_map.check_belongs_to(named, path, tmp_path / "m.tflite")
    model = stripped.mutable()
    assert restore_tensor_names_pass(model, name_map.names) is True
    assert restore_tensor_names_pass(model, name_map.names) is False  # already named
    assert [t.name for t in model.subgraphs[0].tensors] == [t.name for t in named.mutable().subgraphs[0].tensors]
    with pytest.raises(UsageError, match="tensor 99999"):
        restore_tensor_names_pass(stripped.mutable(), ({99999: "x"},))
# ---- rename_signature_pass -----------------------------------------------------------------------


def test_rename_signature_pass_renames_the_signature_and_its_io_tensors_only(converted):
    model = read_model(converted.int8)
    rename = partial(rename_signature_pass, input_names=("image",), output_names=("scores",), signature_key="run")
    assert rename(model) is True
    assert rename(model) is False  # already named so
    renamed = run_flatbuffer_passes(converted.int8, [rename]).model_bytes
    before, after = read_flatbuffer(converted.int8), read_flatbuffer(renamed)
    assert before.input_names == ("args_0",) and after.input_names == ("image",)
    assert after.output_names == ("scores",)
    assert after.signatures[0]["key"] == "run"
    assert [t.name for t in after.input_tensors] == ["run_image"]
    # inner tensors keep their names (provenance reads them), and the model computes the same
    inner = [i for i in range(len(before.tensors)) if i not in (*before.inputs, *before.outputs)]
    assert [after.tensors[i].name for i in inner] == [before.tensors[i].name for i in inner]
    for a, b in zip(_outputs(renamed, converted.example), _outputs(converted.int8, converted.example)):
        np.testing.assert_array_equal(a, b)
    from ai_edge_litert.interpreter import Interpreter

    assert Interpreter(model_content=renamed).get_signature_list() == {"run": {"inputs": ["image"], "outputs": ["scores"]}}


# ---- set_io_dtype_pass --------------------------------------------------------------------------


def test_set_io_dtype_pass_shifts_zero_points_for_uint8_and_leaves_int8_alone(converted):
    assert set_io_dtype_pass(read_model(converted.int8), IODtype.INT8) is False
    model = read_model(converted.int8)
    assert set_io_dtype_pass(model, IODtype.UINT8) is True
    before, after = read_flatbuffer(converted.int8), read_flatbuffer(pack_model(model))
    assert [t.dtype for t in after.input_tensors] == ["uint8"]
    assert after.input_tensors[0].quant.zero_points[0] == before.input_tensors[0].quant.zero_points[0] + 128
    assert after.input_names == before.input_names  # the boundary tensor keeps its index and name
    assert after.op_counts["QUANTIZE"] == before.op_counts.get("QUANTIZE", 0) + 2


def test_set_io_dtype_pass_changes_the_main_subgraph_of_a_model_with_more(converted):
    """A scatter's update function or a loop's body is a second subgraph: only the main one has the
    model's I/O (an int8 index_put was refused for its two subgraphs)."""
    import copy

    model = read_model(converted.int8)
    body = copy.deepcopy(model.subgraphs[0])
    model.subgraphs.append(body)
    types = [t.type for t in body.tensors]
    assert set_io_dtype_pass(model, IODtype.FLOAT32) is True
    assert [t.type for t in model.subgraphs[1].tensors] == types and len(model.subgraphs) == 2
    assert len(model.subgraphs[0].operators) > len(body.operators)  # the boundary QUANTIZE/DEQUANTIZE


def test_set_io_dtype_pass_refuses_int16_io_as_int8():
    from ai_edge_litert import schema_py_generated as schema

    from edge_export.errors import QuantizationError

    model = schema.ModelT()
    sg = schema.SubGraphT()
    tensor = schema.TensorT()
    tensor.type, tensor.quantization = schema.TensorType.INT16, schema.QuantizationParametersT()
    tensor.quantization.scale, tensor.quantization.zeroPoint = [0.5], [0]
    sg.tensors, sg.inputs, sg.outputs, sg.operators = [tensor], [0], [], []
    model.subgraphs = [sg]
    with pytest.raises(QuantizationError, match="int16"):
        set_io_dtype_pass(model, IODtype.INT8)


# ---- reorder_operators_for_edgetpu_pass ---------------------------------------------------------


def _is_topological(model) -> bool:
    sg = model.subgraphs[0]
    ready = {int(i) for i in sg.inputs} | {i for i, t in enumerate(sg.tensors) if t.buffer and t.buffer > 0}
    for op in sg.operators:
        if any(int(i) >= 0 and int(i) not in ready for i in op.inputs):
            return False
        ready.update(int(o) for o in op.outputs)
    return True


def test_reorder_operators_for_edgetpu_pass_moves_independent_mapped_operators_first(converted):
    model = read_model(converted.int8)
    operators = list(model.subgraphs[0].operators)
    # The first convolution "does not map": the other branch's convolution moves ahead of it.
    first_conv = next(op.index for op in read_flatbuffer(converted.int8).operators if op.opcode == "CONV_2D")
    supported = [i != first_conv for i in range(len(operators))]
    assert reorder_operators_for_edgetpu_pass(model, supported) is True
    reordered = model.subgraphs[0].operators
    assert reordered[first_conv] is operators[first_conv + 1] and reordered[first_conv + 1] is operators[first_conv]
    assert sorted(map(id, reordered)) == sorted(map(id, operators))
    assert _is_topological(model)
    data = pack_model(model)
    for a, b in zip(_outputs(data, converted.example), _outputs(converted.int8, converted.example)):
        np.testing.assert_array_equal(a, b)
    assert reorder_operators_for_edgetpu_pass(read_model(converted.int8), [True] * len(operators)) is False
    with pytest.raises(InternalError, match="operators"):
        reorder_operators_for_edgetpu_pass(read_model(converted.int8), [True])


# ---- the pipeline -------------------------------------------------------------------------------


def test_pipeline_packs_once_and_writes_the_model_one_pass_at_a_time_wrote(converted, monkeypatch):
    """One pack for three passes, and the same bytes as one pack per pass: the writer shares every
    equal vector, including set_io_dtype_pass's new I/O scales, which are Python lists until a
    re-read (docs/ARCHITECTURE.md)."""
    packs = []
    real_pack = pipeline_module.pack_model
    monkeypatch.setattr(pipeline_module, "pack_model", lambda *a, **k: packs.append(1) or real_pack(*a, **k))
    passes = [share_quantization_vectors_pass, partial(set_io_dtype_pass, io_dtype=IODtype.UINT8), strip_tensor_names_pass]
    together = run_flatbuffer_passes(converted.int8, passes)
    assert len(packs) == 1
    assert together.modified_by == ("share_quantization_vectors_pass", "set_io_dtype_pass", "strip_tensor_names_pass")
    assert misaligned_buffers(together.model_bytes) == []
    one_at_a_time = converted.int8
    for p in passes:
        one_at_a_time = run_flatbuffer_passes(one_at_a_time, [p]).model_bytes
    assert len(packs) == 4
    assert together.model_bytes == one_at_a_time
    fused, chained = read_flatbuffer(together.model_bytes), read_flatbuffer(one_at_a_time)
    assert (fused.tensors, fused.operators, fused.signatures) == (chained.tensors, chained.operators, chained.signatures)
    for a, b in zip(_outputs(together.model_bytes, converted.example), _outputs(one_at_a_time, converted.example)):
        np.testing.assert_array_equal(a, b)


def test_pipeline_that_changes_nothing_returns_aligned_input_without_packing(converted, monkeypatch):
    aligned = align_buffers(converted.fp32)
    packs = []
    real_pack = pipeline_module.pack_model
    monkeypatch.setattr(pipeline_module, "pack_model", lambda *a, **k: packs.append(1) or real_pack(*a, **k))
    result = run_flatbuffer_passes(read_flatbuffer(aligned), [share_quantization_vectors_pass])
    assert result.model_bytes == aligned and not result.modified and packs == []
    # Misaligned input is still written aligned (what align_buffers writes).
    assert run_flatbuffer_passes(converted.fp32, []).model_bytes == aligned


# ---- attach_metadata_pass -----------------------------------------------------------------------


def test_attach_metadata_pass_stores_one_aligned_metadata_buffer(converted):
    model = read_model(converted.fp32)
    first, second = b"\x10\x00\x00\x00M001" + bytes(7), b"\x10\x00\x00\x00M001" + bytes(9)
    assert attach_metadata_pass(model, metadata_buffer=first) is True
    assert attach_metadata_pass(model, metadata_buffer=first) is False  # already there
    assert attach_metadata_pass(model, metadata_buffer=second) is True  # replaced, not added
    data = pack_model(model)
    assert misaligned_buffers(data) == []
    from ai_edge_litert import schema_py_generated as schema

    root = schema.Model.GetRootAs(data, 0)
    named = [root.Metadata(i) for i in range(root.MetadataLength()) if root.Metadata(i).Name() == b"TFLITE_METADATA"]
    assert len(named) == 1
    stored = root.Buffers(named[0].Buffer())
    assert stored.DataAsNumpy().tobytes() == second
    assert stored._tab.Vector(stored._tab.Offset(4)) % 16 == 0  # the data itself, at a multiple of 16
    feed = [t.numpy() for t in converted.example]
    assert all(np.array_equal(x, y) for x, y in zip(TFLiteRunner(data).run(feed), _outputs(converted.fp32, converted.example)))


# ---- the model object ---------------------------------------------------------------------------


def test_model_serves_constants_from_its_own_bytes(converted):
    fb = read_flatbuffer(converted.fp32)
    assert fb.data == converted.fp32
    weights = [fb.constant(t.index) for t in fb.tensors if t.is_constant and len(t.shape) == 4]
    expected = {conv.weight.detach().permute(0, 2, 3, 1).numpy().tobytes() for conv in (converted.module.left, converted.module.right)}
    assert {w.tobytes() for w in weights} == expected  # OHWI, float32, bit for bit
    assert all(w.dtype == np.float32 for w in weights)
    assert fb.constant(fb.inputs[0]) is None  # an activation has no constant value


def test_model_io_names_are_the_runtimes_and_the_reports(converted):
    from edge_export.quantization import describe_io
    from edge_export.targets.micro.runner import MicroRunner

    fb = read_flatbuffer(converted.int8)
    assert fb.input_names and fb.output_names
    assert [x.name for x in describe_io(fb)] == [*fb.input_names, *fb.output_names]
    runner = TFLiteRunner(converted.int8)
    assert [t.name for t in runner.inputs + runner.outputs] == [*fb.input_names, *fb.output_names]
    micro = MicroRunner(converted.int8)
    assert [t.name for t in micro.inputs + micro.outputs] == [*fb.input_names, *fb.output_names]


def test_tensors_a_pass_adds_never_repeat_a_name():
    """Two MEANs sharing one axes constant, each rewritten, once gave two '<axes>;nhwc' constants:
    ai-edge-quantizer refused FocalNet's model (names must be unique)."""
    from types import SimpleNamespace

    from ai_edge_litert import schema_py_generated as schema

    from edge_export.passes.flatbuffer.graph_edits import add_activation_like, add_int32_constant, unique_name

    sg = SimpleNamespace(tensors=[schema.TensorT()])
    sg.tensors[0].name, sg.tensors[0].shape = b"x", [1, 4]
    model = SimpleNamespace(buffers=[schema.BufferT()])
    first = add_int32_constant(model, sg, [1, 2], "axes;nhwc")
    second = add_int32_constant(model, sg, [1, 2], "axes;nhwc")
    third = add_activation_like(sg, 0, [4, 1], "")  # "x" again
    names = [t.name.decode() if isinstance(t.name, bytes) else t.name for t in sg.tensors]
    assert names == ["x", "axes;nhwc", "axes;nhwc_2", "x_2"]
    assert (first, second, third) == (1, 2, 3)
    assert unique_name(sg, "new") == "new" and unique_name(sg, "axes;nhwc") == "axes;nhwc_3"
