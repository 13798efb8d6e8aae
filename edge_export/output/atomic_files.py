"""Atomic artifact writes: a temporary file in the destination folder, then os.replace.

A failure, Ctrl-C or kill never leaves a half-written file at the destination, and an existing file
is only replaced once the new one is complete. ``ArtifactSet`` stages several files and commits them
together at the end of a run, so a run that fails late leaves none of its outputs behind. The commit
holds an exclusive lock on the output set (``.<name>.lock`` beside the first artifact) and checks
every destination before replacing any, so two runs writing the same outputs leave one run's
complete set, never a mix.

Temporary files are named ``.<name>.edge-export-<pid>-<random>.tmp``: one left by a SIGKILL is
removed by the next run that writes to that folder, once its process is gone.
"""

from __future__ import annotations

import os
import stat
import re
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from ..errors import UsageError

__all__ = [
    "write_atomic",
    "check_writable_folder",
    "remove_created_folders",
    "check_outputs_apart",
    "check_artifact_paths",
    "same_file",
    "remove_stale_temp_files",
    "ArtifactSet",
]

_TEMP_NAME = re.compile(r"^\..*\.edge-export-(\d+)-[A-Za-z0-9_]*\.tmp$")


def _temp_prefix(name: str) -> str:
    return f".{name}.edge-export-{os.getpid()}-"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's live process
    return True


def remove_stale_temp_files(folder: Path) -> list[Path]:
    """Remove edge-export temporary files whose process is gone (left by a SIGKILL)."""
    removed = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return removed
    for entry in entries:
        match = _TEMP_NAME.match(entry.name)
        if match and int(match.group(1)) != os.getpid() and not _process_alive(int(match.group(1))):
            try:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
            except OSError:
                pass
    return removed


def check_writable_folder(path: Path, created: list[Path] | None = None) -> None:
    """Fail early (before minutes of conversion) when the output folder cannot be written.

    Folders this creates are appended to ``created`` so that a failed run can remove them again.
    """
    folder = path.parent if path.parent != Path("") else Path(".")
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"Cannot write {path}: {folder} is a file, not a folder.", "Choose another -o/--output path.")
    missing = []
    ancestor = folder
    while not ancestor.exists() and ancestor != ancestor.parent:
        missing.append(ancestor)
        ancestor = ancestor.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if created is not None:
            created.extend(p for p in missing if p not in created)
        fd, probe = tempfile.mkstemp(prefix=_temp_prefix("probe"), suffix=".tmp", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(
            f"Cannot write to the output folder {folder}: {exc.strerror or exc}.",
            "Choose a writable folder with -o/--output, or fix the folder's permissions.",
        ) from exc
    if path.exists() and path.is_dir():
        raise UsageError(f"The output path {path} is a directory.", "Pass a file path such as out/model.tflite.")
    remove_stale_temp_files(folder)


def remove_created_folders(created: Sequence[Path]) -> None:
    """After a failed run: remove the folders it created, deepest first, if they are still empty."""
    for folder in sorted(created, key=lambda p: len(p.parts), reverse=True):
        try:
            folder.rmdir()
        except OSError:
            pass  # not empty (someone else wrote there) or already gone


def same_file(a: Path, b: Path) -> bool:
    """The same file through `..`, symlinks or hard links (the latter only when both exist)."""
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_dev, sa.st_ino) == (sb.st_dev, sb.st_ino)


def _inside_folder_contents(output: Path, folder: Path) -> bool:
    """Whether writing ``output`` would replace a file of the input folder ``folder``."""
    try:
        out_stat = os.stat(output)
    except OSError:
        return False  # a new file changes none of the folder's files
    real_folder = os.path.realpath(folder)
    if os.path.commonpath([os.path.realpath(output), real_folder]) == real_folder:
        return True
    if out_stat.st_nlink < 2:
        return False
    for root, _, files in os.walk(real_folder):
        for name in files:
            try:
                st = os.stat(os.path.join(root, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (out_stat.st_dev, out_stat.st_ino):
                return True
    return False


def check_outputs_apart(outputs: Sequence[tuple[str, Path]], inputs: Sequence[tuple[str, Path]]) -> None:
    """Refuse (exit 2, before any work) an artifact path that is an input, another artifact or a
    folder.

    ``outputs`` and ``inputs`` are (what it is, path) pairs; "what it is" names the option.
    """
    for i, (label, path) in enumerate(outputs):
        if path.is_dir():
            raise UsageError(
                f"Cannot write {label} at {path}: a folder is in the way.",
                f"Remove or rename that folder, or choose another path for {label}.",
            )
        _refuse_special_file(label, path)
        for in_label, in_path in inputs:
            clash = _inside_folder_contents(path, in_path) if in_path.is_dir() else same_file(path, in_path)
            if clash:
                raise UsageError(
                    f"The output {path} ({label}) is the input {in_path} ({in_label}); writing it would "
                    "replace that input.",
                    f"Choose another path for {label}.",
                )
        for other_label, other in outputs[:i]:
            if same_file(path, other):
                raise UsageError(
                    f"The outputs {label} and {other_label} are the same file ({path}); one would "
                    "overwrite the other.",
                    f"Choose another path for {label}.",
                )


def _refuse_special_file(label: str, path: Path) -> None:
    """Artifacts are regular files: a device, a FIFO or a socket (``-o /dev/null``, which would also
    put the reports into /dev) is refused, as is any path inside /dev."""
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode
    except OSError:
        mode = None
    special = mode is not None and not stat.S_ISREG(mode)
    if special or real == "/dev" or real.startswith(("/dev/", "/proc/", "/sys/")):
        raise UsageError(
            f"Cannot write {label} at {path}: it is a device, a special file or a path under /dev, /proc or /sys, not a regular file in a folder.",
            f"Choose a path in an ordinary folder for {label} (to discard the artifacts, write them to a temporary folder).",
        )


def check_artifact_paths(files: Sequence[tuple[Path, object]], expected: Sequence[tuple[str, Path]]) -> None:
    """The artifacts a (confined) run returned go only where the parent checked, before the run,
    that an artifact may go: a path outside that set is an internal error, and nothing is written."""
    allowed = {os.path.realpath(p) for _, p in expected}
    for path, data in files:
        if os.path.realpath(path) not in allowed or not isinstance(data, (bytes, str)):
            raise RuntimeError(f"a run returned an artifact at {str(path)[:200]!r}, which was not among the checked outputs")


def _default_mode() -> int:
    """What open() would give a new file: 0o666 less the umask (mkstemp makes files 0o600)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _stage(path: Path, data: bytes) -> Path:
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path.name), suffix=".tmp", dir=path.parent)
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


class _OutputSetLock:
    """An exclusive flock on ``.<name>.lock``; the file is removed on release. After taking the
    lock, the path is checked to still be the locked file (a previous holder may have removed it)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def __enter__(self) -> "_OutputSetLock":
        import fcntl

        while True:
            fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held, current = os.fstat(fd), os.stat(self.path)
            except FileNotFoundError:
                os.close(fd)
                continue
            except BaseException:
                os.close(fd)
                raise
            if (held.st_dev, held.st_ino) == (current.st_dev, current.st_ino):
                self._fd = fd
                return self
            os.close(fd)

    def __exit__(self, *exc: object) -> None:
        if self._fd is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


@contextmanager
def _signals_deferred() -> Iterator[None]:
    """Ctrl-C or SIGTERM during the renames takes effect after the last one, so that a signal never
    leaves half of one run's outputs beside half of another's."""
    import signal
    import threading

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    if threading.current_thread() is not threading.main_thread() or None in previous.values():
        yield  # handlers run in the main thread only, and one installed from C cannot be restored
        return
    received: list[int] = []
    for sig in previous:
        signal.signal(sig, lambda signum, frame: received.append(signum))
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for sig in received:
            signal.raise_signal(sig)


class ArtifactSet:
    """Stage files, then commit them all; on any exception, nothing staged remains."""

    def __init__(self) -> None:
        self._staged: list[tuple[Path, Path]] = []

    def add(self, path: str | Path, data: bytes | str) -> Path:
        path = Path(path)
        payload = data.encode("utf-8") if isinstance(data, str) else data
        self._staged.append((_stage(path, payload), path))
        return path

    def lock_path(self) -> Path | None:
        if not self._staged:
            return None
        first = self._staged[0][1]
        return first.with_name(f".{first.with_suffix('').name}.lock")

    def _check_destinations(self) -> None:
        for _, dest in self._staged:
            if dest.is_dir():
                raise UsageError(
                    f"Cannot write {dest}: a folder is in the way; nothing was replaced.",
                    "Remove or rename that folder, or choose another output path.",
                )

    def commit(self) -> list[Path]:
        done: list[Path] = []
        lock = self.lock_path()
        try:
            if lock is None:
                return done
            with _OutputSetLock(lock):
                self._check_destinations()
                with _signals_deferred():
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
