"""--sensitivity and --mixed-precision end to end, on a model whose int8 parity fails for a known
reason: conv1 writes one channel 3000x larger than the others, so int8's one scale per activation
tensor leaves the other channels a few steps, and conv2 (which reads them) loses them. Raising conv1
and conv2 (and only them) above int8 restores the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from cli_harness import validate_report
from torch import nn

from edge_export import export
from edge_export.errors import UsageError
from edge_export.flatbuffer import load_flatbuffer

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


class OutlierChannelNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16, 10)
        with torch.no_grad():  # the same function, with one activation channel 3000x larger
            self.conv1.weight[0] *= 3000
            self.conv1.bias[0] *= 3000
            self.conv2.weight[:, 0] /= 3000

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.head(x.mean(dim=(2, 3)))


# The flatbuffer backend alone keeps the runs short; the search uses it whatever int8 came from.
COMMON = {"quantize": "int8", "quant_backend": "flatbuffer", "min_sqnr": 30.0}


def _export(tmp_path_factory, name: str, **options):
    out = tmp_path_factory.mktemp(name) / "net.tflite"
    result = export(OutlierChannelNet().eval(), example_inputs=(X,), output=out, **{**COMMON, **options})
    validate_report(json.loads(result.report_json_path.read_text()))
    return result


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    return _export(tmp_path_factory, "plain", mixed_precision="off")


@pytest.fixture(scope="module")
def auto(tmp_path_factory):
    # no --mixed-precision: on the cpu target, auto is the default once an accuracy target is given
    return _export(tmp_path_factory, "auto", sensitivity=True)


def test_int8_alone_misses_the_target(plain):
    assert plain.exit_code == 1
    assert plain.report["validation"]["outputs"][0]["metrics"]["sqnr_db"] < 30
    assert "mixed_precision" not in plain.report and "sensitivity" not in plain.report


def test_auto_meets_the_target_by_promoting_what_the_ranking_names(auto, plain):
    rep = auto.report
    assert auto.exit_code == 0, rep["validation"]
    ranking = rep["sensitivity"]["layers"]
    assert {layer["module_path"] for layer in ranking[:2]} == {"conv1", "conv2"}
    assert ranking[0]["sqnr_db"] < 30 < ranking[2]["sqnr_db"]  # the two stand apart from the rest
    mixed = rep["mixed_precision"]
    # auto on cpu tries int16 activations first: 16 bits hold the 3000x channel, fully integer
    assert mixed["mode"] == "auto" and mixed["precision"] == "int16" and mixed["met"] is True
    promoted = mixed["promoted"]
    # the promoted operators are the head of the sensitivity ranking; of two near-equal ones
    # (TIE_BAND_DB), the cheaper first: conv1 does 5x fewer multiply-accumulates than conv2
    from edge_export.quantization.mixed_precision import TIE_BAND_DB

    assert {p["op_index"] for p in promoted} == {layer["op_index"] for layer in ranking[: len(promoted)]}
    assert {p["module_path"] for p in promoted} == {"conv1", "conv2"}
    near = abs(ranking[0]["sqnr_db"] - ranking[1]["sqnr_db"]) <= TIE_BAND_DB
    assert promoted[0]["module_path"] == ("conv1" if near else ranking[0]["module_path"])
    assert mixed["order"] == f"sensitivity, cheapest first within {TIE_BAND_DB:g} dB (multiply-accumulates)"
    # every step timed on this CPU (the cpu target): the promotions' latency changes add up
    deltas = {p["step"]: p["latency_delta_ms"] for p in promoted}
    assert sum(deltas.values()) == pytest.approx(mixed["latency_ms"] - mixed["int8_latency_ms"], abs=1e-3 * len(deltas))
    assert mixed["int8_sqnr_db"] < 30 <= mixed["sqnr_db"] == promoted[-1]["sqnr_after_db"]
    assert promoted[0]["sqnr_before_db"] == mixed["int8_sqnr_db"]
    assert mixed["size_bytes"] > mixed["int8_size_bytes"] and mixed["latency_ms"] is not None
    assert rep["validation"]["outputs"][0]["metrics"]["sqnr_db"] >= 30
    # int16 promotions: said in the report, and the file says the same
    assert mixed["fully_integer"] is True and rep["quantization"]["fully_integer"] is True
    assert load_flatbuffer(auto.tflite_path).is_fully_integer
    assert rep["quantization"]["backend"] == "flatbuffer"
    md = auto.report_md_path.read_text()
    assert "## Sensitivity" in md and "## Mixed precision (auto: operators raised to int16)" in md


@pytest.mark.slow
def test_auto_raises_to_float_when_int16_activations_cannot_reach_the_target(tmp_path_factory):
    """90 dB: int16 activations (even with split int8 weights) stay below it, so the int16 try misses
    and auto raises operators to float, conv1 and conv2 among them (fast on XNNPACK, not fully
    integer, and said)."""
    result = _export(tmp_path_factory, "float", mixed_precision="auto", min_sqnr=90.0)
    rep, mixed = result.report, result.report["mixed_precision"]
    assert result.exit_code == 0, rep["validation"]
    assert mixed["precision"] == "float" and mixed["met"] is True
    assert "int16 activations were tried first and missed the target" in mixed["reason"]
    assert {"conv1", "conv2"} <= {p["module_path"] for p in mixed["promoted"]}
    assert mixed["order"].endswith("(bytes added)")
    assert mixed["fully_integer"] is False and rep["quantization"]["fully_integer"] is False
    assert any("not fully integer" in w for w in rep["quantization"]["warnings"])
    assert "## Mixed precision (auto: operators raised to float)" in result.report_md_path.read_text()


def test_the_sensitivity_overlay_is_model_explorer_node_data_keyed_by_tensor_names(auto):
    path = auto.report["artifacts"]["sensitivity_overlay"]
    assert path == auto.report["sensitivity"]["overlay"] and path.endswith("net.sensitivity.json")
    data = json.loads(Path(path).read_text())
    assert set(data) == {"results", "thresholds"}
    names = {t.name for t in load_flatbuffer(auto.tflite_path).tensors}
    assert data["results"] and set(data["results"]) <= names
    assert all(set(v) == {"value"} and isinstance(v["value"], float) for v in data["results"].values())
    assert all(set(t) == {"value", "bgColor"} for t in data["thresholds"])
    worst = min(data["results"], key=lambda k: data["results"][k]["value"])
    assert "conv2" in worst or "conv1" in worst


@pytest.mark.slow
def test_int16_keeps_the_model_fully_integer(tmp_path_factory):
    result = _export(tmp_path_factory, "int16", mixed_precision="int16")
    mixed = result.report["mixed_precision"]
    assert result.exit_code == 0 and mixed["met"] and mixed["precision"] == "int16"
    assert {p["module_path"] for p in mixed["promoted"]} == {"conv1", "conv2"}
    assert result.report["quantization"]["fully_integer"] is True
    assert load_flatbuffer(result.tflite_path).is_fully_integer


@pytest.mark.slow
def test_an_unreachable_target_exits_1_with_the_best_model_and_why(tmp_path_factory):
    result = _export(tmp_path_factory, "unreachable", mixed_precision="auto", min_sqnr=200.0)
    mixed = result.report["mixed_precision"]
    assert result.exit_code == 1 and mixed["met"] is False
    assert "was not met even with all" in mixed["reason"] and "kept the best model found" in mixed["reason"]
    from edge_export.quantization.promotion_steps import MISSED_TIE_DB

    best = max(step["sqnr_db"] for step in mixed["steps"])  # kept: the most precise within MISSED_TIE_DB of it
    near = [step for step in mixed["steps"] if step["sqnr_db"] >= best - MISSED_TIE_DB]
    assert mixed["sqnr_db"] == max(near, key=lambda step: (step["promoted"], step["split_weights"]))["sqnr_db"]
    assert result.tflite_path.exists()


@pytest.mark.parametrize(
    "options, message",
    [
        ({"target": "edgetpu", "mixed_precision": "auto"}, "--mixed-precision auto cannot be used with --target edgetpu"),
        ({"quantize": "int8", "mixed_precision": "sometimes"}, "--mixed-precision sometimes is not known"),
        ({"quantize": "fp16", "mixed_precision": "auto"}, "--quantize is fp16"),
        ({"quantize": "fp16", "sensitivity": True}, "--sensitivity ranks operators"),
        ({"target": "micro", "mixed_precision": "auto", "quantize": "int8", "min_sqnr": 30.0}, None),  # accepted
    ],
)
def test_bad_combinations_are_usage_errors(tmp_path, options, message):
    from edge_export.api import ExportOptions, resolve_target_options

    if message is None:
        resolved, _ = resolve_target_options(ExportOptions.from_keywords(**options))
        assert resolved.quantization.mixed_precision == "auto"
        return
    with pytest.raises(UsageError, match=message.replace("-", r"\-")):
        resolve_target_options(ExportOptions.from_keywords(**options))


def test_the_cli_exits_2_for_mixed_precision_on_the_edge_tpu(tmp_path, run_cli):
    src = tmp_path / "net.pt2"
    torch.export.save(torch.export.export(OutlierChannelNet().eval(), (X,)), src)
    for args in (["--target", "edgetpu", "--mixed-precision", "int16"], ["--quantize", "int8", "--mixed-precision", "x"], ["--target", "nowhere", "--mixed-precision", "auto"]):
        res = run_cli(src, *args, "-o", tmp_path / "out.tflite")
        assert res.exit_code == 2, res.stderr
        assert "Traceback" not in res.stderr
    assert not list(tmp_path.glob("out*"))


@pytest.mark.slow
def test_on_the_edge_tpu_a_failed_parity_names_the_layers_that_limit_accuracy(tmp_path_factory):
    result = _export(tmp_path_factory, "edgetpu", target="edgetpu", quant_backend="auto")
    assert result.exit_code == 1
    sensitivity = result.report["sensitivity"]
    assert {layer["module_path"] for layer in sensitivity["layers"][:2]} == {"conv1", "conv2"}
    assert "no int16 or float kernels" in sensitivity["notes"][0] and "conv1 (CONV_2D)" in sensitivity["notes"][0]
    assert "Real --calibration-data" in sensitivity["notes"][0]  # it calibrated on synthetic inputs
    assert "mixed_precision" not in result.report and "sensitivity_overlay" not in result.report["artifacts"]


def test_the_edge_tpu_note_does_not_ask_for_real_data_it_already_has():
    """A trained face detector calibrated on real photos was told to 'pass real --calibration-data'."""
    from edge_export.stages.parity import limiting_note

    given = limiting_note("edgetpu", "conv1 (CONV_2D)", real_data=True)
    assert "already used real data" in given and "--calibration-data" not in given
    assert "quantization-aware training" in given and "--target cpu" in given  # the loss spread over the network
    assert "Real --calibration-data" in limiting_note("edgetpu", "conv1 (CONV_2D)", real_data=False)


@pytest.mark.slow
def test_a_stripped_micro_model_gets_an_overlay_keyed_by_the_names_before_stripping(tmp_path_factory):
    result = _export(tmp_path_factory, "micro", target="micro", sensitivity=True, mixed_precision="off", min_sqnr=None)
    rep = result.report
    data = json.loads(Path(rep["artifacts"]["sensitivity_overlay"]).read_text())
    written = {t.name for t in load_flatbuffer(result.tflite_path).tensors}
    inner = set(data["results"]) - written  # the file keeps only its I/O names
    assert inner
    name_map = json.loads(result.tflite_path.with_suffix(".tensors.json").read_text())
    before = set(json.dumps(name_map).split('"'))  # every string of the map, whatever its layout
    assert inner <= before
    assert any("before --strip-names" in note for note in rep["sensitivity"]["notes"])


def test_validate_ranks_the_reference_and_writes_both_overlays(plain):
    from edge_export import validate

    result = validate(plain.tflite_path, OutlierChannelNet().eval(), example_inputs=(X,), sensitivity=True, per_layer=True)
    rep = result.report
    validate_report(rep)
    assert {layer["module_path"] for layer in rep["sensitivity"]["layers"][:2]} == {"conv1", "conv2"}
    names = {t.name for t in load_flatbuffer(plain.tflite_path).tensors}
    for key, suffix in (("sensitivity_overlay", ".validate.sensitivity.json"), ("per_layer_overlay", ".validate.per_layer.json")):
        path = rep["artifacts"][key]
        assert path.endswith("net" + suffix)
        data = json.loads(Path(path).read_text())
        assert data["results"] and set(data["results"]) <= names and set(data) == {"results", "thresholds"}
    assert rep["sensitivity"]["overlay"] == rep["artifacts"]["sensitivity_overlay"]


def test_validate_refuses_sensitivity_on_a_float_model(artifacts, tmp_path):
    """On the session's fp32 export (copied into tmp_path): any float model is refused, none needs exporting here."""
    from edge_export import validate
    from model_zoo import small_cnn

    with pytest.raises(UsageError, match="ranks operators by what int8 quantization costs"):
        validate(artifacts.fp32, small_cnn(), example_inputs=(X,), sensitivity=True)
    assert artifacts.fp32.parent == tmp_path and not list(tmp_path.glob("*.validate.*"))


def test_promotions_go_one_at_a_time_then_in_doubling_groups():
    from edge_export.quantization.mixed_precision import SINGLE_STEPS
    from edge_export.quantization.promotion_steps import step_sizes as _groups

    assert _groups(3) == [1, 1, 1]
    assert _groups(20) == [1] * SINGLE_STEPS + [2, 4, 6]
    assert sum(_groups(64)) == 64 and len(_groups(64)) == SINGLE_STEPS + 5


def test_a_fused_operator_is_attributed_to_the_module_that_computes_it():
    from edge_export.graph.provenance import operator_module

    # names as litert-torch wrote them for a conv fused with the ReLU that follows it
    stem = (
        "bench_models.ResNet18/torch.nn.modules.container.Sequential_stem/torch.nn.modules.activation.ReLU_2;;"
        "bench_models.ResNet18/torch.nn.modules.container.Sequential_stem/torch.nn.modules.conv.Conv2d_0;1"
    )
    assert (operator_module(stem, "CONV_2D").path, operator_module(stem, "CONV_2D").type_name) == ("stem.0", "Conv2d")
    assert operator_module(stem, "ADD").path == "stem.2"  # no conv computes an ADD: the innermost location
    root = "m.Net;;m.Net/torch.nn.modules.conv.Conv2d_conv2;1"
    assert operator_module(root, "CONV_2D").path == "conv2"
    assert operator_module("serving_default_output_0_output", "FULLY_CONNECTED") is None


class _PooledTwoOutputs(nn.Module):
    """Returns an embedding that the classifier head also reads: quantizing only the MEAN behind it
    gives ai-edge-quantizer a model whose signature names a tensor that is no longer an output."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(16, 10)

    def forward(self, pixel_values):
        embedding = self.pool(self.features(pixel_values)).flatten(1)
        return {"logits": self.classifier(embedding), "embedding": embedding}


def test_an_operator_whose_variant_is_invalid_is_noted_not_a_corrupt_input_error(tmp_path):
    """Regression: the invalid variant was read as a corrupt file, so the whole export exited 2
    ("not a valid LiteRT flatbuffer") although the user's input was fine."""
    torch.manual_seed(0)
    result = export(
        _PooledTwoOutputs().eval(), example_inputs=(torch.randn(1, 3, 16, 16),), output=tmp_path / "two.tflite",
        quantize="int8", quant_backend="flatbuffer", sensitivity=True, samples=3, calibration_samples=16,
    )
    assert result.exit_code == 0
    section = result.report["sensitivity"]
    assert section["layers"] and {row["opcode"] for row in section["layers"]} >= {"CONV_2D"}
    assert any(note.startswith("MEAN") and "not measured" in note for note in section["notes"])


# --- the promotion order (cheapest first among near-equal sensitivities) and each step's latency ---


def _layer(rank: int, op_index: int, sqnr_db: float):
    from edge_export.quantization.sensitivity import LayerSensitivity

    return LayerSensitivity(rank, op_index, "CONV_2D", f"t{op_index}", f"m{op_index}", "Conv2d", None, sqnr_db)


def test_near_equal_sensitivities_promote_the_cheaper_operator_first():
    from edge_export.quantization.mixed_precision import promotion_order

    ranking = [_layer(1, 10, 12.0), _layer(2, 11, 12.4), _layer(3, 12, 12.9), _layer(4, 13, 20.0), _layer(5, 14, 20.5)]
    costs = {10: 900, 11: 100, 12: 500, 13: 50, 14: 10}
    order = [layer.op_index for layer in promotion_order(ranking, costs, band_db=1.0)]
    # 10, 11, 12 are within 1 dB of 10: cheapest first; 13 and 14 form the next band
    assert order == [11, 12, 10, 14, 13]
    # a band is anchored on its first operator, not chained: 12.0 -> 12.6 -> 13.2 is two bands
    chain = [_layer(1, 1, 12.0), _layer(2, 2, 12.6), _layer(3, 3, 13.2)]
    assert [layer.op_index for layer in promotion_order(chain, {1: 3, 2: 2, 3: 1}, band_db=1.0)] == [2, 1, 3]
    # sensitivities that differ by more than the band keep the ranking's order whatever the costs
    assert [layer.op_index for layer in promotion_order(ranking, costs, band_db=0.1)] == [10, 11, 12, 13, 14]
    # equal costs, no costs, or an operator without a cost: the ranking's order
    assert promotion_order(ranking, None) == ranking
    assert [layer.op_index for layer in promotion_order(ranking, dict.fromkeys(costs, 1), band_db=1.0)] == [10, 11, 12, 13, 14]
    assert [layer.op_index for layer in promotion_order(ranking, {11: 5}, band_db=1.0)][:3] == [11, 10, 12]
    # an operator whose quantization costs nothing measurable (inf dB) ties only with another such
    lossless = [_layer(1, 1, 30.0), _layer(2, 2, float("inf")), _layer(3, 3, float("inf"))]
    assert [layer.op_index for layer in promotion_order(lossless, {1: 9, 2: 5, 3: 1})] == [1, 3, 2]


@pytest.fixture(scope="module")
def search_setup():
    """The float model of OutlierChannelNet, ranges calibrated once, its ranking and held-out set:
    what the export's child process builds before the search."""
    from edge_export.config import InputSpec
    from edge_export.conversion.litert import convert_module
    from edge_export.loading.inputs import make_samples
    from edge_export.quantization.synthetic_calibration import synthetic_calibration
    from edge_export.quantization.selection import reference_outputs
    from edge_export.quantization.sensitivity import (
        RecipeQuantizer,
        measure_sensitivity,
    )

    model = OutlierChannelNet().eval()
    spec = InputSpec(tuple(X.shape))
    calibration = synthetic_calibration([spec], 32, seed=1)
    quantizer = RecipeQuantizer(convert_module(model, (X,)), calibration)
    samples = list(calibration.samples[:8])
    ranking = measure_sensitivity(quantizer, samples, reference_outputs(model, samples), module=model).layers
    heldout = [tuple(t.numpy() for t in s) for s in make_samples([spec], 8, 0, (X,))]
    return model, quantizer, ranking, heldout, reference_outputs(model, heldout)


def test_promotion_costs_follow_the_float_models_shapes(search_setup):
    from edge_export.quantization.mixed_precision import promotion_costs

    model, quantizer, ranking, *_ = search_setup
    costs = promotion_costs(quantizer.float_model)
    by_module = {layer.module_path: costs[layer.op_index] for layer in ranking if layer.module_path in ("conv1", "conv2", "conv3")}
    for name, cost in by_module.items():
        conv = getattr(model, name)
        out_channels, in_channels, kh, kw = conv.weight.shape
        assert cost.float_bytes == 3 * conv.weight.numel()  # int8 -> float32 weights; the bias is 4 bytes either way
        assert cost.int16_bytes == 4 * out_channels  # int32 -> int64 biases
        assert cost.macs == X.shape[2] * X.shape[3] * out_channels * in_channels * kh * kw
        assert cost.for_precision("float") == cost.float_bytes and cost.for_precision("int16") == cost.macs
    head = next(costs[layer.op_index] for layer in ranking if layer.opcode == "FULLY_CONNECTED")
    assert head.macs == model.head.weight.numel()


@pytest.mark.parametrize("measure_latency", [True, False])
def test_each_promotion_carries_its_steps_latency_and_they_add_up(search_setup, measure_latency):
    from edge_export.quantization.mixed_precision import (
        AccuracyTarget,
        search_mixed_precision,
    )

    _, quantizer, ranking, heldout, refs = search_setup
    report = search_mixed_precision(
        quantizer, ranking, heldout, refs, AccuracyTarget(30.0), mode="auto", precision="float", measure_latency=measure_latency,
    ).report
    assert report.met and {p.module_path for p in report.promoted} == {"conv1", "conv2"}
    if not measure_latency:  # --no-latency, or a target that does not run on this CPU
        assert report.int8_latency_ms is None and report.latency_ms is None and report.latency_seconds == 0
        assert all(p.latency_delta_ms is None for p in report.promoted) and all(s.latency_ms is None for s in report.steps)
        return
    assert all(s.latency_ms is not None and s.latency_ms > 0 for s in report.steps)
    per_step = {p.step: p.latency_delta_ms for p in report.promoted}  # operators of one step share its delta
    assert sum(per_step.values()) == pytest.approx(report.latency_ms - report.int8_latency_ms, abs=1e-3 * len(per_step))
    timed = {s.promoted: s.latency_ms for s in report.steps}
    assert report.int8_latency_ms == timed[0] and report.latency_ms == timed[len(report.promoted)]
    assert 0 < report.latency_seconds < report.seconds


def test_the_search_promotes_the_cheaper_of_two_near_equal_operators_first(search_setup):
    """conv1 (3 -> 8 channels) and conv2 (8 -> 16) are the two sensitive operators; with a band
    that holds both, the cheaper conv1 goes first, and the target is met with the same two."""
    from edge_export.quantization.mixed_precision import (
        AccuracyTarget,
        promotion_costs,
        search_mixed_precision,
    )

    _, quantizer, ranking, heldout, refs = search_setup
    top = {layer.module_path: layer for layer in ranking[:2]}
    assert [layer.module_path for layer in ranking[:2]] == ["conv2", "conv1"]  # the costlier ranks first
    costs = {i: c.for_precision("float") for i, c in promotion_costs(quantizer.float_model).items()}
    assert costs[top["conv1"].op_index] < costs[top["conv2"].op_index]
    band = abs(top["conv1"].sqnr_db - top["conv2"].sqnr_db) + 0.5
    runs = {
        label: search_mixed_precision(
            quantizer, ranking, heldout, refs, AccuracyTarget(30.0), mode="auto", precision="float",
            measure_latency=False, costs=use, tie_band_db=band,
        ).report
        for label, use in (("ranking", None), ("cost-aware", costs))
    }
    assert runs["cost-aware"].promoted[0].module_path == "conv1"
    assert [p.module_path for p in runs["ranking"].promoted] == [layer.module_path for layer in ranking[:2]]
    assert all(r.met and {p.module_path for p in r.promoted} == {"conv1", "conv2"} for r in runs.values())
    assert runs["cost-aware"].order.startswith("sensitivity, cheapest first") and runs["ranking"].order == "sensitivity"
    # the first step costs the bytes of the operator it promotes: the cheaper one's are fewer
    assert runs["cost-aware"].promoted[0].size_delta_bytes < runs["ranking"].promoted[0].size_delta_bytes


class NormedNet(nn.Module):
    """A LayerNorm between two Linears: its variance is a SQUARED_DIFFERENCE, which
    ai-edge-quantizer has no int16x8 recipe for."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up, self.norm, self.down = nn.Linear(16, 32), nn.LayerNorm(32), nn.Linear(32, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.norm(self.up(x))))


def test_a_layernorm_model_is_fully_integer_at_int16(tmp_path):
    """The LayerNorm's SQUARED_DIFFERENCE, which ai-edge-quantizer cannot raise to int16, is written
    as SUB and MUL first: the search raises every operator and the model stays fully integer (it
    was exit 3, then float inside)."""
    out = tmp_path / "normed.tflite"
    # 90 dB is out of int16x8's reach: the search raises every operator it can.
    result = export(NormedNet().eval(), example_inputs=(torch.randn(1, 4, 16),), output=out,
                    **{**COMMON, "min_sqnr": 90.0}, mixed_precision="int16")
    mixed = result.report["mixed_precision"]
    assert result.exit_code == 1 and mixed["precision"] == "int16" and not mixed["met"]
    norm_ops = sorted(p["opcode"] for p in mixed["promoted"] if p["module_path"] == "norm")
    assert "SUB" in norm_ops and "MUL" in norm_ops and "SQUARED_DIFFERENCE" not in norm_ops
    assert result.report["quantization"]["fully_integer"] is True
    assert "no int16 kernel" not in mixed["reason"]


def test_operators_without_an_int16_recipe_are_not_int16_candidates_and_are_named():
    from types import SimpleNamespace

    from edge_export.quantization.mixed_precision.search import _promotable
    from edge_export.quantization.operator_scopes import has_int16_recipe

    assert has_int16_recipe("FULLY_CONNECTED") and not has_int16_recipe("SQUARED_DIFFERENCE")
    assert not has_int16_recipe("NOT_AN_OPERATOR")
    layers = [_layer(1, 0, 10.0), _layer(2, 1, 20.0), _layer(3, 2, 30.0)]
    by_index = {0: SimpleNamespace(opcode="SQUARED_DIFFERENCE"), 1: SimpleNamespace(opcode="CONV_2D"),
                2: SimpleNamespace(opcode="SQUARED_DIFFERENCE")}
    kept, clause = _promotable(layers, by_index, "int16")
    assert kept == [layers[1]] and "2 operator(s) have no int16 kernel in ai-edge-quantizer: SQUARED_DIFFERENCE x2" in clause
    assert _promotable(layers, by_index, "float") == (layers, "")  # float takes every operator
    # a target without an int16 kernel for an operator (TFLite Micro's MIRROR_PAD) keeps it int8
    by_index[1] = SimpleNamespace(opcode="MIRROR_PAD")
    kept, clause = _promotable(layers, by_index, "int16", frozenset({"CONV_2D"}))
    assert kept == [] and "1 operator(s) have no int16 kernel on the target: MIRROR_PAD x1 (kept int8)" in clause


def test_squared_difference_becomes_sub_and_mul_with_the_same_float_values():
    import numpy as np

    from edge_export.conversion.litert import convert_module
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.passes.flatbuffer import run_flatbuffer_passes, split_squared_difference_pass
    from edge_export.runtime.interpreter import TFLiteRunner

    module = NormedNet().eval()
    x = torch.randn(2, 4, 16, generator=torch.Generator().manual_seed(1))
    before = read_flatbuffer(convert_module(module, (x,)))
    after = run_flatbuffer_passes(before, [split_squared_difference_pass]).model
    assert "SQUARED_DIFFERENCE" in before.op_counts and "SQUARED_DIFFERENCE" not in after.op_counts
    assert after.op_counts["SUB"] == before.op_counts.get("SUB", 0) + 1
    assert after.op_counts["MUL"] == before.op_counts.get("MUL", 0) + 1
    feed = [x.numpy()]
    assert np.array_equal(TFLiteRunner(before).run(feed)[0], TFLiteRunner(after).run(feed)[0])
    assert not run_flatbuffer_passes(after, [split_squared_difference_pass]).modified_by  # nothing left to do


def test_a_search_that_precision_cannot_move_says_the_ranges_limit_it():
    from edge_export.quantization.mixed_precision.split_phase import ranges_limit as _ranges_limit
    from edge_export.quantization.promotion_steps import TargetCheck

    int8 = TargetCheck(6.5, 0.9, None, ("sqnr",))
    assert "the calibrated activation ranges do" in _ranges_limit(int8, TargetCheck(7.0, 0.9, None, ("sqnr",)))
    assert _ranges_limit(int8, TargetCheck(24.0, 0.99, None, ("sqnr",))) == ""  # precision helped: say nothing more
    assert _ranges_limit(TargetCheck(float("nan"), 0.9, None, ("sqnr",)), TargetCheck(7.0, 0.9, None, ("sqnr",))) == ""


def test_an_int16_search_starts_from_a_fully_integer_model(monkeypatch):
    """--mixed-precision int16 keeps the model fully integer: auto's backend choice prefers a fully
    integer result for it (a float-inside PT2E model with better parity left nothing to search)."""
    from types import SimpleNamespace

    import edge_export.quantization as quantization
    from edge_export.options import ExportOptions
    from edge_export.quantization.budget import TimeBudget
    from edge_export.stages import convert
    from edge_export.stages.clock import StageClock
    from edge_export.config import InputSpec
    from edge_export.quantization.synthetic_calibration import synthetic_calibration
    from edge_export.targets.registry import get_target

    asked: list[bool] = []
    monkeypatch.setattr(quantization, "quantize_model", lambda *a, **kw: asked.append(a[2].require_full_integer))
    prepared = SimpleNamespace(module=None, example=(), plan=SimpleNamespace(inputs=()))
    calibration = synthetic_calibration([InputSpec((1, 4))], 2, seed=0)
    for mode, wanted in (("int16", True), ("auto", False), ("off", False)):
        options = ExportOptions.from_keywords(quantize="int8", min_sqnr=30.0, mixed_precision=mode)
        cpu = get_target("cpu")
        wants = convert.mixed_precision_plan(options, cpu)[1] == "int16"
        convert._run_quantizer(prepared, options, cpu, calibration, None, TimeBudget(None), StageClock(None), wants_integer=wants)
    assert asked == [True, False, False]


def test_the_accuracy_target_is_judged_on_what_parity_runs(built_artifacts):
    """The search's target check computes exactly what the export's parity computes (LiteRT with
    XNNPACK), not the built-in kernels, whose int8 rounding differs (a met search, a failed export)."""
    import numpy as np

    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.quantization.sensitivity import parity_outputs
    from edge_export.targets.base import litert_runner

    data = built_artifacts.int8.read_bytes()
    samples = [(np.random.default_rng(k).standard_normal((1, 3, 16, 16)).astype(np.float32),) for k in range(3)]
    runner = litert_runner(read_flatbuffer(data))
    for ours, sample in zip(parity_outputs(data, samples), samples):
        for a, b in zip(ours, runner.run(list(sample))):
            np.testing.assert_array_equal(a, b)


def test_a_search_the_budget_ended_early_claims_nothing_of_all_operators(search_setup):
    """On the zoo's PoolFormer the budget ended the int16 search after the int8 model alone, and the
    reason said "not met even with all 96 operators at int16 ... raising precision gained 0.0 dB, so
    precision does not limit it", while --quantize int16x8 reads 43 dB: nothing measured said that."""
    from edge_export.quantization.budget import TimeBudget
    from edge_export.quantization.mixed_precision import AccuracyTarget, search_mixed_precision

    _, quantizer, ranking, heldout, refs = search_setup
    report = search_mixed_precision(
        quantizer, ranking, heldout, refs, AccuracyTarget(200.0), mode="int16", precision="int16",
        measure_latency=False, budget=TimeBudget(1e-6),
    ).report
    assert not report.met
    assert "was not met by the 1 model(s) measured, the largest with 0 of" in report.reason
    assert "even with all" not in report.reason and "precision does not limit it" not in report.reason
    assert "the time budget (1e-06 s) ended the search" in report.reason


class _StepsBudget:
    """A time budget that allows ``n`` steps and then is spent (TimeBudget's interface)."""

    def __new__(cls, n: int):
        from edge_export.quantization.budget import TimeBudget

        class Counted(TimeBudget):
            def spent(self) -> bool:
                self.left = getattr(self, "left", n) - 1
                return self.left < 0

        return Counted(300.0)


def test_an_int16_search_measures_every_operator_at_int16_first(search_setup):
    """Unreachable even with every operator at int16: no smaller prefix is measured (weight splitting
    starts from it). Reachable, but the budget ends the search after that first model: it is kept,
    meeting the target and fully integer, instead of the int8 model."""
    from edge_export.quantization.mixed_precision import AccuracyTarget, search_mixed_precision

    _, quantizer, ranking, heldout, refs = search_setup
    unreachable = search_mixed_precision(
        quantizer, ranking, heldout, refs, AccuracyTarget(200.0), mode="int16", precision="int16", measure_latency=False,
    ).report
    prefixes = sorted({s.promoted for s in unreachable.steps if not s.split_weights})
    assert not unreachable.met and "even with all" in unreachable.reason
    assert prefixes == [0, prefixes[-1]] and prefixes[-1] > 1  # int8, then every candidate at int16
    target = AccuracyTarget(unreachable.int8_sqnr_db + 3.0)  # int8 misses it; every operator at int16 is needed
    cut = search_mixed_precision(
        quantizer, ranking, heldout, refs, target, mode="int16", precision="int16", measure_latency=False, budget=_StepsBudget(1),
    ).report
    all_int16 = next(s for s in unreachable.steps if s.promoted == prefixes[-1] and not s.split_weights)
    assert all_int16.sqnr_db >= target.min_sqnr_db  # the premise: reachable at int16
    assert cut.met and cut.sqnr_db == all_int16.sqnr_db and "ended the search" in cut.reason
    assert sorted({s.promoted for s in cut.steps}) == [0, prefixes[-1]]


def test_every_operator_at_int16_is_measured_before_the_ranking(search_setup):
    """The zoo's MiniLM: ranking its 109 operators spent the 300 s budget, and the int16 search then
    measured the int8 model alone. Every operator at int16 needs no ranking, so it is measured first
    and kept when the ranking spends the budget; the operators the ranking left out stay candidates."""
    from edge_export.quantization.budget import TimeBudget
    from edge_export.quantization.mixed_precision import AccuracyTarget, search_mixed_precision

    _, quantizer, ranking, heldout, refs = search_setup

    class Spendable(TimeBudget):
        over = False

        def spent(self) -> bool:
            return self.over

    full = search_mixed_precision(
        quantizer, ranking, heldout, refs, AccuracyTarget(200.0), mode="int16", precision="int16", measure_latency=False,
    ).report
    every = max(s.promoted for s in full.steps)
    budget, calls = Spendable(300.0), []

    def ranking_that_spends_the_budget():
        calls.append(True)
        budget.over = True
        return ranking[:1]  # the budget ended the ranking after one operator

    target = AccuracyTarget(full.int8_sqnr_db + 3.0)
    cut = search_mixed_precision(
        quantizer, ranking_that_spends_the_budget, heldout, refs, target, mode="int16", precision="int16",
        measure_latency=False, budget=budget,
    ).report
    assert calls == [True]
    assert sorted({s.promoted for s in cut.steps}) == [0, every]  # int8, then every operator, then the ranking
    assert cut.met and len({p.op_index for p in cut.promoted}) == every
    assert cut.reason.startswith(f"promoted all {every} operators")
    assert f"ended the search: promoting fewer than all {every} operators not tried" in cut.reason


def test_a_met_int8_model_needs_no_ranking(search_setup):
    from edge_export.quantization.mixed_precision import AccuracyTarget, search_mixed_precision

    _, quantizer, _, heldout, refs = search_setup

    def no_ranking():
        raise AssertionError("ranked although int8 meets the target")

    search = search_mixed_precision(
        quantizer, no_ranking, heldout, refs, AccuracyTarget(-100.0), mode="int16", precision="int16", measure_latency=False,
    )
    report = search.report
    assert report.met and not report.promoted
    # the export's own model missed the target (the search ran): the int8 model measured here is kept
    assert search.model_bytes == search.int8_bytes is not None
    assert report.reason.startswith("the int8 model meets the target") and report.reason.endswith("nothing promoted")


def test_a_search_the_budget_ended_before_splitting_weights_says_so(search_setup):
    """The zoo's CvT: every operator at int16 missed the target, and the budget ended the search
    before the weight splitting; the reason named neither the budget nor the phase."""
    from edge_export.quantization.mixed_precision import AccuracyTarget, search_mixed_precision

    _, quantizer, ranking, heldout, refs = search_setup
    report = search_mixed_precision(
        quantizer, ranking, heldout, refs, AccuracyTarget(200.0), mode="int16", precision="int16", measure_latency=False,
        budget=_StepsBudget(1),
    ).report
    assert not report.met and not any(s.split_weights for s in report.steps)
    assert "ended the search before splitting int8 weights" in report.reason
