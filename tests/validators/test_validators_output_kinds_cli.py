"""Output kinds end to end: an embedding is judged by cosine and neighbours, a classifier by top-1
when its name, --output-kind or --labels says so, and a NaN output fails. Tiny models, few samples."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

from cli_harness import read_report, validate_report

X = torch.randn(1, 32, generator=torch.Generator().manual_seed(0))


class Encoder(nn.Module):
    """A sentence-encoder stand-in: one L2-normalised [1, 64] vector, like a pooled embedding."""

    def __init__(self, as_dict: bool) -> None:
        super().__init__()
        self.as_dict = as_dict
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64))

    def forward(self, x: torch.Tensor):
        e = nn.functional.normalize(self.net(x), dim=-1)
        return {"embedding": e} if self.as_dict else e


class Classifier(nn.Module):
    def __init__(self, as_dict: bool) -> None:
        super().__init__()
        self.as_dict = as_dict
        self.net = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 10))

    def forward(self, x: torch.Tensor):
        logits = self.net(x)
        return {"logits": logits} if self.as_dict else logits


def _save(model: nn.Module, path):
    torch.export.save(torch.export.export(model.eval(), (X,)), path)
    return path


def _checks(report: dict, index: int = 0) -> dict:
    return {c["metric"]: c for c in report["validation"]["outputs"][index]["checks"]}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("kinds")
    torch.manual_seed(0)
    encoder = Encoder(as_dict=True)
    perturbed = copy.deepcopy(encoder)
    with torch.no_grad():  # one layer's weights moved by about their own spread
        w = perturbed.net[2].weight
        w.add_(torch.randn(w.shape, generator=torch.Generator().manual_seed(1)) * w.std())
    bare_encoder = Encoder(as_dict=False)
    bare_encoder.load_state_dict(encoder.state_dict())
    torch.manual_seed(0)
    classifier = Classifier(as_dict=False)
    return {
        "folder": folder,
        "encoder": _save(encoder, folder / "encoder.pt2"),
        "perturbed": _save(perturbed, folder / "perturbed.pt2"),
        "bare_encoder": _save(bare_encoder, folder / "bare_encoder.pt2"),
        "classifier": _save(classifier, folder / "classifier.pt2"),
        "dict_classifier": _save(Classifier(as_dict=True), folder / "dict_classifier.pt2"),
    }


def test_embedding_passes_dynamic_int8_and_a_perturbed_layer_fails_on_cosine_not_top1(models, run_cli):
    out = models["folder"] / "encoder.tflite"
    res = run_cli(models["encoder"], "--quantize", "dynamic-int8", "-o", out)
    assert res.exit_code == 0, res.stdout + res.stderr
    rep = read_report(out)
    o = rep["validation"]["outputs"][0]
    assert (o["name"], o["kind"], o["kind_source"]) == ("embedding", "embedding", "name")
    checks = _checks(rep)
    assert set(checks) == {"worst_sample_cosine", "neighbour_agreement"}  # no top-1 on a [1, 64] vector
    assert checks["worst_sample_cosine"]["value"] >= 0.99 and checks["neighbour_agreement"]["value"] >= 0.75
    # the exported file against a reference with one layer perturbed
    res = run_cli("validate", out, "--reference", models["perturbed"], "--report", models["folder"] / "perturbed")
    assert res.exit_code == 1, res.stdout + res.stderr
    rep = validate_report(json.loads((models["folder"] / "perturbed.report.json").read_text()))
    failed = set(rep["validation"]["worst"]["failed_checks"])
    assert failed and failed <= {"worst_sample_cosine", "neighbour_agreement"}
    assert "top1_agreement" not in _checks(rep) and rep["validation"]["outputs"][0]["metrics"]["top1_agreement"] is None
    assert "(embedding)" in res.stdout


def test_int8_embedding_declared_with_output_kind(models, run_cli):
    out = models["folder"] / "bare_encoder.tflite"
    res = run_cli(
        models["bare_encoder"], "--quantize", "int8", "--quant-backend", "flatbuffer", "--calibration-samples", "16",
        "--output-kind", "embedding", "--samples", "6", "-o", out,
    )
    assert res.exit_code == 0, res.stdout + res.stderr
    rep = read_report(out)
    o = rep["validation"]["outputs"][0]
    assert (o["name"], o["kind"], o["kind_source"]) == ("output_0", "embedding", "option")
    assert set(_checks(rep)) == {"worst_sample_cosine", "neighbour_agreement"} and rep["verdict"] == "passed"
    assert "| <code>output\\_0</code> | embedding (option) |" in out.with_suffix(".report.md").read_text()


@pytest.fixture(scope="module")
def classifier_tflite(models):
    import edge_export

    out = models["folder"] / "classifier.tflite"
    edge_export.export(models["classifier"], output=out, quantize="dynamic-int8", validate=False)
    return out


def test_unnamed_classifier_gets_top1_only_when_told(models, classifier_tflite, run_cli, tmp_path):
    def check(*extra):
        res = run_cli(
            "validate", classifier_tflite, "--reference", models["classifier"], "--samples", "4", *extra,
            "--report", tmp_path / "r",
        )
        rep = validate_report(json.loads((tmp_path / "r.report.json").read_text()))
        return res, rep

    res, rep = check()
    assert res.exit_code == 0, res.stderr
    assert rep["validation"]["outputs"][0]["kind"] == "regression" and "top1_agreement" not in _checks(rep)
    # the report says how to ask for top-1, since nothing told it what the output is
    assert any("--output-kind NAME=classification adds top-1" in n for n in rep["validation"]["notes"])
    assert "note: output_0 judged as regression (no option, name or labels says what it is)" in res.stdout
    res, rep = check("--output-kind", "classification")
    assert res.exit_code == 0, res.stderr
    assert rep["validation"]["outputs"][0]["kind_source"] == "option" and rep["validation"]["notes"] == []
    assert {"top1_agreement", "top5_agreement"} <= set(_checks(rep))
    labels = tmp_path / "labels.txt"
    labels.write_text("".join(f"digit {i}\n" for i in range(10)))
    res, rep = check("--labels", labels)
    assert res.exit_code == 0, res.stderr
    o = rep["validation"]["outputs"][0]
    assert (o["kind"], o["kind_source"], o["labels"]["count"]) == ("classification", "labels", 10)
    assert _checks(rep)["top1_agreement"]["passed"] is True


def test_labels_that_do_not_match_the_classes_exit_2(models, classifier_tflite, run_cli, tmp_path):
    labels = tmp_path / "nine.txt"
    labels.write_text("".join(f"digit {i}\n" for i in range(9)))
    res = run_cli("validate", classifier_tflite, "--reference", models["classifier"], "--labels", labels, "--report", tmp_path / "r")
    assert res.exit_code == 2
    assert "has 9 labels, but the output 'output_0' has 10 classes" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "r.report.json").exists()


def test_classifier_named_logits_gets_top1_without_options(models, run_cli):
    out = models["folder"] / "dict_classifier.tflite"
    res = run_cli(models["dict_classifier"], "--quantize", "dynamic-int8", "--samples", "4", "-o", out)
    assert res.exit_code == 0, res.stdout + res.stderr
    rep = read_report(out)
    o = rep["validation"]["outputs"][0]
    assert (o["name"], o["kind"], o["kind_source"]) == ("logits", "classification", "name")
    assert _checks(rep)["top1_agreement"]["passed"] is True


class LogOfInput(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)  # NaN for the negative inputs, in PyTorch and in LiteRT


def test_a_nan_output_fails_and_reads_no_sqnr(tmp_path, run_cli):
    src = _save(LogOfInput(), tmp_path / "log.pt2")
    out = tmp_path / "log.tflite"
    res = run_cli(src, "--samples", "2", "-o", out)
    assert res.exit_code == 1, res.stdout + res.stderr
    rep = read_report(out)
    o = rep["validation"]["outputs"][0]
    assert rep["verdict"] == "failed" and "NaN or Inf" in o["error"]
    assert o["metrics"]["sqnr_db"] is None and "NaN or Inf" in o["not_computable"]["sqnr_db"]
    assert "SQNR – dB" in res.stdout and "SQNR 200" not in res.stdout
