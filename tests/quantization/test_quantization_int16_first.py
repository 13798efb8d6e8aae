"""``--mixed-precision auto`` on cpu tries int16 activations (fully integer) before raising operators
to float: a recurrent cell whose state int8 cannot hold gets 16-bit activations where it needs them
and stays integer (the Silero VAD had 21 of 23 operators raised to float)."""

from __future__ import annotations

import json
import re

import pytest
import torch
from cli_harness import validate_report
from torch import nn

from edge_export import export
from edge_export.flatbuffer import load_flatbuffer


class CellStep(nn.Module):
    """One step of an LSTM cell, state in and out, whose cell state spans about +-40 (as trained
    cells' do) while h = o * tanh(c) needs its small values: int8's 256 levels over that range
    read about 28 dB, every activation at int16 48 dB."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.cell = nn.LSTMCell(16, 32)
        self.head = nn.Linear(32, 8)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h2, c2 = self.cell(x, (h, c * 40.0))
        return self.head(h2), c2 / 40.0


def _inputs() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(1, 16, generator=g), torch.randn(1, 32, generator=g).tanh(), torch.randn(1, 32, generator=g)


@pytest.mark.slow
def test_a_recurrent_cell_gets_int16_activations_and_stays_fully_integer(tmp_path):
    result = export(
        CellStep().eval(), example_inputs=_inputs(), output=tmp_path / "cell.tflite",
        quantize="int8", quant_backend="flatbuffer", min_sqnr=30.0,  # auto, the cpu default with a target
    )
    report = validate_report(json.loads(result.report_json_path.read_text()))
    mixed = report["mixed_precision"]
    assert result.exit_code == 0, report["validation"]
    assert mixed["mode"] == "auto" and mixed["precision"] == "int16" and mixed["met"] is True
    assert mixed["int8_sqnr_db"] < 30 <= mixed["sqnr_db"]
    assert mixed["reason"].startswith("int16 activations tried before float (fully integer)")
    # the cell's operators, not all of them, and none in float: the file is fully integer
    promoted = mixed["promoted"]
    assert promoted and all(p["precision"] == "int16" for p in promoted)
    raised, candidates = map(int, re.search(r"promoted (\d+) of (\d+) operators", mixed["reason"]).groups())
    assert raised == len({p["op_index"] for p in promoted}) < candidates
    assert mixed["fully_integer"] is True and report["quantization"]["fully_integer"] is True
    assert load_flatbuffer(result.tflite_path).is_fully_integer
    assert min(o["metrics"]["sqnr_db"] for o in report["validation"]["outputs"]) >= 30
