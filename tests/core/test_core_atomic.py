"""Artifacts are staged and committed together; a failure leaves nothing behind."""

from __future__ import annotations

import pytest

from edge_export.atomic_files import ArtifactSet, write_atomic


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
