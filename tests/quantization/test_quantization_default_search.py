"""A plain ``--quantize int8`` on cpu whose model misses its own gate raises the operators that limit
it to int16 activations, and stays fully integer (issue #39: a trained VAD and text encoder read
6-18 dB at int8 and the remedy was never tried unless asked); a model that meets the gate is kept
as it is, and ``--mixed-precision off`` keeps every activation int8."""

from __future__ import annotations

import json

import pytest
import torch
from cli_harness import validate_report
from test_quantization_int16_first import OutlierEncoder

from edge_export import export
from edge_export.flatbuffer import load_flatbuffer
from edge_export.options import ExportOptions
from edge_export.stages.convert import keeps_search_margin, search_target
from edge_export.stages.target_options import mixed_precision_plan
from edge_export.targets.base import get_target


@pytest.mark.parametrize(
    "keywords, target, plan",
    [
        ({"quantize": "int8"}, "cpu", ("default", "int16")),  # int16 only: int8 promises an integer model
        ({"quantize": "int8", "min_sqnr": 30.0}, "cpu", ("auto", "float")),  # asked: float allowed
        ({"quantize": "int8", "mixed_precision": "off"}, "cpu", (None, "")),
        ({"quantize": "int8"}, "micro", (None, "")),  # searches only when asked, as before
        ({"quantize": "int8"}, "edgetpu", (None, "")),  # nothing to raise an operator to
        ({"quantize": "int16x8"}, "cpu", (None, "")),
    ],
)
def test_which_exports_run_the_default_search(keywords, target, plan):
    assert mixed_precision_plan(ExportOptions.from_keywords(target=target, **keywords), get_target(target)) == plan


def test_the_default_search_aims_above_the_gate_and_starts_only_below_it():
    from types import SimpleNamespace

    options = ExportOptions.from_keywords(quantize="int8")
    target = search_target(options, "default")
    assert (target.min_sqnr_db, target.min_cosine, target.min_top1) == (25.0, 0.99, None)  # int8's 20 dB + 5
    # the search starts below its own target on the calibration inputs, the quantizer's own: a model
    # just over the gate there can be under it on unseen inputs
    assert keeps_search_margin(SimpleNamespace(sqnr_db=25.0, cosine=0.995), options)
    assert not keeps_search_margin(SimpleNamespace(sqnr_db=21.0, cosine=0.995), options)
    assert not keeps_search_margin(SimpleNamespace(sqnr_db=30.0, cosine=0.98), options)
    assert keeps_search_margin(SimpleNamespace(sqnr_db=None, cosine=None), options)  # not measured: not searched
    assert keeps_search_margin(SimpleNamespace(sqnr_db=float("nan"), cosine=0.999), options) is True  # NaN < 25 is False


@pytest.mark.parametrize(
    "declared", [{"output_kinds": "classification"}, {"output_kinds": ["logits=classification"]}, {"labels": "classes.txt"}]
)
def test_a_declared_classifier_is_searched_to_30_db_and_keeps_the_gate_at_20(declared):
    """Top-1 flips on ambiguous inputs well above the gate (EfficientNet-Lite0 kept at 25 dB agreed on
    0.906-0.938 of held-out crops, at 30 dB on 0.969): a classifier's default search aims at 30 dB,
    starts below it, and a model it keeps short of 30 dB is still judged against int8's own 20 dB."""
    from types import SimpleNamespace

    from edge_export.quantization.mixed_precision.report import default_search_kept

    options = ExportOptions.from_keywords(quantize="int8", **declared)
    target = search_target(options, "default")
    assert (target.min_sqnr_db, target.margin_db, target.gate_sqnr_db()) == (30.0, 10.0, 20.0)
    # on calibration samples (real data), the quantizer's own, 1.5 dB more; the gate stays
    on_calibration = search_target(options, "default", calibrated_inputs=True)
    assert (on_calibration.min_sqnr_db, on_calibration.margin_db, on_calibration.gate_sqnr_db()) == (31.5, 11.5, 20.0)
    assert not keeps_search_margin(SimpleNamespace(sqnr_db=27.0, cosine=0.999), options)
    assert keeps_search_margin(SimpleNamespace(sqnr_db=30.5, cosine=0.999), options)
    short = SimpleNamespace(met=False, target=target, sqnr_db=24.0, cosine=0.995, int8_sqnr_db=18.0, int8_cosine=0.995)
    assert default_search_kept(short)  # meets the 20 dB gate the int8 model missed
    assert not default_search_kept(SimpleNamespace(**{**vars(short), "int8_sqnr_db": 21.0}))
    # undeclared outputs (or embeddings) keep the 5 dB margin
    for other in ({}, {"output_kinds": "embedding"}):
        assert search_target(ExportOptions.from_keywords(quantize="int8", **other), "default").min_sqnr_db == 25.0


def test_labels_inside_the_calibration_data_make_the_search_a_classifiers():
    """An .npz with a labels array (or a class-folder tree) says the model classifies, with no
    --labels or --output-kind: the export passes that on, and the target is the classifier's."""
    from types import SimpleNamespace

    from edge_export.stages.convert import reads_decisions

    options = ExportOptions.from_keywords(quantize="int8")
    decisions = reads_decisions(SimpleNamespace(model=None), labels=object())
    assert search_target(options, "default", decisions).min_sqnr_db == 30.0
    assert not keeps_search_margin(SimpleNamespace(sqnr_db=27.0, cosine=0.999), options, decisions)
    assert keeps_search_margin(SimpleNamespace(sqnr_db=27.0, cosine=0.999), options)


@pytest.fixture(scope="module")
def encoder_exports(tmp_path_factory):
    from edge_export.quantization import weight_rounding

    x = torch.randn(1, 16, 32, generator=torch.Generator().manual_seed(1))
    out = {}
    for name, extra in (("plain", {}), ("off", {"mixed_precision": "off"})):
        folder = tmp_path_factory.mktemp(name)
        calls = folder / "round_weights_calls"
        real = weight_rounding.round_weights

        def counted(*args, **kwargs):  # in whichever forked child rounds: one line per rounding
            with calls.open("a") as f:
                f.write("round_weights\n")
            return real(*args, **kwargs)

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(weight_rounding, "round_weights", counted)
            # no host latency: timed or not, the search promotes the same operators (it only reports the timings)
            result = export(OutlierEncoder().eval(), example_inputs=(x,), output=folder / "enc.tflite",
                            quantize="int8", quant_backend="flatbuffer", host_latency=False, **extra)
        out[name] = result, validate_report(json.loads(result.report_json_path.read_text()))
        out[name + "_roundings"] = len(calls.read_text().splitlines()) if calls.exists() else 0
    return out


@pytest.mark.slow
def test_a_plain_int8_export_that_misses_its_gate_gets_int16_activations_and_says_so(encoder_exports):
    result, report = encoder_exports["plain"]
    mixed = report["mixed_precision"]
    assert result.exit_code == 0, report["validation"]
    assert mixed["mode"] == "default" and mixed["precision"] == "int16" and mixed["met"] is True
    assert mixed["int8_sqnr_db"] < 10 and mixed["sqnr_db"] >= 25
    assert mixed["promoted"] and all(p["precision"].startswith("int16") for p in mixed["promoted"])
    assert report["quantization"]["fully_integer"] is True and load_flatbuffer(result.tflite_path).is_fully_integer
    note = next(n for n in report["validation"]["notes"] if n.startswith("The all-int8 model missed"))
    assert "raised to int16 activations" in note and "--mixed-precision off" in note
    assert "raised to int16 activations" in result.report_md_path.read_text()


@pytest.mark.slow
def test_the_kept_search_models_widened_int16_tensors_are_named(encoder_exports):
    """The report names the tensors the kept model's ranges widened (int16_headroom.py), each an
    int16 tensor of the written model, or its float input or output (whose int16 copy inside got
    the range); the all-int8 export has none."""
    result, report = encoder_exports["plain"]
    headroom = report["quantization"]["int16_headroom"]
    model = load_flatbuffer(result.tflite_path)
    int16 = {t.name for t in model.tensors if t.dtype == "int16"}
    io = {model.tensors[i].name for i in (*model.inputs, *model.outputs)}
    assert headroom and {h["tensor"] for h in headroom} <= int16 | io
    assert {h["tensor"] for h in headroom} & int16
    assert all(1.0 < h["factor"] <= 2.0 for h in headroom)
    assert encoder_exports["off"][1]["quantization"]["int16_headroom"] == []


@pytest.mark.slow
def test_the_search_reuses_the_backends_weight_rounding(encoder_exports):
    """The filters are rounded once per export: the search's recipes take the backend's rounding."""
    _, report = encoder_exports["plain"]
    assert report["mixed_precision"]["mode"] == "default" and report["quantization"]["weight_rounding"] == "gptq"
    assert encoder_exports["plain_roundings"] == 1 and encoder_exports["off_roundings"] == 1
    assert "rounding" not in report["quantization"]  # the object is not reported, its method is


@pytest.mark.slow
def test_mixed_precision_off_keeps_every_activation_int8_and_fails(encoder_exports):
    result, report = encoder_exports["off"]
    assert result.exit_code == 1
    assert report.get("mixed_precision") is None
    assert not any(n.startswith("The all-int8 model missed") for n in report["validation"]["notes"])


@pytest.mark.parametrize(
    ("sqnr", "cosine", "int8_sqnr", "kept"),
    [(26.0, 0.999, 10.0, True), (22.0, 0.999, 10.0, True), (22.0, 0.95, 10.0, True), (22.0, 0.95, 17.0, False),
     (19.0, 0.999, 10.0, True), (15.0, 0.999, 10.0, False), (float("nan"), 0.999, 10.0, False), (24.0, 0.999, 21.0, False),
     (26.0, 0.999, 21.0, True)],
)
def test_a_default_search_short_of_its_margin_is_kept_when_it_passes_the_gate(sqnr, cosine, int8_sqnr, kept):
    """The default search aims at the gate + 5 dB. A model that misses that but passes the gate
    itself (20 dB, cosine 0.99) replaces an int8 model that failed it, and its note says how far it
    got; so does one under the gate that reads 6 dB or more above the int8 model (parity judges it on
    inputs the search did not read); a smaller gain (or NaN) does not, nor does a model that misses
    when the int8 model passed the gate (the faster model, passing too, is kept)."""
    from dataclasses import replace

    from test_quantization_int16_first import _found

    from edge_export.quantization.mixed_precision import DEFAULT_SEARCH, AccuracyTarget
    from edge_export.quantization.mixed_precision.driver import _kept_model
    from edge_export.quantization.mixed_precision.report import default_search_kept
    from edge_export.stages.parity import default_search_note

    found = _found("int16", sqnr, met=sqnr >= 25.0)
    report = replace(found.report, mode=DEFAULT_SEARCH, target=AccuracyTarget(25.0, 0.99, margin_db=5.0), cosine=cosine, fully_integer=True,
                     int8_sqnr_db=int8_sqnr, int8_cosine=0.999)
    assert default_search_kept(report) is kept
    note = default_search_note(report)
    if not kept:
        assert note is None
        base = object()
        assert _kept_model(base, replace(found, report=report), None, None)[0] is base
    elif report.met:
        assert "to reach SQNR >= 25 dB" in note
    elif sqnr >= 20.0 and cosine >= 0.99:
        assert "reaching 22.0 dB on the search's inputs: short of its target" in note and "past the gate the int8 model missed" in note
    else:
        assert f"reaching {sqnr:.1f} dB on the search's inputs" in note and f"under the gate too, but {sqnr - int8_sqnr:.1f} dB above" in note
