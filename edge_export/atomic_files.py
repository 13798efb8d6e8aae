"""Atomic artifact writes: a temporary file in the destination folder, then os.replace.

A failure, Ctrl-C or kill never leaves a half-written file at the destination, and an existing file
is only replaced once the new one is complete. ``ArtifactSet`` stages several files and commits them
together at the end of a run, so a run that fails late leaves none of its outputs behind.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import UsageError

__all__ = ["write_atomic", "check_writable_folder", "ArtifactSet"]


def check_writable_folder(path: Path) -> None:
    """Fail early (before minutes of conversion) when the output folder cannot be written."""
    folder = path.parent if path.parent != Path("") else Path(".")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"Cannot write {path}: {folder} is a file, not a folder.", "Choose another -o/--output path.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".edge-export-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(
            f"Cannot write to the output folder {folder}: {exc.strerror or exc}.",
            "Choose a writable folder with -o/--output, or fix the folder's permissions.",
        ) from exc
    if path.exists() and path.is_dir():
        raise UsageError(f"The output path {path} is a directory.", "Pass a file path such as out/model.tflite.")


def _default_mode() -> int:
    """What open() would give a new file: 0o666 less the umask (mkstemp makes files 0o600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _stage(path: Path, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, _default_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    path = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = _stage(path, payload)
    try:
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


class ArtifactSet:
    """Stage files, then commit them all; on any exception, nothing staged remains."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def add(self, path: str | Path, data: bytes | str) -> Path:
        path = Path(path)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        self._staged.append((_stage(path, payload), path))
        return path

    def commit(self) -> list[Path]:
        done = []
        try:
            for tmp, dest in self._staged:
                os.replace(tmp, dest)
                done.append(dest)
        finally:
            self.discard()
        return done

    def discard(self) -> None:
        for tmp, _ in self._staged:
            tmp.unlink(missing_ok=True)
        self._staged.clear()

    def __enter__(self) -> "ArtifactSet":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.discard()
