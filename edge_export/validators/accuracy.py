"""Accuracy on the user's labelled data: PyTorch's and the exported model's top-1 against the labels
on the held-out samples, their agreement, and a gate on the drop (``--max-accuracy-drop``).

The labels come with the calibration data (quantization/calibration_labels.py). The output judged
is the classification output: the model's only output, else the one output whose kind is
classification or probabilities (``--output-kind NAME=classification`` or ``--labels NAME=FILE``
name it); each sample must give one score vector (its last axis: the classes). Class folders map to
indices by their sorted names, or by their line in the output's ``--labels`` file when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ..config import OutputKind
from ..errors import UsageError

__all__ = ["DEFAULT_MAX_ACCURACY_DROP", "AccuracyResult", "accuracy_check", "classification_output", "measure_accuracy"]

# One percentage point of top-1, the loss int8 post-training quantization is usually held to on
# image classifiers (e.g. TensorFlow's and PyTorch's quantization guides report drops under it).
DEFAULT_MAX_ACCURACY_DROP = 0.01
_TOLERANCE = 1e-9  # accuracies are ratios of counts: a drop equal to the gate passes


@dataclass(frozen=True)
class AccuracyResult:
    """Top-1 accuracy against the labels on the held-out samples; ``drop`` is PyTorch's minus the export's."""

    output: str
    samples: int
    classes: int
    pytorch_accuracy: float
    exported_accuracy: float
    agreement: float  # the fraction of samples whose top-1 is the same in both
    drop: float
    max_drop: float
    class_index: str  # how labels became class indices
    source: str = ""
    holdout_fraction: float | None = None
    calibration_samples: int | None = None  # the samples of the same data calibrated on instead

    JSON_KEYS = ("status", "output", "samples", "classes", "pytorch_accuracy", "exported_accuracy", "agreement", "drop",
                 "max_drop", "class_index", "source", "holdout_fraction", "calibration_samples", "message")

    @property
    def passed(self) -> bool:
        return self.drop <= self.max_drop + _TOLERANCE

    @property
    def status(self) -> str:
        return "passed" if self.passed else "failed"

    @property
    def message(self) -> str:
        verdict = "within" if self.passed else "over"
        return (
            f"top-1 accuracy on {self.samples} held-out labelled samples: PyTorch {self.pytorch_accuracy:.2%}, exported "
            f"{self.exported_accuracy:.2%} (drop {self.drop * 100:+.2f} points, {verdict} --max-accuracy-drop "
            f"{self.max_drop:g}, {_points(self.max_drop)}); top-1 agreement {self.agreement:.2%}"
        )


def _points(fraction: float) -> str:
    value = fraction * 100
    return f"{value:g} percentage point{'' if value == 1 else 's'}"


def top1(outputs: Sequence[np.ndarray], name: str) -> np.ndarray:
    """Each sample's class: the argmax of its one score vector (an output's last axis)."""
    picks = []
    for out in outputs:
        scores = np.asarray(out, dtype=np.float64)
        if scores.ndim == 0 or scores.size != scores.shape[-1]:
            raise UsageError(
                f"The output '{name}' has shape {list(scores.shape)} per sample, not one vector of class scores, so "
                "accuracy against one label per sample cannot be measured on it.",
                "Name the classifier output: --output-kind NAME=classification.",
            )
        picks.append(int(np.argmax(np.nan_to_num(scores.reshape(-1), nan=-np.inf))))  # NaN never wins
    return np.asarray(picks, dtype=np.int64)


def measure_accuracy(references: Sequence[np.ndarray], candidates: Sequence[np.ndarray], labels: Sequence[int], *,
                     name: str = "output", max_drop: float = DEFAULT_MAX_ACCURACY_DROP, class_index: str = "") -> AccuracyResult:
    """Top-1 of PyTorch's (``references``) and the export's (``candidates``) scores against ``labels``."""
    if not (len(references) == len(candidates) == len(labels)) or not labels:
        raise ValueError(f"accuracy needs as many outputs as labels: {len(references)}, {len(candidates)}, {len(labels)}")
    truth = np.asarray(labels, dtype=np.int64)
    ref, cand = top1(references, name), top1(candidates, name)
    ref_acc, cand_acc = float(np.mean(ref == truth)), float(np.mean(cand == truth))
    classes = int(np.asarray(references[0]).shape[-1])
    return AccuracyResult(name, len(truth), classes, ref_acc, cand_acc, float(np.mean(ref == cand)), ref_acc - cand_acc, max_drop, class_index)


def classification_output(names: Sequence[str], decisions: Sequence[Any]) -> int:
    """The index of the output accuracy is measured on (see the module docstring), or exit 2."""
    if len(names) == 1:
        return 0
    chosen = [i for i, d in enumerate(decisions) if d.kind in (OutputKind.CLASSIFICATION, OutputKind.PROBABILITIES)]
    labelled = [i for i in chosen if getattr(decisions[i], "labels", None) is not None]
    if len(labelled) == 1:
        chosen = labelled
    if len(chosen) != 1:
        which = f"{len(chosen)} of them are classifiers" if chosen else "none of them is named a classifier"
        raise UsageError(
            f"The calibration data carries labels, but the model has {len(names)} outputs ({', '.join(names)}) and "
            f"{which}, so it is not known which output the labels are for.",
            "Name it: --output-kind NAME=classification (or --labels NAME=FILE).",
        )
    return chosen[0]


def class_indices(held: Any, classes: int, labels_file: str | None, name: str) -> tuple[tuple[int, ...], str]:
    """The held-out labels as the output's class indices, and how they were mapped; exit 2 when the
    labels do not fit the output's classes."""
    if held.class_names is not None:
        folders = held.class_names
        if labels_file is not None:
            from .output_kinds import read_labels

            order = {label: i for i, label in enumerate(read_labels(labels_file))}
            missing = [f for f in folders if f not in order]
            if missing:
                raise UsageError(
                    f"The class folder(s) {', '.join(missing[:5])} of {held.source} are not labels of {labels_file}, which "
                    f"gives the classes of the output '{name}'.",
                    "Name each class sub-folder after a line of the labels file.",
                )
            return tuple(order[folders[i]] for i in held.labels), f"folder names, by their line in {labels_file}"
        if len(folders) != classes:
            raise UsageError(
                f"{held.source} has {len(folders)} class folders, but the output '{name}' has {classes} classes.",
                "Give one sub-folder per class, or --labels FILE mapping the folder names to the classes (one per line).",
            )
        return tuple(held.labels), "folder names, sorted"
    top = max(held.labels)
    if top >= classes:
        raise UsageError(
            f"The labels of {held.source} go up to class {top}, but the output '{name}' has {classes} classes (0 to {classes - 1}).",
            "Give labels that are the output's class indices.",
        )
    return tuple(held.labels), "the labels array"


def accuracy_check(held: Any, references: Sequence[Sequence[np.ndarray]], candidates: Sequence[Sequence[np.ndarray]],
                   names: Sequence[str], decisions: Sequence[Any], max_drop: float) -> AccuracyResult:
    """The accuracy section: the classification output's top-1 on the held-out samples, both models."""
    from dataclasses import replace

    index = classification_output(names, decisions)
    name = names[index]
    ref = [r[index] for r in references]
    classes = int(np.asarray(ref[0]).shape[-1]) if np.asarray(ref[0]).ndim else 1
    labels, how = class_indices(held, classes, getattr(decisions[index], "labels_file", None), name)
    result = measure_accuracy(ref, [c[index] for c in candidates], labels, name=name, max_drop=max_drop, class_index=how)
    return replace(result, source=held.source, holdout_fraction=held.holdout_fraction, calibration_samples=held.calibration_samples)


def markdown_lines(result: AccuracyResult, escape: Any) -> list[str]:
    """The Markdown section; ``escape`` is the renderer's escaper (the output name and source are the user's)."""
    fraction = "" if result.holdout_fraction is None else f" ({result.holdout_fraction:g} of every class"
    calibrated = "" if result.calibration_samples is None else f"; {result.calibration_samples} others calibrated on)"
    return [
        "## Accuracy on the labelled data", "",
        f"**{result.status.upper()}**: drop {result.drop * 100:+.2f} points; the gate (--max-accuracy-drop {result.max_drop:g}) is {_points(result.max_drop)}", "",
        "| model | top-1 accuracy |", "|---|---|",
        f"| PyTorch | {result.pytorch_accuracy:.2%} |", f"| exported | {result.exported_accuracy:.2%} |", "",
        f"- {result.samples} held-out samples of {escape(result.source)}{fraction}{calibrated if fraction else ''}; "
        f"output {escape(result.output)} ({result.classes} classes; labels: {escape(result.class_index)})",
        f"- top-1 agreement between the two: {result.agreement:.2%}", "",
    ]


def junit_case(result: AccuracyResult) -> tuple[str, str, str | None, str]:
    """(classname, name, failure or None, details) of the accuracy test case."""
    return ("edge_export.accuracy", f"top-1 accuracy of {result.output} on labelled data", None if result.passed else result.message, result.message)
