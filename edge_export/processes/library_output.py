"""Keep litert-torch's, absl's and torch's own chatter off the user's terminal unless --verbose.

litert-torch prints progress through rich, the MLIR converter and the LiteRT runtime log through
absl/glog straight to file descriptor 2, and torch warns through ``warnings``. We silence the first
with its documented environment switch, capture fd 2 into a temporary file (kept so that an error
message can quote it), and record warnings instead of printing them.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["CapturedOutput", "quiet_libraries"]


@dataclass
class CapturedOutput:
    text: str = ""
    warnings: list[str] = field(default_factory=list)


@contextlib.contextmanager
def quiet_libraries(verbose: bool = False) -> Iterator[CapturedOutput]:
    """Send the libraries' stdout and stderr (native fds 1 and 2, and Python's sys.stdout/stderr)
    to one temporary file; restore everything on exit. The CLI's own output goes to duplicates of
    the original fds, made before this is entered."""
    captured = CapturedOutput()
    if verbose:
        yield captured
        return

    old_env = os.environ.get("LITERT_TORCH_SHOW_PROGRESS")
    os.environ["LITERT_TORCH_SHOW_PROGRESS"] = "n"
    loggers = [logging.getLogger(), logging.getLogger("absl")]
    old_levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)

    old_streams = (sys.stdout, sys.stderr)
    for stream in old_streams:
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    tmp = tempfile.TemporaryFile(mode="w+b")
    saved: dict[int, int] = {}
    for fd in (1, 2):
        try:
            saved[fd] = os.dup(fd)
            os.dup2(tmp.fileno(), fd)
        except OSError:  # no such fd (some embedded interpreters): leave it alone
            saved.pop(fd, None)
    py_stream = open(os.dup(tmp.fileno()), "w", encoding="utf-8", errors="replace")
    sys.stdout = sys.stderr = py_stream
    try:
        # catch_warnings is scoped to this block (no global filter); it records rather than prints.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield captured
            finally:
                captured.warnings = [str(w.message) for w in caught]
    finally:
        sys.stdout, sys.stderr = old_streams
        py_stream.close()
        for fd, dup in saved.items():
            os.dup2(dup, fd)
            os.close(dup)
        tmp.seek(0)
        captured.text = tmp.read().decode("utf-8", errors="replace")
        tmp.close()
        for lg, level in zip(loggers, old_levels):
            lg.setLevel(level)
        if old_env is None:
            os.environ.pop("LITERT_TORCH_SHOW_PROGRESS", None)
        else:
            os.environ["LITERT_TORCH_SHOW_PROGRESS"] = old_env
