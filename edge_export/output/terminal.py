"""Who writes where during one CLI command: the single owner of stdout and stderr.

The libraries edge-export drives write to file descriptors 1 and 2 from C++ (the MLIR converter,
absl logging, TFLite Micro) and from Python (torch warnings, litert-torch progress), so hiding them
means pointing the descriptors themselves somewhere else. The CLI's own progress, summary and
errors must still reach the user's terminal, so before redirecting anything the session keeps
duplicates of the original descriptors and writes only to those.

Everything is undone in ``__exit__``, on every exit path (success, parity failure, user error,
Ctrl-C, internal error), and the CLI's streams stay open until the command has printed its last
line. The live display never swaps ``sys.stdout``/``sys.stderr`` (rich's default for ``Live``):
that swap, nested inside the library's own redirection, restored a closed stream and turned every
terminal run into an ``excepthook`` crash with exit 1 (issue 15).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import IO, Optional

from rich.console import Console
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

__all__ = ["TerminalSession", "StageDisplay", "EscapingConsole"]


def _flush_std_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass


class EscapingConsole(Console):
    """A Console that shows control characters in text as escapes (text_safety.for_terminal): the
    one sanitiser of the terminal sink. Model-supplied names reach it in summaries, tables and error
    messages; none of them can move the cursor, clear the screen or recolour what follows. Rich's
    own control segments (the live display's cursor moves) and styles are written as they are."""

    def _render_buffer(self, buffer):  # rich's single point where segments become terminal text
        from rich.segment import Segment

        from .text_safety import for_terminal

        safe = (seg if seg.control else Segment(for_terminal(seg.text), seg.style, seg.control) for seg in buffer)
        return super()._render_buffer(safe)

    def on_broken_pipe(self) -> None:
        """A reader that closed the pipe (``| head``): raise, so the caller decides the exit code
        (rich's own handler exits 1, the code of a failed parity)."""
        raise BrokenPipeError


def _console(stream: Optional[IO[str]], stderr: bool) -> Console:
    if stream is None:
        return EscapingConsole(stderr=stderr, highlight=False, soft_wrap=True)
    return EscapingConsole(file=stream, highlight=False, soft_wrap=True)


class TerminalSession:
    """Owns fds 1 and 2 for one command.

    ``out`` and ``err`` are consoles on duplicates of the original descriptors, valid until the
    session exits. With ``capture`` (the default; ``--verbose`` turns it off) the descriptors and
    ``sys.stdout``/``sys.stderr`` go to a temporary file whose text is kept in ``captured`` after
    exit, so nothing the libraries print reaches the user.
    """

    def __init__(self, capture: bool = True) -> None:
        self.capture = capture
        self.captured = ""
        self.out: Console = _console(None, stderr=False)
        self.err: Console = _console(None, stderr=True)
        self._streams: list[IO[str]] = []
        self._saved: dict[int, int] = {}
        self._old_sys: Optional[tuple] = None
        self._tmp = None
        self._py_capture: Optional[IO[str]] = None

    def _own_stream(self, fd: int) -> Optional[IO[str]]:
        try:
            stream = os.fdopen(os.dup(fd), "w", buffering=1, encoding="utf-8", errors="replace")
        except OSError:  # fd not open (some embedded interpreters, daemons): use sys.* instead
            return None
        self._streams.append(stream)
        return stream

    def __enter__(self) -> "TerminalSession":
        _flush_std_streams()
        self.out = _console(self._own_stream(1), stderr=False)
        self.err = _console(self._own_stream(2), stderr=True)
        if self.capture:
            self._tmp = tempfile.TemporaryFile(mode="w+b")
            for fd in (1, 2):
                try:
                    self._saved[fd] = os.dup(fd)
                    os.dup2(self._tmp.fileno(), fd)
                except OSError:
                    self._saved.pop(fd, None)
            self._py_capture = open(os.dup(self._tmp.fileno()), "w", encoding="utf-8", errors="replace")
            self._old_sys = (sys.stdout, sys.stderr)
            sys.stdout = sys.stderr = self._py_capture
        return self

    def __exit__(self, *exc_info) -> None:
        # Order matters: put Python's streams and the descriptors back before closing what they
        # pointed to, then flush and close our own duplicates last.
        if self._old_sys is not None:
            sys.stdout, sys.stderr = self._old_sys
            self._old_sys = None
        if self._py_capture is not None:
            try:
                self._py_capture.close()
            except (OSError, ValueError):
                pass
            self._py_capture = None
        for fd, dup in self._saved.items():
            try:
                os.dup2(dup, fd)
            finally:
                os.close(dup)
        self._saved.clear()
        if self._tmp is not None:
            self._tmp.seek(0)
            self.captured = self._tmp.read().decode("utf-8", errors="replace")
            self._tmp.close()
            self._tmp = None
        for stream in self._streams:
            try:
                stream.flush()
                stream.close()
            except (OSError, ValueError):
                pass
        self._streams.clear()
        # Later prints (after the command) go to whatever sys.stdout/sys.stderr are then.
        self.out = _console(None, stderr=False)
        self.err = _console(None, stderr=True)


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds} s" if seconds < 60 else f"{seconds // 60} min {seconds % 60:02d} s"


class StageDisplay:
    """The stages of a run: one line each, plus a spinner on the current stage in a terminal.

    Silent with ``quiet``. The spinner is a ``Live`` that does not redirect ``sys.stdout`` or
    ``sys.stderr`` (see the module docstring) and is transient, so the terminal keeps only the
    stage lines and the summary. No spinner when the console is not a terminal (pipes, CI logs) or
    under ``--verbose``, where the libraries' own output would interleave with it.
    """

    def __init__(self, console: Console, quiet: bool, spinner: bool = True) -> None:
        self.console = console
        self.quiet = quiet
        self._spinner = spinner and console.is_terminal and not quiet
        self._live: Optional[Live] = None
        self._label = ""
        self._steps: Optional[tuple[str, float]] = None  # the progress label shown and when its first step began

    def progress(self, label: str, index: int, total: int) -> None:
        """Step ``index`` (0-based, about to run) of ``total`` of a long stage: shown on the
        spinner's line only (step i of n, elapsed, estimate), so pipes and logs get nothing."""
        if self._live is None:
            return
        now = time.monotonic()
        if self._steps is None or self._steps[0] != label or index == 0:
            self._steps = (label, now)
        elapsed = now - self._steps[1]
        estimate = f", about {_duration(elapsed / index * (total - index))} left" if index > 0 else ""
        line = f"{self._label} · {label}: step {index + 1} of {total}, {_duration(elapsed)} elapsed{estimate}"
        self._live.update(Spinner("dots", text=Text(line), style="green"))

    def stage(self, label: str) -> None:
        if self.quiet:
            return
        self._label, self._steps = label, None
        if self._live is not None:
            self._live.console.print(Text.assemble(("•", "dim"), " ", label))
            self._live.update(Spinner("dots", text=Text(label), style="green"))
            return
        self.console.print(Text.assemble(("•", "dim"), " ", label))
        if self._spinner:
            self._live = Live(
                Spinner("dots", text=Text(label), style="green"),
                console=self.console,
                transient=True,
                redirect_stdout=False,
                redirect_stderr=False,
                refresh_per_second=12.5,
            )
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            try:
                self._live.stop()
            finally:
                self._live = None
