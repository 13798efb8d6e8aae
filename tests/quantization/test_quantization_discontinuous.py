"""A step function's input stays float under --quantize int8 (quantization/discontinuous.py).

``torch.remainder(3 * x, 1.0)`` quantized as ai-edge-quantizer's int8 recipe wants it (the input
and the MUL int8, FLOOR_MOD in float between them) gave 13 dB: one int8 step on 3x moves values
across an integer, and the output jumps by 1.0 there."""

from __future__ import annotations

import pytest
import torch

import edge_export


class Remainder(torch.nn.Module):
    def forward(self, x):
        return torch.remainder(x * 3, 1.0)


class StepsInsideANetwork(torch.nn.Module):
    """A conv feeding floor, then a conv again: only the floor's feeder is left float."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.b(torch.floor(self.a(x) * 4))


@pytest.fixture(scope="module")
def remainder_export(tmp_path_factory):
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("remainder") / "r.tflite"
    return edge_export.export(
        Remainder().eval(), example_inputs=(torch.randn(1, 8, 16),), output=out, quantize="int8",
        samples=4, calibration_samples=16, host_latency=False, quiet_libraries=True,
    )


def test_remainder_passes_int8_parity(remainder_export):
    report = remainder_export.report
    assert report["verdict"] == "passed" and report["exit_code"] == 0
    quant = report["quantization"]
    kept = next(a for a in quant["attempts"] if a["backend"] == quant["backend"])
    assert kept["sqnr_db"] >= 40  # was 13 dB with the MUL and the input quantized


def test_the_feeders_of_a_step_function_are_found(tmp_path):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization.discontinuous import feeders_of_discontinuous_ops

    torch.manual_seed(0)
    out = tmp_path / "steps.tflite"
    edge_export.export(StepsInsideANetwork().eval(), example_inputs=(torch.randn(1, 3, 8, 8),), output=out, samples=2, host_latency=False, quiet_libraries=True)
    model = read_flatbuffer(out.read_bytes(), origin="test")
    opcodes = [op.opcode for op in model.operators]
    assert "FLOOR" in opcodes
    feeders = feeders_of_discontinuous_ops(model)
    floor = opcodes.index("FLOOR")
    producer = next(op.index for op in model.operators if set(op.outputs) & set(model.operators[floor].inputs))
    assert producer in {f.index for f in feeders}  # the first conv (the converter folds the * 4 into it)
    assert all(f.index < floor for f in feeders if f.index >= 0)  # the second conv reads the floor: int8
    # the input's only reader is now float, so the input is not quantized either; the output is int8's
    assert [f.opcode for f in feeders if f.index < 0] == ["INPUT"]


def test_a_model_without_step_functions_has_no_feeders(tmp_path):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization.discontinuous import feeders_of_discontinuous_ops

    out = tmp_path / "conv.tflite"
    edge_export.export(torch.nn.Conv2d(3, 4, 3).eval(), example_inputs=(torch.randn(1, 3, 8, 8),), output=out, samples=2, host_latency=False, quiet_libraries=True)
    assert feeders_of_discontinuous_ops(read_flatbuffer(out.read_bytes(), origin="test")) == ()
