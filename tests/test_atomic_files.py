"""Artifacts are staged and committed together; a failure leaves nothing behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from edge_export.output.atomic_files import ArtifactSet, write_atomic


def test_write_atomic_replaces(tmp_path):
    p = tmp_path / "a.bin"
    p.write_bytes(b"old")
    write_atomic(p, b"new")
    assert p.read_bytes() == b"new"
    assert [x.name for x in tmp_path.iterdir()] == ["a.bin"]


def test_artifact_set_failure_leaves_nothing(tmp_path):
    old = tmp_path / "m.tflite"
    old.write_bytes(b"previous")
    with pytest.raises(KeyboardInterrupt):
        with ArtifactSet() as arts:
            arts.add(old, b"new model")
            arts.add(tmp_path / "m.report.json", "{}")
            raise KeyboardInterrupt  # Ctrl-C between staging and commit
    assert old.read_bytes() == b"previous"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["m.tflite"]


def test_artifact_set_commit(tmp_path):
    with ArtifactSet() as arts:
        arts.add(tmp_path / "x.tflite", b"1")
        arts.add(tmp_path / "x.report.md", "# hi")
        arts.commit()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["x.report.md", "x.tflite"]


def test_files_get_the_usual_permissions(tmp_path):
    import os
    import stat

    mask = os.umask(0o022)
    try:
        p = write_atomic(tmp_path / "m.tflite", b"x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE(p.stat().st_mode) == 0o644


def _commit_set(folder, tag):
    """One writer's set of outputs, pausing after each rename (the forced interleaving)."""
    with ArtifactSet() as arts:
        for name in ("m.tflite", "m.report.json", "m.report.md"):
            arts.add(folder / name, tag)
        arts.commit()


def test_concurrent_writers_never_leave_a_mixed_set(tmp_path, monkeypatch):
    import os
    import threading
    import time

    real_replace = os.replace
    delays = {"A": 0.05, "B": 0.0}

    def slow_replace(src, dst):
        real_replace(src, dst)
        time.sleep(delays[Path(dst).read_text()])

    monkeypatch.setattr(os, "replace", slow_replace)
    for _ in range(3):
        first = threading.Thread(target=_commit_set, args=(tmp_path, "A"))
        first.start()
        time.sleep(0.02)  # B commits while A is between its renames
        second = threading.Thread(target=_commit_set, args=(tmp_path, "B"))
        second.start()
        first.join()
        second.join()
        contents = {p.read_text() for p in tmp_path.iterdir()}
        assert len(contents) == 1, sorted((p.name, p.read_text()) for p in tmp_path.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.report.json", "m.report.md", "m.tflite"]


def test_folder_at_a_report_path_fails_before_anything_is_replaced(tmp_path):
    from edge_export.errors import UsageError

    old = tmp_path / "m.tflite"
    old.write_bytes(b"previous model")
    (tmp_path / "m.report.md").mkdir()
    with pytest.raises(UsageError, match="folder is in the way"):
        with ArtifactSet() as arts:
            arts.add(old, b"new model")
            arts.add(tmp_path / "m.report.json", "{}")
            arts.add(tmp_path / "m.report.md", "# new")
            arts.commit()
    assert old.read_bytes() == b"previous model"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.report.md", "m.tflite"]


def test_stale_temp_file_of_a_dead_process_is_removed(tmp_path):
    import os
    import subprocess
    import sys

    from edge_export.output.atomic_files import check_writable_folder

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".m.tflite.edge-export-{dead_pid}-k2x9q1.tmp"
    live = tmp_path / f".m.tflite.edge-export-{os.getppid()}-a1b2c3.tmp"  # a running process's
    foreign = tmp_path / ".notes.tmp"  # not ours: never touched
    for p in (stale, live, foreign):
        p.write_bytes(b"x")
    check_writable_folder(tmp_path / "m.tflite")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, foreign.name])


def test_temp_files_are_named_for_the_writer(tmp_path):
    import os

    from edge_export.output.atomic_files import _stage

    tmp = _stage(tmp_path / "m.tflite", b"x")
    assert tmp.name.startswith(f".m.tflite.edge-export-{os.getpid()}-") and tmp.name.endswith(".tmp")


def test_sigterm_is_handled_like_ctrl_c(tmp_path):
    """SIGTERM to a running export: a message, exit 143, and no output or temp file left."""
    import os
    import signal
    import subprocess
    import sys

    import torch

    from model_zoo import small_cnn

    src = tmp_path / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (torch.randn(1, 3, 16, 16),)), src)
    out = tmp_path / "out"
    out.mkdir()
    exe = Path(sys.executable).with_name("edge-export")
    proc = subprocess.Popen(
        [str(exe), str(src), "-o", str(out / "cnn.tflite")], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    seen = []
    for line in proc.stderr:  # wait until the conversion stage is running
        seen.append(line)
        if "Tracing and converting" in line:
            proc.send_signal(signal.SIGTERM)
            break
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 143, (proc.returncode, "".join(seen) + rest)
    assert "terminated" in rest and "Traceback" not in rest, rest
    assert list(out.iterdir()) == []
    assert os.path.exists(src)
