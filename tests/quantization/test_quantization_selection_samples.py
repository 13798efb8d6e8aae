"""The mixed-precision search chooses on inputs that parity's verdict does not read: the verdict
checks the model chosen, not the measure it was chosen by (stages/samples.selection_samples)."""

from __future__ import annotations

import numpy as np
import torch

from edge_export.config import InputSpec
from edge_export.options import ExportOptions
from edge_export.stages.samples import calibration_sets, parity_samples, selection_samples

SPECS = [InputSpec(name="x", shape=(1, 3, 8, 8), dtype="float32")]
EXAMPLE = (torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(0)),)


def _same(a: tuple, b: tuple) -> bool:
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


def _overlap(chosen: list[tuple], verdict: list[tuple]) -> int:
    return sum(any(_same(c, v) for v in verdict) for c in chosen)


def test_without_real_data_the_search_draws_its_own_seeded_inputs():
    options = ExportOptions.from_keywords(quantize="int8", samples=6)
    verdict = parity_samples(SPECS, options, EXAMPLE)
    chosen = selection_samples(SPECS, options, EXAMPLE, None, None)
    assert len(chosen) == 6 and _overlap(chosen, verdict) == 0
    assert not any(_same(c, EXAMPLE) for c in chosen)  # the example input is parity's first sample
    again = selection_samples(SPECS, options, EXAMPLE, None, None)
    assert all(_same(a, b) for a, b in zip(chosen, again))  # seeded: the same search each run


def test_with_real_data_the_search_reads_calibration_samples_and_none_held_out(tmp_path):
    # sample i is filled with i: which sample went where can be read off its values
    data = np.stack([np.full((1, 3, 8, 8), i, np.float32) for i in range(40)])
    np.savez(tmp_path / "data.npz", x=data)
    options = ExportOptions.from_keywords(quantize="int8", calibration_data=tmp_path / "data.npz", samples=6)
    calibration, heldout = calibration_sets(options, SPECS, EXAMPLE)
    chosen = selection_samples(SPECS, options, EXAMPLE, calibration, heldout)
    held = {int(s[0].flatten()[0]) for s in heldout}
    picked = [int(np.asarray(s[0]).flatten()[0]) for s in chosen]
    calibrated = [int(s[0].flatten()[0]) for s in calibration.samples]
    assert len(picked) == 6 and not held & set(picked)
    # past the 8 samples the sensitivity ranking reads, so the search's inputs are new to it too,
    # and spread over the rest (data comes in order: by class, by time), first to last
    assert picked == [calibrated[i] for i in (8, 13, 18, 23, 28, 33)] and picked[-1] == calibrated[-1]


def test_evenly_spaced_indices_are_distinct_and_bounded():
    from edge_export.stages.samples import evenly_spaced

    assert evenly_spaced(22, 6) == [0, 4, 8, 13, 17, 21]
    assert evenly_spaced(3, 6) == [0, 1, 2] and evenly_spaced(5, 1) == [0]
    assert evenly_spaced(0, 6) == [] and evenly_spaced(5, 0) == []
    for available in range(1, 40):
        for count in range(1, 20):
            got = evenly_spaced(available, count)
            assert len(got) == len(set(got)) == min(available, count) and all(0 <= i < available for i in got)


def test_a_small_calibration_set_gives_what_it_has_and_still_none_held_out(tmp_path):
    data = np.stack([np.full((1, 3, 8, 8), i, np.float32) for i in range(5)])
    np.savez(tmp_path / "data.npz", x=data)
    options = ExportOptions.from_keywords(quantize="int8", calibration_data=tmp_path / "data.npz")
    calibration, heldout = calibration_sets(options, SPECS, EXAMPLE)
    chosen = selection_samples(SPECS, options, EXAMPLE, calibration, heldout)
    held = {int(s[0].flatten()[0]) for s in heldout}
    picked = {int(np.asarray(s[0]).flatten()[0]) for s in chosen}
    assert len(chosen) == len(calibration.samples) == 4 and not held & picked


def test_an_export_searches_on_other_inputs_than_its_verdict(monkeypatch, tmp_path):
    """End to end: the inputs the sensitivity ranking and search receive as theirs, and the inputs
    parity checks, captured where the stages hand them over."""
    import edge_export
    import edge_export.quantization.mixed_precision as mixed_precision
    import edge_export.stages.parity as parity_stage
    from model_zoo import small_cnn

    searched, verdict = [], []
    search = mixed_precision.run_sensitivity_and_mixed_precision

    def spy_search(base, **kwargs):
        searched.extend(kwargs["heldout"])
        return search(base, **kwargs)

    check = parity_stage.check_parity

    def spy_check(*args, **kwargs):
        verdict.extend(kwargs["samples"])
        return check(*args, **kwargs)

    monkeypatch.setattr(mixed_precision, "run_sensitivity_and_mixed_precision", spy_search)
    monkeypatch.setattr(parity_stage, "check_parity", spy_check)
    data = np.stack([np.full((1, 3, 16, 16), i / 40, np.float32) for i in range(40)])
    np.savez(tmp_path / "data.npz", x=data)
    # an nn.Module runs in this process (an archive would be confined in a child, out of the spies' reach)
    result = edge_export.export(small_cnn(), example_inputs=(torch.zeros(1, 3, 16, 16),), output=tmp_path / "cnn.tflite",
                                quantize="int8", quant_backend="flatbuffer", sensitivity=True,
                                calibration_data=tmp_path / "data.npz", samples=4)
    assert result.exit_code == 0
    searched_values = {round(float(s[0].flatten()[0]) * 40) for s in searched}
    verdict_values = {round(float(s[0].flatten()[0]) * 40) for s in verdict}
    assert len(searched_values) == 4 and len(verdict_values) == 4 and not searched_values & verdict_values
