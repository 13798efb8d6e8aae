"""Every bad input: a documented exit code, a message naming the problem, no output left behind."""

from __future__ import annotations

import os
import random
import pickle

import pytest
import torch

from cli_harness import run_cli_subprocess
from model_zoo import ComplexOp, DataDependent, small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def _no_outputs(folder, stem="out"):
    leftovers = [p.name for p in folder.iterdir() if p.name.startswith((stem, f".{stem}"))]
    assert leftovers == [], leftovers


def _check(res, code, *needles):
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    text = " ".join(res.stderr.split())
    for needle in needles:
        assert needle.lower() in text.lower(), text
    assert "Traceback" not in res.stderr


def test_random_bytes(tmp_path, run_cli):
    # Seeded: unseeded noise starts with 0x80 (a pickle's protocol opcode) once in 256 runs, and is
    # then refused as a pickle instead (the case below).
    src = tmp_path / "noise.pt2"
    src.write_bytes(bytes([0x42]) + random.Random(0).randbytes(4095))
    _check(run_cli(src, "-o", tmp_path / "out.tflite"), 2, "not a PyTorch model file", "ExportedProgram archive")
    _no_outputs(tmp_path)


def test_random_bytes_that_start_like_a_pickle(tmp_path, run_cli):
    src = tmp_path / "noise.pt2"
    src.write_bytes(bytes([0x80]) + random.Random(1).randbytes(4095))
    _check(run_cli(src, "-o", tmp_path / "out.tflite"), 2, "pickled Python object", "--trust-pickle")
    _no_outputs(tmp_path)


def test_truncated_archive(tmp_path, run_cli):
    good = tmp_path / "good.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), good)
    data = good.read_bytes()
    src = tmp_path / "cut.pt2"
    src.write_bytes(data[: len(data) // 2])
    _check(run_cli(src, "-o", tmp_path / "out.tflite"), 2, "damaged or truncated")
    _no_outputs(tmp_path)


def test_pickle_of_non_module(tmp_path, run_cli):
    src = tmp_path / "obj.pt"
    torch.save({"epoch": 3, "note": "not a model"}, src)
    _check(run_cli(src, "--trust-pickle", "--input-shape", "1,3", "-o", tmp_path / "out.tflite"), 2, "not a torch.nn.Module")
    _no_outputs(tmp_path)


def test_state_dict_is_named(tmp_path, run_cli):
    src = tmp_path / "sd.pt"
    torch.save(small_cnn().state_dict(), src)
    _check(run_cli(src, "-o", tmp_path / "out.tflite"), 2, "state dict", "--weights")
    _no_outputs(tmp_path)


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_untrusted_pickle_is_refused_and_payload_does_not_run(tmp_path):
    marker = tmp_path / "PAYLOAD_RAN"
    src = tmp_path / "evil.pt"
    src.write_bytes(pickle.dumps(_Payload(str(marker)), protocol=2))
    # a separate process: nothing in this test process could mask the payload running
    res = run_cli_subprocess(src, "--input-shape", "1,3", "-o", tmp_path / "out.tflite")
    _check(res, 2, "pickled", "--trust-pickle", "torch.export.save")
    assert not marker.exists(), "the pickle's payload ran"
    _no_outputs(tmp_path)


def test_pickled_module_without_trust(tmp_path, run_cli):
    src = tmp_path / "full.pt"
    torch.save(small_cnn(), src)
    _check(run_cli(src, "--input-shape", "1,3,16,16", "-o", tmp_path / "out.tflite"), 2, "arbitrary code", "--trust-pickle")
    _no_outputs(tmp_path)


def test_missing_file(tmp_path, run_cli):
    _check(run_cli(tmp_path / "nope.pt2", "-o", tmp_path / "out.tflite"), 2, "No such model file")
    _no_outputs(tmp_path)


def test_directory(tmp_path, run_cli):
    (tmp_path / "adir").mkdir()
    _check(run_cli(tmp_path / "adir", "-o", tmp_path / "out.tflite"), 2, "is a directory")
    _no_outputs(tmp_path)


def test_torchscript_without_shape(tmp_path, run_cli):
    src = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.trace(small_cnn(), X), src)
    _check(run_cli(src, "-o", tmp_path / "out.tflite"), 2, "TorchScript", "--input-shape")
    _no_outputs(tmp_path)


def test_wrong_rank_shape(tmp_path, run_cli):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    res = run_cli(src, "--input-shape", "3,16,16,1,1", "-o", tmp_path / "out.tflite")
    _check(res, 2, "rejects input (3,16,16,1,1)", "PyTorch says")
    _no_outputs(tmp_path)


def test_unparsable_shape(tmp_path, run_cli):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    _check(run_cli(src, "--input-shape", "1,three", "-o", tmp_path / "out.tflite"), 2, "Cannot read the input shape")


@pytest.mark.parametrize("where", ["file_as_folder", "read_only_fs"])
def test_unwritable_output_folder(tmp_path, run_cli, where):
    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), src)
    if where == "file_as_folder":
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "out.tflite"
        needle = "is a file, not a folder"
    else:
        out = "/proc/edge-export-test/out.tflite"  # /proc cannot hold files, even for root
        needle = "Cannot write"  # refused up front now: /proc, /sys and /dev are never artifact folders
    _check(run_cli(src, "-o", out), 2, needle)


def test_data_dependent_control_flow(tmp_path, run_cli):
    src = tmp_path / "dd.pt"
    torch.save(DataDependent(), src)
    res = run_cli(src, "--trust-pickle", "--input-shape", "2,4", "-o", tmp_path / "out.tflite")
    _check(res, 3, "Tracing the model with torch.export failed", "model_zoo.py", "x.sum() > 0", "torch.where")
    _no_outputs(tmp_path)


def test_operator_that_does_not_lower(tmp_path, run_cli):
    src = tmp_path / "fft.pt"
    torch.save(ComplexOp(), src)
    res = run_cli(src, "--trust-pickle", "--input-shape", "2,8", "-o", tmp_path / "out.tflite")
    _check(res, 3, "Converting the traced graph to LiteRT failed", "aten.", "model_zoo.py", "complex")
    _no_outputs(tmp_path)


def test_failed_export_keeps_previous_outputs(tmp_path, run_cli):
    src = tmp_path / "fft.pt"
    torch.save(ComplexOp(), src)
    out = tmp_path / "out.tflite"
    out.write_bytes(b"previous good model")
    res = run_cli(src, "--trust-pickle", "--input-shape", "2,8", "-o", out)
    assert res.exit_code == 3
    assert out.read_bytes() == b"previous good model"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out")] == []


def test_debug_shows_traceback(tmp_path, run_cli):
    _check_debug = run_cli(tmp_path / "nope.pt2", "--debug")
    assert _check_debug.exit_code == 2
    assert "Traceback" in _check_debug.stderr


def test_bad_option_value(tmp_path, run_cli):
    res = run_cli(tmp_path / "x.pt2", "--quantize", "int3")
    assert res.exit_code == 2
    assert "int3" in res.stderr


def test_help_is_fast_and_imports_no_torch(tmp_path):
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from edge_export.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'litert_torch', 'ai_edge_litert', 'numpy') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr
    assert "Exit codes" in proc.stdout
    res = run_cli_subprocess("export", "--help")
    assert res.exit_code == 0 and "--quantize" in res.stdout and "Exit codes" in res.stdout


def test_integer_inputs_out_of_a_models_range_say_how_to_give_the_range(tmp_path, run_cli, monkeypatch):
    """A one_hot over 8 classes rejects the synthetic ids in [0, 10): the error says where they come
    from and how to give the model's own range (a .pt2 with in-range example inputs)."""
    (tmp_path / "id_models.py").write_text(
        "import torch\n"
        "import torch.nn.functional as F\n"
        "class EightClasses(torch.nn.Module):\n"
        "    def forward(self, ids):\n"
        "        return F.one_hot(ids, 8).float()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    res = run_cli("id_models:EightClasses", "--input-shape", "2,5", "--input-dtype", "int64", "-o", tmp_path / "out" / "m.tflite")
    _check(res, 2, "rejects input (2,5) int64", "drawn from [0, 10)")
    text = " ".join(res.stderr.split())
    assert "torch.export.save" in text and "Traceback" not in res.stderr
    assert not (tmp_path / "out" / "m.tflite").exists()


class _AllocatesSixtyFourGiB(torch.nn.Module):
    def forward(self, x):
        return x + torch.zeros(4, 4, 1024, 1024, 1024).sum()  # 64 GiB of float32, made by the model


def test_a_model_that_allocates_more_than_the_machine_has_is_named_as_such(tmp_path, run_cli):
    """Not "the model rejects input (2,4)": the input is fine, the model asks for 64 GiB."""
    src = tmp_path / "big.pt2"
    torch.export.save(torch.export.export(_AllocatesSixtyFourGiB(), (torch.randn(2, 4),)), src)
    res = run_cli(src, "-o", tmp_path / "out" / "big.tflite")
    _check(res, 2, "64.0 GiB", "forward() asked for")
    assert "rejects input" not in res.stderr and not (tmp_path / "out").exists()
