"""Labels beside the calibration data (quantization/calibration_labels.py): an image folder with one
sub-folder per class, or an .npz with a ``labels`` array; the held-out part (a fraction of every
class, spread evenly, disjoint from the calibration part); a malformed ``labels`` array or class
folder is exit 2 naming the problem."""

from __future__ import annotations

import os

import numpy as np
import pytest

from edge_export.config import InputSpec
from edge_export.errors import CalibrationDataError
from edge_export.quantization import load_calibration_data
from edge_export.quantization.calibration_labels import heldout_positions, split_labelled
from image_mutations import image_bytes

IMG = InputSpec((1, 3, 8, 8), name="x")


def _class_folders(root, counts: dict[str, int]):
    for name, count in counts.items():
        folder = root / name
        folder.mkdir(parents=True)
        for i in range(count):
            (folder / f"{i:03d}.png").write_bytes(image_bytes("PNG", seed=i))
    return root


def _refusal(path, *words) -> str:
    with pytest.raises(CalibrationDataError) as info:
        load_calibration_data(path, [IMG])
    assert info.value.exit_code == 2
    text = str(info.value)
    for word in words:
        assert word in text, text
    return text


def test_a_folder_of_class_folders_is_labelled_by_sorted_names_classes_in_turn(tmp_path):
    root = _class_folders(tmp_path / "data", {"dog": 2, "cat": 3, "fox": 1})
    data = load_calibration_data(root, [IMG])
    assert data.class_names == ("cat", "dog", "fox")
    assert data.labels == (0, 1, 2, 0, 1, 0)  # one of each class in turn, then the rest
    assert len(data) == 6
    balanced = load_calibration_data(root, [IMG], max_samples=3)  # --calibration-samples reads every class
    assert balanced.labels == (0, 1, 2)


def test_a_folder_with_images_of_its_own_stays_unlabelled(tmp_path):
    root = _class_folders(tmp_path / "data", {"thumbnails": 2})
    (root / "a.png").write_bytes(image_bytes("PNG", seed=9))
    data = load_calibration_data(root, [IMG])
    assert data.labels is None and len(data) == 1


def test_a_class_folder_holding_other_files_is_refused(tmp_path):
    root = _class_folders(tmp_path / "data", {"cat": 2, "dog": 2})
    (root / "dog" / "notes.txt").write_text("not an image")
    _refusal(root, "notes.txt", "not a JPEG/PNG image")
    empty = tmp_path / "empty"
    (empty / "cat").mkdir(parents=True)
    _refusal(empty, "no images")


def test_a_link_in_a_class_folder_leading_out_is_refused(tmp_path):
    root = _class_folders(tmp_path / "data", {"cat": 2, "dog": 2})
    outside = tmp_path / "secret.png"
    outside.write_bytes(image_bytes("PNG", seed=5))
    os.symlink(outside, root / "cat" / "link.png")
    _refusal(root, "symbolic link", "leads outside")


def test_an_npz_labels_array_labels_its_samples(tmp_path):
    path = tmp_path / "data.npz"
    x = np.random.default_rng(0).random((5, 1, 3, 8, 8), dtype=np.float32)
    np.savez(path, x=x, labels=np.array([2, 0, 1, 1, 0]))
    data = load_calibration_data(path, [IMG])
    assert data.labels == (2, 0, 1, 1, 0) and data.class_names is None and len(data) == 5
    unlabelled = tmp_path / "plain.npz"
    np.savez(unlabelled, x=x)
    assert load_calibration_data(unlabelled, [IMG]).labels is None


@pytest.mark.parametrize(
    "labels, words",
    [
        (np.array([[0], [1], [0], [1], [0]]), ("shape (5, 1)", "one-dimensional")),
        (np.array([0.0, 1.0, 0.0, 1.0, 0.0]), ("dtype float64", "integers")),
        (np.array([0, 1, 0]), ("3 labels for 5 samples",)),
        (np.array([0, 1, -1, 1, 0]), ("negative class index (-1)",)),
        (np.array(["a", "b", "a", "b", "a"]), ("dtype <U1",)),
    ],
)
def test_a_malformed_labels_array_is_exit_2(tmp_path, labels, words):
    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((5, 1, 3, 8, 8), dtype=np.float32), labels=labels)
    text = _refusal(path, f"{path}['labels']", *words)
    with pytest.raises(CalibrationDataError) as info:
        load_calibration_data(path, [IMG])
    assert "np.savez" in (info.value.hint or "")
    assert "\n" not in text


def test_the_held_out_part_is_a_fraction_of_every_class_spread_evenly():
    labels = (0, 1) * 10 + (2,) * 5  # 10 of class 0 and 1, 5 of class 2
    held = heldout_positions(labels, 0.2)
    by_class = {c: [p for p in held if labels[p] == c] for c in (0, 1, 2)}
    assert {c: len(p) for c, p in by_class.items()} == {0: 2, 1: 2, 2: 1}
    assert by_class[0] == [8, 18]  # the 5th and 10th sample of class 0: spread, not the last ones
    assert heldout_positions(labels, 0.2) == held  # deterministic


def test_split_labelled_keeps_the_parts_disjoint_and_labelled(tmp_path):
    path = tmp_path / "data.npz"
    x = np.arange(20, dtype=np.float32)[:, None, None, None, None] * np.ones((1, 1, 3, 8, 8), np.float32)
    np.savez(path, x=x, labels=np.arange(20) % 2)
    data = load_calibration_data(path, [IMG])
    calibration, heldout, info = split_labelled(data, 0.25)
    seen_cal = {float(s[0].flat[0]) for s in calibration.samples}
    seen_held = {float(s[0].flat[0]) for s in heldout.samples}
    assert not seen_cal & seen_held and len(seen_cal | seen_held) == 20
    assert len(heldout) == 4 and info.labels == heldout.labels and info.calibration_samples == 16  # 2 of each 10
    assert all(float(s[0].flat[0]) % 2 == label for s, label in zip(heldout.samples, info.labels))


def test_too_few_labelled_samples_to_hold_out_any_is_exit_2(tmp_path):
    path = tmp_path / "data.npz"
    np.savez(path, x=np.zeros((3, 1, 3, 8, 8), np.float32), labels=np.array([0, 1, 2]))
    with pytest.raises(CalibrationDataError, match="leaves none of them for the accuracy check") as info:
        split_labelled(load_calibration_data(path, [IMG]), 0.2)
    assert "--holdout-fraction" in (info.value.hint or "")
