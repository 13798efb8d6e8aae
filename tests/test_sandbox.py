"""The sandbox alone keeps hostile archives inert: with the allow-list reader switched off by its test
hook, each code-running payload does run (it prints PAYLOAD_RAN), inside the confined child, and
fails to create its marker in the user's folder or to reach a server on this machine.

Controls: the same archives do create their markers when trusted (--trust-pickle runs unconfined).
"""

from __future__ import annotations

import os
import socket
import sys
import threading

import pytest

import hostile_archives as hostile

pytestmark = [pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux's Landlock and namespaces"), pytest.mark.hostile]

KINDS = {
    "not_json": hostile.program_member_not_json,
    "duplicate": lambda clean, marker: hostile.duplicate_program(clean, marker, poisoned_first=False),
    "param": hostile.parameter_name_breakout,
    "guard": hostile.guard_code,
}


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return hostile.build_clean(tmp_path_factory.mktemp("clean"))


def _run(run_cli, monkeypatch, archive, out, *extra, checks_off=True):
    """The CLI in this process: what is confined is the child it forks for the archive, as the console
    script does (the hook is read when the archive is, not at start-up); a fresh process would only
    add seconds of imports. A parent that converted before is test_confined_export_after_conversions."""
    if checks_off:
        monkeypatch.setenv(hostile_env, "1")
    return run_cli(archive, "-o", out / "m.tflite", "--no-validate", "--verbose", *extra)


hostile_env = "EDGE_EXPORT_TEST_DISABLE_ARCHIVE_CHECKS"


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_payload_runs_confined_and_cannot_write(run_cli, monkeypatch, clean, tmp_path, kind):
    marker = tmp_path / f"MARKER_{kind}"
    archive = hostile.write(tmp_path / "evil.pt2", KINDS[kind](clean, marker))
    out = tmp_path / "out"
    out.mkdir()
    res = _run(run_cli, monkeypatch, archive, out)
    assert "PAYLOAD_RAN" in res.stderr, res.stderr[-3000:]  # the checks were off: the payload ran
    assert "Permission denied" in res.stderr, res.stderr[-3000:]
    assert not marker.exists()
    assert res.exit_code != 0 and list(out.iterdir()) == []


@pytest.mark.slow
def test_trusted_control_does_run_the_payload(run_cli, clean, tmp_path):
    marker = tmp_path / "MARKER"
    archive = hostile.write(tmp_path / "evil.pt2", hostile.parameter_name_breakout(clean, marker))
    out = tmp_path / "out"
    out.mkdir()
    # in this process: trusted means unconfined, so the payload (a mkdir) runs here as it would there
    run_cli(archive, "-o", out / "m.tflite", "--no-validate", "--trust-pickle")
    assert marker.exists()


@pytest.mark.slow
def test_payload_cannot_reach_the_network(run_cli, monkeypatch, clean, tmp_path):
    """A payload that connects to a server listening on this machine's loopback never arrives."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    code = (
        "__import__('os').write(2, b'PAYLOAD_RAN\\n') and "
        f"__import__('socket').create_connection(('127.0.0.1', {port}), timeout=3)"
    )
    connected = []

    def accept():
        for _ in range(60):
            try:
                connected.append(server.accept())
                return
            except socket.timeout:
                if done.is_set():
                    return

    done = threading.Event()
    thread = threading.Thread(target=accept)
    thread.start()
    marker = tmp_path / "unused"
    evil = hostile.parameter_name_breakout(clean, marker)
    expr = hostile.dotless_expression(marker)
    net = "exec(bytes([" + ",".join(str(b) for b in code.encode()) + "]))"
    evil = [(n, d.replace(expr.encode(), net.encode())) for n, d in evil]
    archive = hostile.write(tmp_path / "net.pt2", evil)
    out = tmp_path / "out"
    out.mkdir()
    try:
        res = _run(run_cli, monkeypatch, archive, out)
    finally:
        done.set()
        thread.join()
        server.close()
    assert "PAYLOAD_RAN" in res.stderr, res.stderr[-3000:]
    assert connected == [] and res.exit_code != 0


def test_status_is_reported(tmp_path):
    """How a run was confined is worded for the report, including when nothing confines it."""
    from edge_export.processes.sandbox import SandboxStatus

    assert "Landlock ABI 4" in SandboxStatus(4, True).describe()
    assert "network namespace" in SandboxStatus(4, True).describe()
    assert SandboxStatus(0, False, "Landlock unavailable").describe().startswith("not confined: Landlock unavailable")


def test_restricted_unpickler_refuses_callables():
    import pickle

    from edge_export.processes.sandbox import RestrictedUnpickler, SandboxStatus, _restricted_loads

    class Evil:
        def __reduce__(self):
            return (os.system, ("true",))

    with pytest.raises(RuntimeError, match="cannot be read safely"):
        _restricted_loads(pickle.dumps(Evil()))
    assert _restricted_loads(pickle.dumps(SandboxStatus(7, True))) == SandboxStatus(7, True)
    with pytest.raises(pickle.UnpicklingError):
        RestrictedUnpickler(__import__("io").BytesIO(pickle.dumps(Evil()))).load()


@pytest.mark.slow
def test_confined_export_after_conversions_in_the_same_process(tmp_path, clean):
    """The Python API in a long-lived process: the converter's thread pools (OpenMP, JAX's MLIR pool)
    exist in the parent when an archive is exported confined; the forked child must not wait on them
    (it hung in JAX's lowering before the child renewed the pools)."""
    import subprocess

    script = (
        "import torch, sys\n"
        "from edge_export import export\n"
        "export(torch.nn.Sequential(torch.nn.Linear(4, 2)), example_inputs=(torch.randn(1, 4),), output=sys.argv[2] + '/a.tflite')\n"
        "r = export(sys.argv[1], output=sys.argv[2] + '/b.tflite')\n"
        "print('VERDICT', r.verdict, r.report['model']['isolation'])\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(clean), str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "VERDICT passed confined child process" in proc.stdout


def _interrupted(channel):
    import signal

    os.kill(os.getpid(), signal.SIGINT)  # what Ctrl-C in a terminal sends the whole process group


def test_a_child_ended_by_ctrl_c_is_the_users_interrupt_not_a_crash():
    from edge_export.processes.sandbox import run_confined

    with pytest.raises(KeyboardInterrupt):
        run_confined(_interrupted)


def _arrays(channel):
    import numpy as np

    return {"contiguous": np.arange(6, dtype=np.float32).reshape(2, 3), "fortran": np.arange(6).reshape(2, 3).T, "strided": np.zeros((3, 4))[:, :2]}


def test_a_result_holding_numpy_arrays_is_read_back():
    """A contiguous array pickles (protocol 5) through numpy's _frombuffer: a LeViT micro export from
    a .pt2, whose result held one, was exit 4."""
    import numpy as np

    from edge_export.processes.sandbox import run_confined

    result, _ = run_confined(_arrays)
    expected = _arrays(None)
    assert result.keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_array_equal(result[key], value)
        assert result[key].dtype == value.dtype
