"""User input that used to end as "internal error" (exit 4): oversized shapes and files, a model
whose own code fails or exits, a device instead of a file, Inf outputs (issue 13, item 5)."""

from __future__ import annotations

import json
import struct
import sys
import zlib

import numpy as np
import pytest


def _check(res, code, *needles):
    assert res.exit_code == code, (res.exit_code, res.stdout, res.stderr)
    text = " ".join(res.stderr.split())
    for needle in needles:
        assert needle.lower() in text.lower(), text
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr


def _no_outputs(folder):
    assert not [p.name for p in folder.iterdir() if p.name.startswith(("out", ".out"))]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """Write a module into tmp_path and make it importable as `package.module:attr` from there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    written = []

    def write(name: str, source: str) -> str:
        (tmp_path / f"{name}.py").write_text(source)
        written.append(name)
        return name

    yield write
    for name in written:
        sys.modules.pop(name, None)


MODELS = '''
import torch

class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, x):
        return self.conv(x)

class RaisingConstructor(torch.nn.Module):
    def __init__(self):
        raise ValueError("config file missing: /etc/model.yaml\\nsecond line of the message")

class HugeWeights(torch.nn.Module):
    """Weights beyond float16's 65504 become inf in an fp16 export."""
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        with torch.no_grad():
            self.fc.weight.fill_(1e6)

    def forward(self, x):
        return self.fc(x)

class OneCallOnly(torch.nn.Module):
    """Accepts the eager check and the trace, then raises on the parity samples."""
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        if not torch.compiler.is_exporting():
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("this model refuses a second call\\nand says more on a second line")
        return x * 2

class InfOutput(torch.nn.Module):
    def forward(self, x):
        return torch.log(x * 0.0) + x
'''


def test_input_shape_beyond_memory(tmp_path, run_cli, user_module):
    mod = user_module("models_mem", MODELS)
    res = run_cli(f"{mod}:Conv", "--input-shape", "1,3,100000,100000", "-o", tmp_path / "out.tflite")
    _check(res, 2, "GiB of memory", "--input-shape")
    _no_outputs(tmp_path)


def _npy_header(shape, descr="<f4") -> bytes:
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple(shape)}, }}"
    header += " " * (118 - len(header)) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode()


def test_npy_header_declaring_256_gib(tmp_path, run_cli, user_module):
    mod = user_module("models_npy", MODELS)
    bad = tmp_path / "calib.npy"
    bad.write_bytes(_npy_header((64, 1024, 1024, 1024)))
    res = run_cli(f"{mod}:Conv", "--input-shape", "1,3,8,8", "-q", "int8", "--calibration-data", bad, "-o", tmp_path / "out.tflite")
    _check(res, 2, "256.0 GiB", "truncated")
    _no_outputs(tmp_path)


def test_npy_larger_than_memory(tmp_path, run_cli, user_module):
    """A (sparse) 1 TiB .npy whose size matches its header: refused by the memory check, not by numpy."""
    mod = user_module("models_npy_big", MODELS)
    big = tmp_path / "calib.npy"
    shape = (1024, 3, 8, 11184810)  # float32: 1 TiB
    header = _npy_header(shape)
    declared = int(np.prod(shape, dtype=np.int64)) * 4
    with open(big, "wb") as fh:
        fh.write(header)
        fh.truncate(len(header) + declared)
    res = run_cli(f"{mod}:Conv", "--input-shape", "1,3,8,8", "-q", "int8", "--calibration-data", big, "-o", tmp_path / "out.tflite")
    _check(res, 2, "of memory, but only")
    _no_outputs(tmp_path)


def test_png_claiming_100000_square_pixels(tmp_path, run_cli, user_module):
    mod = user_module("models_png", MODELS)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    images = tmp_path / "images"
    images.mkdir()
    (images / "a.png").write_bytes(
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", 100000, 100000, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(b"\x00" * 1000))
        + chunk(b"IEND", b"")
    )
    res = run_cli(f"{mod}:Conv", "--input-shape", "1,3,8,8", "-q", "int8", "--calibration-data", images, "-o", tmp_path / "out.tflite")
    _check(res, 2, "a.png")
    _no_outputs(tmp_path)


def test_model_constructor_raises(tmp_path, run_cli, user_module):
    mod = user_module("models_ctor", MODELS)
    res = run_cli(f"{mod}:RaisingConstructor", "--input-shape", "1,4", "-o", tmp_path / "out.tflite")
    _check(res, 2, "ValueError: config file missing: /etc/model.yaml")
    assert "second line" not in res.stderr
    _no_outputs(tmp_path)


def test_module_that_calls_sys_exit_on_import(tmp_path, run_cli, user_module):
    mod = user_module("script_like", "import sys\nsys.exit(0)\n")
    res = run_cli(f"{mod}:Model", "--input-shape", "1,4", "-o", tmp_path / "out.tflite")
    _check(res, 2, "sys.exit(0)", "__main__")
    _no_outputs(tmp_path)


def test_inspect_a_device():
    """In a child limited to 4 GB of address space: before the fix, reading /dev/zero filled memory."""
    import os
    import resource
    import subprocess

    from cli_harness import CliResult

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    proc = subprocess.run(
        [sys.executable, "-m", "edge_export.cli", "inspect", "/dev/zero"],
        capture_output=True, text=True, timeout=120, preexec_fn=limit, env={**os.environ},
    )
    _check(CliResult(proc.returncode, proc.stdout, proc.stderr), 2, "not a regular file")


def _parity_failure(tmp_path, res, stem="out"):
    assert res.exit_code == 1, (res.exit_code, res.stderr)
    assert "internal error" not in res.stderr
    report = json.loads((tmp_path / f"{stem}.report.json").read_text())
    output = report["validation"]["outputs"][0]
    assert output["passed"] is False and "NaN or Inf" in output["error"]
    assert "200" not in (tmp_path / f"{stem}.report.md").read_text().split("## Outputs")[1].split("\n\n")[1]
    return output


def test_fp16_export_of_weights_beyond_fp16_range(tmp_path, run_cli, user_module):
    mod = user_module("models_fp16", MODELS)
    res = run_cli(f"{mod}:HugeWeights", "--input-shape", "1,4", "-q", "fp16", "--samples", "2", "-o", tmp_path / "out.tflite")
    assert "LiteRT" in _parity_failure(tmp_path, res)["error"]


def test_model_whose_output_is_inf(tmp_path, run_cli, user_module):
    mod = user_module("models_inf", MODELS)
    res = run_cli(f"{mod}:InfOutput", "--input-shape", "1,4", "--samples", "2", "-o", tmp_path / "out.tflite")
    assert "PyTorch" in _parity_failure(tmp_path, res)["error"]


def test_forward_that_calls_sys_exit(tmp_path, run_cli):
    import torch

    class Exits(torch.nn.Module):
        def forward(self, x):
            raise SystemExit(3)

    from edge_export.errors import InputSpecError
    from edge_export.loading.inputs import (
        check_model_accepts,
        example_tensors,
        specs_from_options,
    )

    specs = specs_from_options([(1, 4)], [])
    with pytest.raises(InputSpecError, match=r"sys\.exit\(3\)"):
        check_model_accepts(Exits(), example_tensors(specs), specs)


def test_model_raising_during_parity(tmp_path, run_cli, user_module):
    mod = user_module("models_parity", MODELS)
    res = run_cli(f"{mod}:OneCallOnly", "--input-shape", "1,4", "--samples", "2", "-o", tmp_path / "out.tflite")
    _check(res, 2, "RuntimeError on parity sample 1 of 2", "this model refuses a second call")
    assert "second line" not in res.stderr
    _no_outputs(tmp_path)
