"""validators/accuracy.py on arrays whose answer is known: both accuracies, their agreement, the
drop gate, which output is judged, and labels that do not fit the output (exit 2)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from edge_export.config import OutputKind
from edge_export.errors import UsageError
from edge_export.quantization.calibration_labels import HeldOutLabels
from edge_export.validators.accuracy import accuracy_check, classification_output, measure_accuracy, top1
from edge_export.validators.output_kinds import KindDecision, KindSource, LabelsFile


def _scores(classes: list[int], n_classes: int = 4) -> list[np.ndarray]:
    """One [1, n_classes] score row per sample whose top-1 is the given class."""
    rows = []
    for c in classes:
        row = np.zeros((1, n_classes), dtype=np.float32)
        row[0, c] = 1.0
        rows.append(row)
    return rows


def test_both_accuracies_agreement_and_drop_on_known_arrays():
    labels = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    pytorch = _scores([0, 1, 2, 3, 0, 1, 2, 3, 0, 0])  # 9 of 10 right
    exported = _scores([0, 1, 2, 3, 0, 1, 2, 0, 1, 0])  # 7 of 10 right; differs from PyTorch on 2
    result = measure_accuracy(pytorch, exported, labels, name="logits", max_drop=0.1)
    assert (result.pytorch_accuracy, result.exported_accuracy) == (0.9, 0.7)
    assert result.agreement == pytest.approx(0.8)
    assert result.drop == pytest.approx(0.2)
    assert result.classes == 4 and result.samples == 10
    assert not result.passed and result.status == "failed"
    assert "PyTorch 90.00%, exported 70.00%" in result.message and "+20.00 points" in result.message


def test_a_drop_equal_to_the_gate_passes_and_a_gain_passes():
    labels = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
    right = _scores(labels)
    one_wrong = _scores([0, 1, 2, 3, 0, 1, 2, 3, 0, 2])
    assert measure_accuracy(right, one_wrong, labels, max_drop=0.1).passed  # drop 0.1, gate 0.1
    assert not measure_accuracy(right, one_wrong, labels, max_drop=0.09).passed
    gain = measure_accuracy(one_wrong, right, labels, max_drop=0.0)
    assert gain.drop == pytest.approx(-0.1) and gain.passed


def test_nan_scores_never_win_the_argmax():
    row = np.array([[np.nan, 0.2, 0.9, np.nan]], dtype=np.float32)
    assert top1([row], "logits").tolist() == [2]


def test_an_output_with_several_score_vectors_per_sample_is_refused():
    with pytest.raises(UsageError, match="not one vector of class scores"):
        top1([np.zeros((1, 3, 4), dtype=np.float32)], "boxes")


def _decision(kind: OutputKind, labels: LabelsFile | None = None) -> KindDecision:
    return KindDecision(kind, KindSource.OPTION, labels)


def test_the_classification_output_is_the_only_one_or_the_one_named():
    regression, classifier = _decision(OutputKind.REGRESSION), _decision(OutputKind.CLASSIFICATION)
    assert classification_output(["out"], [regression]) == 0
    assert classification_output(["boxes", "scores"], [regression, classifier]) == 1
    labelled = _decision(OutputKind.CLASSIFICATION, LabelsFile("l.txt", 4))
    assert classification_output(["a", "b"], [classifier, labelled]) == 1
    with pytest.raises(UsageError, match="none of them is named a classifier") as exc:
        classification_output(["boxes", "scores"], [regression, regression])
    assert exc.value.hint and "--output-kind NAME=classification" in exc.value.hint
    with pytest.raises(UsageError, match="2 of them are classifiers"):
        classification_output(["a", "b"], [classifier, classifier])


@dataclass(frozen=True)
class _Outputs:
    references: list
    candidates: list


def _one_output(classes: list[int], n_classes: int = 4) -> _Outputs:
    rows = [[r] for r in _scores(classes, n_classes)]
    return _Outputs(rows, rows)


def test_class_folders_must_match_the_output_classes():
    held = HeldOutLabels((0, 1, 2), ("cat", "dog", "fox"), "photos", 0.2, 12)
    out = _one_output([0, 1, 2])
    with pytest.raises(UsageError, match="3 class folders, but the output 'logits' has 4 classes"):
        accuracy_check(held, out.references, out.candidates, ["logits"], [_decision(OutputKind.CLASSIFICATION)], 0.01)


def test_class_folders_are_mapped_by_the_labels_file(tmp_path):
    labels_file = tmp_path / "labels.txt"
    labels_file.write_text("ant\nfox\ndog\ncat\n")
    held = HeldOutLabels((0, 1, 2), ("cat", "dog", "fox"), "photos", 0.2, 12)
    out = _one_output([3, 2, 1])  # cat is line 3, dog line 2, fox line 1 of the file: all right
    decision = _decision(OutputKind.CLASSIFICATION, LabelsFile(str(labels_file), 4))
    result = accuracy_check(held, out.references, out.candidates, ["logits"], [decision], 0.01)
    assert result.pytorch_accuracy == 1.0 and "labels.txt" in result.class_index
    assert (result.source, result.holdout_fraction, result.calibration_samples) == ("photos", 0.2, 12)
    labels_file.write_text("ant\nfox\ndog\nbee\n")
    with pytest.raises(UsageError, match="cat of photos are not labels of"):
        accuracy_check(held, out.references, out.candidates, ["logits"], [decision], 0.01)


def test_array_labels_beyond_the_output_classes_are_refused():
    held = HeldOutLabels((0, 1, 7), None, "data.npz", 0.2, 12)
    out = _one_output([0, 1, 2])
    with pytest.raises(UsageError, match="go up to class 7, but the output 'out' has 4 classes"):
        accuracy_check(held, out.references, out.candidates, ["out"], [_decision(OutputKind.REGRESSION)], 0.01)


def _report_with(result):
    from dataclasses import replace

    from report_fixtures import full_report

    report = full_report()
    return replace(report, baseline=None, per_layer=None, accuracy=result)


@pytest.mark.parametrize("failing", [False, True])
def test_the_accuracy_section_in_every_rendering(failing):
    """JSON (against the schema), Markdown, JUnit and the terminal show both accuracies; a drop over
    the gate fails the verdict (exit 1) even with parity passing. The output's name is escaped."""
    import io
    import json
    import xml.etree.ElementTree as ET

    from rich.console import Console

    from cli_harness import validate_report
    from edge_export.reports.junit import render_junit
    from edge_export.reports.markdown import render_markdown
    from edge_export.reports.summary import print_summary
    from edge_export.output.serialize import to_json_value

    labels = [0, 1, 2, 3] * 5
    exported = _scores([0, 1, 2, 3] * 4 + [1, 1, 2, 3]) if failing else _scores(labels)
    result = measure_accuracy(_scores(labels), exported, labels, name="logits_[b]", max_drop=0.01, class_index="folder names, sorted")
    report = _report_with(result)
    assert report.validation.passed and report.verdict == ("failed" if failing else "passed")
    assert report.exit_code == (1 if failing else 0)
    data = validate_report(json.loads(json.dumps(to_json_value(report))))
    assert data["accuracy"]["status"] == ("failed" if failing else "passed")
    assert data["accuracy"]["exported_accuracy"] == (0.95 if failing else 1.0)
    markdown = render_markdown(report)
    assert "## Accuracy on the labelled data" in markdown and "logits\\_\\[b\\]" in markdown
    assert ("| exported | 95.00% |" if failing else "| exported | 100.00% |") in markdown
    case = next(c for c in ET.fromstring(render_junit(report)).iter("testcase") if c.get("classname") == "edge_export.accuracy")
    assert (case.find("failure") is not None) == failing
    out = Console(file=io.StringIO(), width=300, force_terminal=False)
    print_summary(report, out, Console(file=io.StringIO(), width=300))
    line = next(t for t in out.file.getvalue().splitlines() if "accuracy" in t and "PyTorch" in t)
    assert ("failed" in line and "exported 95.00%" in line) if failing else "passed" in line
