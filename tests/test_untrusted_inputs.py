"""The leaks around untrusted models and files (issue 20): paths that are inputs, text a model
supplies reaching C source and the terminal, data files that crashed with exit 4, and signals after
a finished run. Refusals run the real CLI in this process (run_cli); what only a process shows
(its own stdout as a device file, a terminal, Ctrl-C) runs in a subprocess or a pseudo-terminal."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

from cli_harness import run_cli_in_pty, run_cli_subprocess

pytestmark = pytest.mark.hostile  # untrusted input: in the default tier even where slow

HOSTILE = "\x1b[2J\x1b[Hall checks PASSED\n#error injected\n// \\"


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("model")
    path = folder / "m.pt2"
    torch.export.save(torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 3)).eval(), (torch.randn(1, 4),)), path)
    (folder / "labels.txt").write_text("a\nb\nc\n")
    return path


@pytest.fixture(scope="module")
def hostile_module(tmp_path_factory) -> Path:
    """A package.module:attr model whose output key carries escapes, a newline and C code."""
    folder = tmp_path_factory.mktemp("hostile")
    (folder / "hostile_model.py").write_text(
        "import torch\n"
        f"KEY = {HOSTILE!r}\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = torch.nn.Conv2d(3, 4, 3)\n"
        "    def forward(self, x):\n"
        "        return {KEY: self.conv(x).mean((2, 3))}\n"
    )
    return folder


def _nothing_written(folder: Path, before: set[str]) -> None:
    assert {p.name for p in folder.iterdir()} == before


@pytest.mark.parametrize("args", [
    ("-o", "{d}/x.tflite", "--labels", "{d}/x.report.md"),
    ("-o", "{d}/labels.txt", "--labels", "{d}/labels.txt"),
    ("--junit", "{d}/labels.txt", "--labels", "{d}/labels.txt", "-o", "{d}/y.tflite"),
])
def test_outputs_never_replace_labels(run_cli, archive, args):
    d = archive.parent
    before = {p.name for p in d.iterdir()}
    res = run_cli(archive, *(a.format(d=d) for a in args))
    assert res.exit_code == 2 and "--labels" in res.stderr and "replace that input" in res.stderr, res.stderr
    _nothing_written(d, before)
    assert (d / "labels.txt").read_text() == "a\nb\nc\n"


def test_validate_outputs_never_replace_labels(run_cli, archive, tmp_path):
    res = run_cli(archive, "-o", tmp_path / "m.tflite", "--no-validate")
    assert res.exit_code == 0, res.stderr
    labels = tmp_path / "labels.txt"
    labels.write_text("a\nb\nc\n")
    md = tmp_path / "v.report.md"
    md.write_text("a\nb\nc\n")
    for clash in (("--labels", labels, "--junit", labels), ("--labels", md, "--report", tmp_path / "v")):
        res = run_cli("validate", tmp_path / "m.tflite", "--reference", archive, *clash)
        assert res.exit_code == 2 and "--labels" in res.stderr and "replace that input" in res.stderr, res.stderr
    assert labels.read_text() == md.read_text() == "a\nb\nc\n"


@pytest.mark.parametrize("output", ["/dev/null", "/dev/stdout", "/proc/self/fd/1"])
def test_device_files_are_refused_as_outputs(archive, output):
    # a fresh process: in this one, fd 1 is pytest's capture file, a regular file
    res = run_cli_subprocess(archive, "-o", output)
    assert res.exit_code == 2 and "not a regular file" in " ".join(res.stderr.split()), res.stderr
    assert not Path("/dev/null.tflite").exists() and not Path("/dev/null.report.json").exists()


def _npz_without_suffix(path: Path) -> Path:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": (1 << 48,)})
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("0", header.getvalue() + b"\0" * 16)
    return path


@pytest.mark.parametrize("kind", ["object", "no_suffix", "duplicate"])
def test_hostile_calibration_archives_are_exit_2(run_cli, archive, tmp_path, kind):
    path = tmp_path / f"{kind}.npz"
    if kind == "object":
        np.savez(path, x=np.array([{"a": 1}], dtype=object))
    elif kind == "no_suffix":
        _npz_without_suffix(path)
    else:
        with zipfile.ZipFile(path, "w") as zf:
            for _ in range(2):
                buf = io.BytesIO()
                np.save(buf, np.zeros((1, 4), np.float32))
                zf.writestr("x.npy", buf.getvalue())
    res = run_cli(archive, "-o", tmp_path / "q.tflite", "--quantize", "int8", "--calibration-data", path)
    assert res.exit_code == 2, res.stderr
    assert "is not usable" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "q.tflite").exists()


@pytest.mark.parametrize("seed", ["-1", str(2**32)])
def test_bad_seed_is_exit_2_before_any_work(run_cli, archive, tmp_path, seed):
    res = run_cli(archive, "-o", tmp_path / "q.tflite", "--seed", seed)
    assert res.exit_code == 2 and "--seed" in res.stderr and "Loading" not in res.stderr, res.stderr


@pytest.mark.slow
def test_model_text_in_the_c_bundle_is_only_a_comment(run_cli, hostile_module, tmp_path, monkeypatch):
    monkeypatch.chdir(hostile_module)  # the model reference is imported from the current folder
    res = run_cli("hostile_model:Model", "--input-shape", "1,3,8,8", "--target", "micro", "-o", tmp_path / "m.tflite")
    assert res.exit_code in (0, 1), res.stderr
    sources = list((tmp_path / "m_micro").glob("*.cc")) + list((tmp_path / "m_micro").glob("*.h"))
    assert sources
    for source in sources:
        for line in source.read_text().splitlines():
            assert not line.lstrip().startswith("#error"), line
            assert "\x1b" not in line and not line.rstrip().endswith("\\"), line
            if "all checks PASSED" in line:
                assert line.lstrip().startswith("//"), line


@pytest.mark.slow
def test_model_text_cannot_drive_the_terminal(run_cli, hostile_module, tmp_path, monkeypatch):
    monkeypatch.chdir(hostile_module)
    res = run_cli("hostile_model:Model", "--input-shape", "1,3,8,8", "-o", tmp_path / "m.tflite")
    assert res.exit_code == 0, res.stderr
    for command in (("inspect", tmp_path / "m.tflite"), ("validate", tmp_path / "m.tflite", "--reference", "hostile_model:Model",
                                                         "--input-shape", "1,3,8,8", "--report", tmp_path / "v")):
        shown = run_cli_in_pty(*command, cwd=hostile_module)
        assert "all checks PASSED" in shown.output  # the name is shown ...
        assert "\x1b[2J" not in shown.output and "\x1b[H" not in shown.output  # ... but cannot act
        assert "\\x1b[2J" in shown.output
        piped = run_cli(*command)  # pytest's capture is a file, not a terminal, as a pipe is
        assert "\x1b" not in piped.stdout + piped.stderr


@pytest.mark.slow
def test_ctrl_c_after_the_artifacts_are_written_keeps_the_exit_code(archive, tmp_path):
    shown = run_cli_in_pty(archive, "-o", tmp_path / "m.tflite", interrupt_when="reports:")
    assert shown.exit_code == 0, shown.output[-2000:]
    assert (tmp_path / "m.tflite").exists() and (tmp_path / "m.report.json").exists()
