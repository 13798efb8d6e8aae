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

    sys.stderr.flush()
    saved_fd = None
    tmp = None
    try:
        saved_fd = os.dup(2)
        tmp = tempfile.TemporaryFile(mode="w+b")
        os.dup2(tmp.fileno(), 2)
    except OSError:  # no real fd 2 (e.g. some embedded interpreters): just don't capture
        if saved_fd is not None:
            os.close(saved_fd)
        saved_fd = None
    # Python-level writes to sys.stderr (progress bars such as ai-edge-quantizer's) go to the same
    # capture; the CLI writes its own messages to a duplicate of the original fd 2.
    old_stderr = sys.stderr
    py_stderr = open(os.dup(2), "w", encoding="utf-8", errors="replace") if saved_fd is not None else None
    if py_stderr is not None:
        sys.stderr = py_stderr
    try:
        # catch_warnings is scoped to this block (no global filter); it records rather than prints.
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                yield captured
            finally:
                captured.warnings = [str(w.message) for w in caught]
    finally:
        if py_stderr is not None:
            sys.stderr = old_stderr
            py_stderr.close()
        if saved_fd is not None:
            sys.stderr.flush()
            os.dup2(saved_fd, 2)
            os.close(saved_fd)
        if tmp is not None:
            tmp.seek(0)
            captured.text = tmp.read().decode("utf-8", errors="replace")
            tmp.close()
        for lg, level in zip(loggers, old_levels):
            lg.setLevel(level)
        if old_env is None:
            os.environ.pop("LITERT_TORCH_SHOW_PROGRESS", None)
        else:
            os.environ["LITERT_TORCH_SHOW_PROGRESS"] = old_env
