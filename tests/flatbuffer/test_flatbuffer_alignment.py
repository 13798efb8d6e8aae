"""Every buffer of every .tflite edge-export writes starts at a multiple of 16 bytes (the schema's
``force_align: 16``, which litert-torch's converter and Python's flatbuffers.Builder ignore), in every
mode and target, and the aligned files compute bit-identically to the unaligned bytes they came from
(LiteRT, and TFLite Micro for the micro target)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from cli_harness import FAKE_COMPILER_PROLOGUE, write_fake_compiler
from model_zoo import small_cnn

SHAPE = (1, 3, 16, 16)
# mode name -> export options; the Edge TPU compiler is a stand-in script that copies its input.
EXPORTS = {
    "fp32": {"quantize": "none"},
    "fp16": {"quantize": "fp16"},
    "dynamic-int8": {"quantize": "dynamic-int8", "quant_backend": "flatbuffer"},
    "int8": {"quantize": "int8", "quant_backend": "flatbuffer"},
    "int16x8": {"quantize": "int16x8", "quant_backend": "flatbuffer"},
    "edgetpu": {"target": "edgetpu", "quant_backend": "flatbuffer", "edgetpu_compiler": "<fake>"},
    "micro": {"target": "micro", "quant_backend": "flatbuffer"},
    # TFLite model metadata: one more buffer (TFLITE_METADATA) and a zip after the flatbuffer
    "metadata": {"quantize": "none", "model_name": "aligned", "mean": (0.5,), "std": (0.5,)},
}
# Modes whose written file has the converter's (or quantizer's) I/O types: int8 and int16x8 get float
# I/O added after quantization, the targets integer I/O.
SAME_IO_AS_CONVERTER = ("fp32", "fp16", "dynamic-int8")

# The stand-in compiler copies its input: the Edge TPU output is then edge-export's own file.
_FAKE_COMPILER_BODY = FAKE_COMPILER_PROLOGUE + """\
echo "Edge TPU Compiler version 16.0.384591198"
echo "Model compiled successfully in 12 ms."
echo "Number of Edge TPU subgraphs: 1"
"""


@dataclass
class Exported:
    path: Path
    unaligned: bytes  # what the converter (or the quantizer) produced, before edge-export's writer


def _buffer_starts(data: bytes) -> list[tuple[int, int]]:
    """(buffer index, file offset of its first byte) for every non-empty buffer, read with the
    generated schema reader (independently of edge-export's own check)."""
    from ai_edge_litert import schema_py_generated as schema

    model = schema.Model.GetRootAs(data, 0)
    starts = []
    for i in range(model.BuffersLength()):
        buf = model.Buffers(i)
        if buf.Offset() > 1:  # stored after the flatbuffer
            starts.append((i, buf.Offset()))
        elif buf.DataLength():
            starts.append((i, buf._tab.Vector(buf._tab.Offset(4))))
    return starts


def _misaligned(data: bytes) -> list[tuple[int, int]]:
    return [(i, start) for i, start in _buffer_starts(data) if start % 16]


def _stock_unaligned(data: bytes) -> bytes:
    """The same model through the stock Python writer, which ignores force_align (the pre-fix output)."""
    from ai_edge_litert.tools import flatbuffer_utils

    return bytes(flatbuffer_utils.convert_object_to_bytearray(flatbuffer_utils.read_model_from_bytearray(bytearray(data))))


def _content(data: bytes) -> list:
    """What a runtime computes from: every tensor with its constant bytes and quantization, every
    operator with its builtin code, tensors and options."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    codes = [max(c.builtinCode or 0, c.deprecatedBuiltinCode or 0) for c in model.operatorCodes]

    def buffer_bytes(index: int) -> bytes:
        buf = model.buffers[index]
        if (buf.offset or 0) > 1:
            return bytes(data[buf.offset : buf.offset + buf.size])
        return bytes(buf.data) if buf.data is not None else b""

    def quant(q) -> tuple | None:
        if q is None:
            return None
        return tuple(None if v is None else np.asarray(v).tolist() for v in (q.scale, q.zeroPoint, q.min, q.max)) + (
            q.quantizedDimension,
        )

    def options(o) -> dict | None:
        return None if o is None else {k: np.asarray(v).tolist() if isinstance(v, np.ndarray) else v for k, v in vars(o).items()}

    return [
        (
            [(t.name, list(t.shape), t.type, buffer_bytes(t.buffer), quant(t.quantization)) for t in sg.tensors],
            [(codes[op.opcodeIndex], list(op.inputs), list(op.outputs), op.builtinOptionsType, options(op.builtinOptions)) for op in sg.operators],
            list(sg.inputs),
            list(sg.outputs),
        )
        for sg in model.subgraphs
    ]


def _inputs(shape: tuple[int, ...], n: int = 3) -> list[list[np.ndarray]]:
    rng = np.random.default_rng(7)
    return [[rng.standard_normal(shape).astype(np.float32)] for _ in range(n)]


def _litert_outputs(data: bytes) -> list[np.ndarray]:
    from edge_export.runtime.interpreter import TFLiteRunner

    runner = TFLiteRunner(data)
    return [runner.run(x)[0] for x in _inputs(tuple(runner.inputs[0].shape))]  # NCHW, or NHWC for the Edge TPU


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Exported]:
    """Each mode and target exported once through the public API; the bytes handed to the writer are
    recorded on the way (the converter's for float modes, the quantizer's for integer ones)."""
    import edge_export
    import edge_export.flatbuffer.pack as packing
    from edge_export.quantization import candidates
    from edge_export.flatbuffer import FlatbufferModel

    folder = tmp_path_factory.mktemp("aligned")
    compiler = write_fake_compiler(folder, _FAKE_COMPILER_BODY)
    seen: list[bytes] = []

    def recording(real):
        def wrapper(source, *args, **kwargs):  # bytes, or a model object (which carries its bytes)
            seen.append(source.data if isinstance(source, FlatbufferModel) else bytes(source))
            return real(source, *args, **kwargs)

        return wrapper

    module = small_cnn().eval()
    example = (torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)),)
    results = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing, "align_buffers", recording(packing.align_buffers))
        patch.setattr(candidates, "run_flatbuffer_passes", recording(candidates.run_flatbuffer_passes))
        for name, options in EXPORTS.items():
            seen.clear()
            if options.get("edgetpu_compiler"):
                options = {**options, "edgetpu_compiler": str(compiler)}
            result = edge_export.export(  # no parity or host latency: neither changes the written bytes
                module, example_inputs=example, output=folder / f"{name}.tflite", validate=False, host_latency=False,
                calibration_samples=8, **options,
            )
            assert result.exit_code == 0, result.report.get("verdict")
            # The first recorded bytes: the converter's output (float modes) or the chosen quantizer
            # attempt's (one backend was asked for, so one attempt).
            results[name] = Exported(result.tflite_path, seen[0])
    return results


@pytest.mark.parametrize("name", list(EXPORTS))
def test_every_buffer_of_every_written_file_is_16_byte_aligned(exported, name):
    """Failed before the fix: converter output kept buffers at 4, 8 or 12 mod 16, and so did every re-pack."""
    written = sorted(exported[name].path.parent.glob(f"{name}*.tflite"))
    if name == "edgetpu":  # the compiler's input (here copied as the "compiled" model) is ours too
        assert [p.name for p in written] == ["edgetpu.tflite", "edgetpu_edgetpu.tflite"]
    else:
        assert [p.name for p in written] == [f"{name}.tflite"]
    for path in written:
        data = path.read_bytes()
        assert len(_buffer_starts(data)) >= 4  # weights and biases: there is something to align
        assert _misaligned(data) == [], path.name


def _named_as(raw: bytes, written: bytes) -> bytes:
    """The converter's bytes aligned and with the written file's signature names (edge-export names
    the signature after forward(); rename_signature_pass changes names only)."""
    from functools import partial

    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.flatbuffer import align_buffers
    from edge_export.passes.flatbuffer import rename_signature_pass, run_flatbuffer_passes

    named = read_flatbuffer(written)
    rename = partial(
        rename_signature_pass,
        input_names=named.input_names,
        output_names=named.output_names,
        signature_key=named.signatures[0]["key"],
    )
    return run_flatbuffer_passes(read_flatbuffer(align_buffers(raw)), [rename]).model_bytes


def test_the_converter_alone_does_not_align(exported):
    """Why the writer exists: the converter's own bytes have misaligned buffers (if litert-torch
    starts honouring force_align, align_buffers keeps its bytes as they are)."""
    from edge_export.flatbuffer import align_buffers

    raw = exported["fp32"].unaligned
    assert _misaligned(raw)
    assert align_buffers(raw) != raw
    assert _named_as(raw, exported["fp32"].path.read_bytes()) == exported["fp32"].path.read_bytes()


@pytest.mark.parametrize("name", SAME_IO_AS_CONVERTER)
def test_aligned_file_holds_and_computes_the_same_as_the_converters_bytes(exported, name):
    data = exported[name].path.read_bytes()
    unaligned = exported[name].unaligned
    assert _misaligned(unaligned)  # the comparison is with a really misaligned file
    assert _content(data) == _content(_named_as(unaligned, data))
    for a, b in zip(_litert_outputs(data), _litert_outputs(unaligned)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", list(EXPORTS))
def test_aligned_file_computes_the_same_as_its_unaligned_packing(exported, name):
    """Every output, including those rewritten after quantization (I/O types, operator order),
    against the same model packed by the stock writer, which ignores force_align."""
    data = exported[name].path.read_bytes()
    unaligned = _stock_unaligned(data)
    assert _misaligned(unaligned)
    assert _content(data) == _content(unaligned)
    for a, b in zip(_litert_outputs(data), _litert_outputs(unaligned)):
        np.testing.assert_array_equal(a, b)
    if name == "micro":
        from edge_export.targets.micro.runner import MicroRunner

        aligned_runner, unaligned_runner = MicroRunner(data), MicroRunner(unaligned)
        for x in _inputs(tuple(aligned_runner.inputs[0].shape)):  # NHWC: micro implies it
            np.testing.assert_array_equal(aligned_runner.run(x)[0], unaligned_runner.run(x)[0])


@pytest.mark.parametrize("name", list(EXPORTS))
def test_packing_is_deterministic(exported, name):
    from edge_export.flatbuffer import align_buffers, pack_model, read_model

    data = exported[name].path.read_bytes()
    assert pack_model(read_model(data), source=data) == pack_model(read_model(data), source=data)
    assert align_buffers(data) == data  # an aligned file is kept as it is


def test_exporting_again_writes_the_same_bytes(exported, tmp_path):
    """The Edge TPU path runs the most passes (quantize, share, I/O types, reorder, align)."""
    import edge_export

    first = exported["edgetpu"]
    again = edge_export.export(
        small_cnn().eval(), example_inputs=(torch.randn(SHAPE, generator=torch.Generator().manual_seed(0)),),
        output=tmp_path / "edgetpu.tflite", validate=False, calibration_samples=8,
        **{**EXPORTS["edgetpu"], "edgetpu_compiler": str(first.path.parent / "edgetpu_compiler")},
    )
    assert again.tflite_path.read_bytes() == first.path.read_bytes()


def test_int8_file_still_writes_each_zero_point_vector_once(exported):
    from ai_edge_litert import schema_py_generated as schema

    data = exported["int8"].path.read_bytes()
    sg = schema.Model.GetRootAs(data, 0).Subgraphs(0)
    where: dict[bytes, set[int]] = {}
    for i in range(sg.TensorsLength()):
        q = sg.Tensors(i).Quantization()
        if q is None or not q.ZeroPointLength():
            continue
        # QuantizationParameters.zero_point is field 3 (vtable slot 10).
        where.setdefault(q.ZeroPointAsNumpy().tobytes(), set()).add(q._tab.Vector(q._tab.Offset(10)))
    assert sum(len(k) > 8 for k in where) >= 1  # per-channel vectors are there
    assert all(len(positions) == 1 for positions in where.values())


def test_strip_names_output_is_aligned_and_computes_the_same(exported):
    from edge_export.passes.flatbuffer import run_flatbuffer_passes, strip_tensor_names_pass

    named = exported["int8"].path.read_bytes()
    stripped = run_flatbuffer_passes(_stock_unaligned(named), [strip_tensor_names_pass]).model_bytes
    assert _misaligned(stripped) == []
    for a, b in zip(_litert_outputs(stripped), _litert_outputs(named)):
        np.testing.assert_array_equal(a, b)


def _with_external_buffers(data: bytes) -> bytes:
    """The same model with every buffer's data stored after the flatbuffer, deliberately 3 bytes
    off alignment (the layout LiteRT uses for models over 2 GB)."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(data))
    moved = [(buf, bytes(buf.data)) for buf in model.buffers if buf.data is not None and len(buf.data)]
    for buf, payload in moved:
        buf.data, buf.offset, buf.size = None, 2, len(payload)  # placeholders: the layout does not depend on them
    flat = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    position = len(flat)
    for buf, payload in moved:
        buf.offset = position + 3
        position += 3 + len(payload)
    flat = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    tail = b"".join(b"\0\0\0" + payload for _, payload in moved)
    assert len(flat) + len(tail) == position
    return flat + tail


def test_buffers_stored_after_the_flatbuffer_are_moved_inside_aligned(exported):
    from edge_export.flatbuffer import align_buffers, read_model

    inline = exported["int8"].path.read_bytes()
    external = _with_external_buffers(inline)
    assert _misaligned(external)
    aligned = align_buffers(external)
    assert _misaligned(aligned) == []
    # Inside the flatbuffer now (as every pass reads them), with the same contents; it runs the same.
    assert all((buf.offset or 0) <= 1 for buf in read_model(aligned).buffers)
    assert _content(aligned) == _content(external) == _content(inline)
    for a, b in zip(_litert_outputs(aligned), _litert_outputs(external)):
        np.testing.assert_array_equal(a, b)


def test_external_buffers_without_their_file_are_an_internal_error(exported):
    from ai_edge_litert import schema_py_generated as schema

    from edge_export.errors import InternalError
    from edge_export.flatbuffer import pack_model

    external = _with_external_buffers(exported["fp32"].path.read_bytes())
    model = schema.ModelT.InitFromPackedBuf(external, 0)  # the schema's own reader leaves them outside
    with pytest.raises(InternalError, match="without the file it came from"):
        pack_model(model)


def test_constants_over_2_gib_are_refused_not_misplaced(exported):
    from edge_export.errors import ConversionError
    from edge_export.flatbuffer import pack_model, read_model

    model = read_model(exported["fp32"].path.read_bytes())
    model.buffers[-1].data = np.broadcast_to(np.uint8(0), (2**31,))  # 2 GiB of zeros, no memory
    with pytest.raises(ConversionError, match="more than one flatbuffer can hold"):
        pack_model(model)
