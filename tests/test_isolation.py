"""Native code that crashes (LiteRT, TFLite Micro, ai-edge-quantizer) runs in a child process: a crash
is exit 3 naming the stage and the backend, and `--quant-backend auto` falls back (issue 13, item 7).

No flatbuffer that passes the verifier and still crashes the runtime is known, so the crash is forced:
directly through ``run_isolated``, and in the CLI through the test hook that makes the child of one
named stage abort as a native library does."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os

import pytest
import torch
from model_zoo import small_cnn

from edge_export.errors import QuantizationError
from edge_export.processes.isolation import CRASH_HOOK_ENV, NativeCrashError, run_isolated, send_message, start_isolated

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def test_result_and_exceptions_come_back():
    assert run_isolated(lambda a, b=0: (a + b, b"x" * 3_000_000)[0], 2, b=3, stage="s", backend="b") == 5

    def refuse():
        raise QuantizationError("no recipe", "try fp16")

    with pytest.raises(QuantizationError) as caught:
        run_isolated(refuse, stage="s", backend="b")
    assert (caught.value.message, caught.value.hint) == ("no recipe", "try fp16")


def _talk(count: int, pause: float) -> bytes:
    import time

    for i in range(count):
        send_message({"i": i, "x": float("nan") if i == 1 else i / 4})
    time.sleep(pause)
    return b"y" * 3_000_000


def test_a_background_child_sends_messages_then_its_result():
    import math

    run = start_isolated(_talk, 5, 0.1, stage="s", backend="b")
    messages = list(run.events())
    assert [m["i"] for m in messages] == [0, 1, 2, 3, 4] and math.isnan(messages[1]["x"])
    assert run.result() == b"y" * 3_000_000
    assert run.ended
    with pytest.raises(ChildProcessError):  # reaped
        os.waitpid(run.pid, os.WNOHANG)


def test_a_background_child_past_the_deadline_is_a_timeout_and_cancel_kills_it():
    import time

    run = start_isolated(_talk, 0, 30.0, stage="s", backend="b")
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        list(run.events(deadline=time.monotonic() + 0.3))
    assert 0.3 <= time.monotonic() - start < 2.0
    run.cancel()
    run.cancel()  # twice is once
    with pytest.raises(ChildProcessError):
        os.waitpid(run.pid, os.WNOHANG)


def test_a_background_childs_errors_and_crashes_come_back_as_run_isolateds():
    def refuse():
        raise QuantizationError("no recipe", "try fp16")

    with pytest.raises(QuantizationError):
        start_isolated(refuse, stage="s", backend="b").result()
    with pytest.raises(NativeCrashError) as caught:
        start_isolated(os.abort, stage="PT2E", backend="torchao").result()
    assert caught.value.signal_name == "SIGABRT" and "PT2E" in caught.value.message


def test_abort_in_the_child_is_a_named_error():
    with pytest.raises(NativeCrashError) as caught:
        run_isolated(os.abort, stage="int16x8 quantization", backend="ai-edge-quantizer")
    err = caught.value
    assert err.exit_code == 3 and err.signal_name == "SIGABRT"
    assert "int16x8 quantization" in err.message and "ai-edge-quantizer" in err.message


def test_segfault_names_the_operator_from_the_library_log():
    def crash():
        os.write(2, b"ERROR: Node number 7 (TRANSPOSE) failed to invoke.\n")
        ctypes.string_at(0)  # a read of address 0: SIGSEGV

    with pytest.raises(NativeCrashError) as caught:
        run_isolated(crash, stage="parity check", backend="the LiteRT interpreter")
    assert caught.value.signal_name == "SIGSEGV" and caught.value.operator == "TRANSPOSE"
    assert "at operator TRANSPOSE" in caught.value.message


@pytest.fixture(scope="module")
def cnn_pt2(tmp_path_factory):
    path = tmp_path_factory.mktemp("iso") / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (X,)), path)
    return path


def _stderr_text(res) -> str:
    return " ".join(res.stderr.split())


def test_crash_in_parity_run_is_exit_3(cnn_pt2, tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv(CRASH_HOOK_ENV, "parity check")
    res = run_cli(cnn_pt2, "-o", tmp_path / "out.tflite", "--samples", "2")
    assert res.exit_code == 3, res.stderr
    text = _stderr_text(res)
    assert "The parity check crashed inside the LiteRT interpreter" in text and "SIGABRT" in text
    assert "Traceback" not in res.stderr
    assert not list(tmp_path.glob("out*"))


def test_crash_of_one_quantization_backend(cnn_pt2, tmp_path, run_cli, monkeypatch):
    monkeypatch.setenv(CRASH_HOOK_ENV, "int8 quantization")  # the ai-edge-quantizer (flatbuffer) child
    res = run_cli(cnn_pt2, "-q", "int8", "--quant-backend", "flatbuffer", "-o", tmp_path / "fb.tflite", "--samples", "2")
    assert res.exit_code == 3, res.stderr
    assert "int8 quantization crashed inside ai-edge-quantizer" in _stderr_text(res)

    # auto treats the crashed backend as a failed one and keeps the other.
    res = run_cli(cnn_pt2, "-q", "int8", "-o", tmp_path / "auto.tflite", "--samples", "2")
    assert res.exit_code in (0, 1), res.stderr
    report = json.loads((tmp_path / "auto.report.json").read_text())
    attempts = {a["backend"]: a for a in report["quantization"]["attempts"]}
    assert attempts["flatbuffer"]["ok"] is False and "crashed" in attempts["flatbuffer"]["error"]
    assert report["quantization"]["backend"] == "pt2e"


@pytest.mark.slow
def test_isolated_export_is_deterministic(cnn_pt2, tmp_path, run_cli):
    """The flatbuffer backend: its quantization, candidate parity run and parity check all run isolated."""
    digests = []
    for name in ("a", "b"):
        res = run_cli(cnn_pt2, "-q", "int8", "--quant-backend", "flatbuffer", "-o", tmp_path / f"{name}.tflite", "--samples", "2")
        assert res.exit_code == 0, res.stderr
        digests.append(hashlib.sha256((tmp_path / f"{name}.tflite").read_bytes()).hexdigest())
        report = json.loads((tmp_path / f"{name}.report.json").read_text())
        assert report["validation"]["outputs"][0]["passed"]
    assert digests[0] == digests[1]
