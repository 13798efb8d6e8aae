"""Accuracy on the user's labelled data, end to end (issue 39, point 5): scikit-learn's bundled
digits written as an image folder (one sub-folder per class, PNGs made here), a small CNN trained
here on the other digits, exported int8 with that folder: the report shows PyTorch's and the
exported model's accuracy on the held-out part; a model whose int8 export really loses accuracy
fails the gate with exit 1; labels that do not fit the output are exit 2, nothing written."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from cli_harness import read_report

pytestmark = pytest.mark.slow
TRAINED_ON = 1200  # digits 0..1199 train the CNN; the other 597 are the labelled folder


class DigitsCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 16, 3, padding=1, stride=2), nn.ReLU())
        self.head = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class LoudSum(nn.Module):
    """The trained CNN with its logits carried through a sum with a loud signal and back out. In
    float the two cancel exactly (PyTorch's accuracy is the CNN's); in int8 the sum has one scale,
    set by the loud signal (up to ~120 x 64), so the logits lose most of their resolution, the way
    boxes and scores sharing one tensor lose the scores."""

    def __init__(self, cnn: nn.Module) -> None:
        super().__init__()
        self.cnn = cnn
        self.loud = nn.Conv2d(1, 1, 8)
        with torch.no_grad():
            self.loud.weight.fill_(120.0)
            self.loud.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        loud = self.loud(x).flatten(1)
        return (self.cnn(x) + loud) - loud


class TwoHeads(nn.Module):
    """The trained CNN's logits and, beside them, four of its features: two outputs, neither named."""

    def __init__(self, cnn: nn.Module) -> None:
        super().__init__()
        self.cnn = cnn

    def forward(self, x: torch.Tensor):
        return self.cnn(x), self.cnn.features(x).flatten(1)[:, :4]


def _digits():
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target


def _train() -> nn.Module:
    images, target = _digits()
    x, y = torch.from_numpy(images[:TRAINED_ON])[:, None], torch.from_numpy(target[:TRAINED_ON])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is faster than contending for the cores
    try:
        torch.manual_seed(0)
        model = DigitsCNN()
        opt = torch.optim.Adam(model.parameters(), 1e-2)
        for _ in range(8):
            for i in range(0, len(x), 100):
                opt.zero_grad()
                nn.functional.cross_entropy(model(x[i:i + 100]), y[i:i + 100]).backward()
                opt.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()


def _write_folder(root) -> dict[int, int]:
    from PIL import Image

    images, target = _digits()
    counts: dict[int, int] = {}
    for i, (image, label) in enumerate(zip(images[TRAINED_ON:], target[TRAINED_ON:])):
        folder = root / f"digit_{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((image * 255).round().astype(np.uint8), "L").save(folder / f"{i:04d}.png")
        counts[int(label)] = counts.get(int(label), 0) + 1
    return counts


@pytest.fixture(scope="module")
def digits(tmp_path_factory):
    root = tmp_path_factory.mktemp("digits")
    counts = _write_folder(root / "folder")
    cnn = _train()
    example = (torch.zeros(1, 1, 8, 8),)
    torch.export.save(torch.export.export(cnn, example), root / "cnn.pt2")
    torch.export.save(torch.export.export(LoudSum(cnn).eval(), example), root / "loud.pt2")
    torch.export.save(torch.export.export(TwoHeads(cnn).eval(), example), root / "two_heads.pt2")
    images, target = _digits()
    with torch.no_grad():  # the CNN's own accuracy on the whole folder, computed apart from the tool
        own = float((cnn(torch.from_numpy(images[TRAINED_ON:])[:, None]).argmax(1).numpy() == target[TRAINED_ON:]).mean())
    return root, counts, own


def _export(run_cli, model, out, data, *extra):
    return run_cli(model, "-o", out, "--quantize", "int8", "--quant-backend", "flatbuffer", "--no-latency", "--calibration-data", data, *extra)


def test_the_report_shows_both_accuracies_on_the_held_out_digits(run_cli, digits, tmp_path):
    root, counts, own = digits
    out = tmp_path / "cnn.tflite"
    res = _export(run_cli, root / "cnn.pt2", out, root / "folder", "--junit", tmp_path / "junit.xml")
    assert res.exit_code == 0, res.stdout + res.stderr
    accuracy = read_report(out)["accuracy"]
    held_out = sum(int(n * 0.2) for n in counts.values())  # 0.2 of every class
    assert accuracy["samples"] == held_out and accuracy["classes"] == 10
    assert accuracy["calibration_samples"] == sum(counts.values()) - held_out
    assert accuracy["class_index"] == "folder names, sorted"
    assert abs(accuracy["pytorch_accuracy"] - own) < 0.06  # the held-out fifth against the whole folder
    assert accuracy["pytorch_accuracy"] > 0.85 and accuracy["drop"] <= 0.01 and accuracy["agreement"] >= 0.95
    assert accuracy["status"] == "passed"
    assert "accuracy passed" in res.stdout and "PyTorch" in res.stdout
    assert "## Accuracy on the labelled data" in (tmp_path / "cnn.report.md").read_text()
    assert 'classname="edge_export.accuracy"' in (tmp_path / "junit.xml").read_text()
    # validate splits the folder as export did: the same held-out part, the same accuracies
    res = run_cli("validate", out, "--reference", root / "cnn.pt2", "--calibration-data", root / "folder")
    assert res.exit_code == 0, res.stdout + res.stderr
    again = read_report(tmp_path / "cnn.validate.tflite")["accuracy"]
    assert {k: again[k] for k in ("samples", "pytorch_accuracy", "exported_accuracy", "agreement")} == {
        k: accuracy[k] for k in ("samples", "pytorch_accuracy", "exported_accuracy", "agreement")
    }
    images, _ = _digits()
    plain = tmp_path / "plain.npz"
    np.savez(plain, x=images[:20][:, None])
    res = run_cli("validate", out, "--reference", root / "cnn.pt2", "--calibration-data", plain, "--report", tmp_path / "plain")
    assert res.exit_code == 2 and "has no labels" in res.stderr.replace("\n", " "), res.stdout + res.stderr
    assert not (tmp_path / "plain.report.json").exists()


def test_an_export_that_loses_accuracy_fails_the_gate_with_exit_1(run_cli, digits, tmp_path):
    """--min-sqnr 0: parity's SQNR gate passes, so the exit 1 is the accuracy gate's."""
    root, _, _ = digits
    out = tmp_path / "loud.tflite"
    res = _export(run_cli, root / "loud.pt2", out, root / "folder", "--min-sqnr", "0")
    assert res.exit_code == 1, res.stdout + res.stderr
    report = read_report(out)
    assert report["validation"]["status"] == "passed" and report["verdict"] == "failed"
    accuracy = report["accuracy"]
    assert accuracy["status"] == "failed" and accuracy["pytorch_accuracy"] > 0.85
    assert accuracy["drop"] > 0.05 and accuracy["exported_accuracy"] < accuracy["pytorch_accuracy"] - 0.05
    line = next(t for t in res.stdout.splitlines() if "accuracy failed" in t)
    assert f"PyTorch {accuracy['pytorch_accuracy']:.2%}" in line and f"exported {accuracy['exported_accuracy']:.2%}" in line
    res = run_cli("validate", out, "--reference", root / "loud.pt2", "--calibration-data", root / "folder", "--min-sqnr", "0")
    assert res.exit_code == 1 and "accuracy failed" in res.stdout, res.stdout + res.stderr


def test_npz_labels_beyond_the_classes_are_exit_2_and_nothing_is_written(run_cli, digits, tmp_path):
    root, _, _ = digits
    images, target = _digits()
    data = tmp_path / "digits.npz"
    labels = target[TRAINED_ON:].astype(np.int64)
    labels[labels == 9] = 12  # a class the 10-way output does not have
    np.savez(data, x=images[TRAINED_ON:][:, None], labels=labels)
    res = _export(run_cli, root / "cnn.pt2", tmp_path / "out" / "cnn.tflite", data)
    assert res.exit_code == 2, res.stdout + res.stderr
    said = res.stderr.replace("\n", " ")
    assert "go up to class 12" in said and "10 classes" in said and "Traceback" not in said
    assert not (tmp_path / "out").exists()


def test_several_outputs_need_the_classifier_named(run_cli, digits, tmp_path):
    """Two outputs, neither a classifier by name or option: exit 2 naming them and the fix; with
    --output-kind naming the logits, the accuracy is measured on them."""
    root, _, _ = digits
    images, target = _digits()
    data = tmp_path / "digits.npz"
    np.savez(data, x=images[TRAINED_ON:TRAINED_ON + 200][:, None], labels=target[TRAINED_ON:TRAINED_ON + 200].astype(np.int64))
    res = _export(run_cli, root / "two_heads.pt2", tmp_path / "refused" / "m.tflite", data)
    said = res.stderr.replace("\n", " ")
    assert res.exit_code == 2 and "2 outputs" in said and "--output-kind NAME=classification" in said, res.stdout + res.stderr
    assert not (tmp_path / "refused").exists()
    out = tmp_path / "named" / "m.tflite"
    res = _export(run_cli, root / "two_heads.pt2", out, data, "--output-kind", "output_0=classification")
    assert res.exit_code == 0, res.stdout + res.stderr
    accuracy = read_report(out)["accuracy"]
    assert accuracy["output"] == "output_0" and accuracy["class_index"] == "the labels array" and accuracy["pytorch_accuracy"] > 0.85
