"""No artifact path may be an input or another artifact (through `..`, symlinks or hard links):
exit 2 before any work, every input left as it was. Also: -o FOLDER, and the folders a failed run
created are removed."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest


@pytest.fixture(scope="module")
def built(built_artifacts):
    """cnn.pt2, cnn.tflite and cnn.report.json: the session's fp32 export (tests/conftest.py)."""
    return built_artifacts.source.parent


@pytest.fixture
def work(built, tmp_path):
    for name in ("cnn.pt2", "cnn.tflite", "cnn.report.json"):
        shutil.copy(built / name, tmp_path / name)
    return tmp_path


def _refused(res, *needles):
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    text = " ".join(res.stderr.split())
    for needle in needles:
        assert needle in text, text
    assert "Traceback" not in res.stderr


def _snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


CASES = {
    "-o the model": lambda w: ["cnn.pt2", "-o", "cnn.pt2"],
    "-o the model through ..": lambda w: ["cnn.pt2", "-o", "sub/../cnn.pt2"],
    "a model named like its default output": lambda w: [_copy(w, "cnn.pt2", "m.tflite")],
    "--junit the model": lambda w: ["cnn.pt2", "-o", "new.tflite", "--junit", "cnn.pt2"],
    "--junit the .tflite": lambda w: ["cnn.pt2", "-o", "new.tflite", "--junit", "new.tflite"],
    "--junit a report": lambda w: ["cnn.pt2", "-o", "new.tflite", "--junit", "new.report.md"],
    "--baseline its own report": lambda w: ["cnn.pt2", "-o", "cnn.tflite", "--baseline", "cnn.report.json"],
    "--per-layer-plot the model": lambda w: ["cnn.pt2", "-o", "new.tflite", "--per-layer", "--per-layer-plot", "cnn.pt2"],
    "--emit-op-resolver the model": lambda w: ["cnn.pt2", "-o", "new.tflite", "--target", "micro", "--emit-op-resolver", "cnn.pt2"],
    "micro tensor-name map is the model": lambda w: [_copy(w, "cnn.pt2", "m.tensors.json"), "-o", "m.tflite", "--target", "micro"],
    "validate --report over the tensor-name map": lambda w: [
        "validate", "cnn.tflite", "-r", "cnn.pt2", "--tensor-names", _copy(w, "cnn.pt2", "v.report.json"), "--report", "v"],
    "edgetpu compiled model is the model": lambda w: [
        _copy(w, "cnn.pt2", "m_edgetpu.tflite"), "-o", "m.tflite", "--target", "edgetpu"],
    "symlink to the model": lambda w: ["cnn.pt2", "-o", _symlink(w, "cnn.pt2", "link.tflite")],
    "hard link to the model": lambda w: ["cnn.pt2", "-o", _hardlink(w, "cnn.pt2", "hard.tflite")],
    "a file of the calibration folder": lambda w: [
        "cnn.pt2", "--quantize", "int8", "--calibration-data", _calibration(w), "-o", "calib/a.npy"],
    "validate --junit the flatbuffer": lambda w: ["validate", "cnn.tflite", "-r", "cnn.pt2", "--junit", "cnn.tflite"],
    "validate --report over the reference": lambda w: [
        "validate", "cnn.tflite", "-r", _copy(w, "cnn.pt2", "v.report.json"), "--report", "v"],
    "validate --baseline its own report": lambda w: [
        "validate", "cnn.tflite", "-r", "cnn.pt2", "--baseline", _copy(w, "cnn.report.json", "cnn.validate.report.json")],
    "a folder where a report goes": lambda w: [_mkdir(w, "new.report.md") and "cnn.pt2", "-o", "new.tflite"],
}


def _copy(folder, src, name):
    shutil.copy(folder / src, folder / name)
    return name


def _symlink(folder, src, name):
    os.symlink(folder / src, folder / name)
    return name


def _hardlink(folder, src, name):
    os.link(folder / src, folder / name)
    return name


def _mkdir(folder, name):
    (folder / name).mkdir()
    return name


def _calibration(folder):
    (folder / "calib").mkdir()
    for i in range(4):
        np.save(folder / "calib" / ("a" if i == 0 else f"s{i}"), np.zeros((1, 3, 16, 16), np.float32))
    return "calib"


@pytest.mark.parametrize("case", sorted(CASES))
def test_artifact_path_that_is_an_input_or_another_artifact(work, run_cli, monkeypatch, case):
    monkeypatch.chdir(work)
    (work / "sub").mkdir()
    args = CASES[case](work)
    before = _snapshot(work) | {f"calib/{p.name}": p.read_bytes() for p in (work / "calib").glob("*")}
    res = run_cli(*args)
    _refused(res, "folder is in the way" if case == "a folder where a report goes" else "Choose another path")
    after = _snapshot(work) | {f"calib/{p.name}": p.read_bytes() for p in (work / "calib").glob("*")}
    assert after == before  # nothing replaced, nothing added
    assert "Loading" not in res.stderr  # refused before any work


def test_output_folder_gets_the_model_stem(work, run_cli):
    out = work / "exports"
    out.mkdir()
    res = run_cli(work / "cnn.pt2", "-o", out, "--no-validate")
    assert res.exit_code == 0, res.stderr
    assert sorted(p.name for p in out.iterdir()) == ["cnn.report.json", "cnn.report.md", "cnn.tflite"]
    assert not (work / "exports.tflite").exists()


def test_failed_run_removes_the_folders_it_created(work, run_cli):
    (work / "kept").mkdir()
    res = run_cli(work / "cnn.pt2", "--input-shape", "1,3,16", "-o", work / "kept" / "new" / "deeper" / "out.tflite")
    assert res.exit_code == 2, res.stderr
    assert list((work / "kept").iterdir()) == []  # created folders gone, the existing one kept
