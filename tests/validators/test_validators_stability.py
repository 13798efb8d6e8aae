"""A failed parity says when the PyTorch model itself is unstable on the parity inputs (PyTorch
against PyTorch with the inputs changed by one part in a million), so the failure is not blamed on
the conversion."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import edge_export
from edge_export.validators.stability import (
    PERTURBATION,
    UNSTABLE_BELOW_DB,
    perturbed_samples,
    reference_stability,
)


class Chaotic(torch.nn.Module):
    """sin of a huge multiple of a matrix product: a change in the sixth significant digit moves the
    output by its whole range, so the rounding differences of any other kernel do too."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return torch.sin(self.linear(x) * 1e6)


class Tame(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(x)


def test_perturbation_changes_float_inputs_by_one_part_in_a_million_and_leaves_integers():
    x, ids = torch.randn(2, 8), torch.arange(4)
    (changed,) = perturbed_samples([(x, ids)], seed=3)
    assert torch.equal(changed[1], ids)
    relative = ((changed[0] - x) / x).abs()
    assert 0 < float(relative.max()) < 10 * PERTURBATION
    assert perturbed_samples([(ids,)]) is None  # nothing to change: not measured


def test_stability_flags_only_outputs_that_move_far_and_counts_nan_as_unstable():
    ref = [[np.ones(4, np.float32), np.ones(4, np.float32), np.ones(4, np.float32)]]
    moved = [[np.ones(4, np.float32) * (1 + 1e-7), np.array([1, -1, 1, -1], np.float32), np.full(4, np.nan, np.float32)]]
    stability = reference_stability(ref, moved, ["steady", "flipped", "nan"])
    assert stability.outputs[0].sqnr_db > UNSTABLE_BELOW_DB
    assert stability.unstable == ("flipped", "nan")
    note = stability.note()
    assert "flipped to" in note and "nan to NaN" in note and "steady" not in note
    assert reference_stability(ref, ref, ["a", "b", "c"]).note() is None


@pytest.mark.parametrize("model,unstable", [(Chaotic(), True), (Tame(), False)])
def test_failed_parity_reports_the_models_own_stability(tmp_path, model, unstable):
    example = (torch.rand(1, 8) + 1.0,)
    # Tame passes with the defaults; an exact --atol makes it fail, for a failure that is the export's.
    result = edge_export.export(
        model.eval(), example_inputs=example, output=tmp_path / "m.tflite", atol=None if unstable else 0.0
    )
    assert result.exit_code == 1
    report = json.loads((tmp_path / "m.report.json").read_text())
    stability = report["validation"]["reference_stability"]
    assert stability["perturbation"] == PERTURBATION and [o["output"] for o in stability["outputs"]] == ["output_0"]
    notes = " ".join(report["validation"]["notes"])
    if unstable:
        assert stability["unstable"] == ["output_0"] and stability["outputs"][0]["sqnr_db"] < 20
        assert "the PyTorch model itself is unstable" in notes
        assert "unstable" in (tmp_path / "m.report.md").read_text()
    else:
        assert stability["unstable"] == [] and stability["outputs"][0]["sqnr_db"] > 100
        assert "unstable" not in notes


def test_passed_parity_has_no_stability_measurement(tmp_path):
    result = edge_export.export(Tame().eval(), example_inputs=(torch.rand(1, 8),), output=tmp_path / "m.tflite")
    assert result.exit_code == 0
    assert "reference_stability" not in json.loads((tmp_path / "m.report.json").read_text())["validation"]
