"""Run native code that may crash (LiteRT and TFLite Micro runs, ai-edge-quantizer) in a child process.

A segfault or abort inside a native library used to take edge-export down with it: exit 134 or 139,
no message, not even with --debug (``--quantize int16x8`` on a ViT-style classifier died by SIGABRT
right after ai-edge-quantizer's transformations). ``run_isolated`` forks (cheap: the heavy libraries
are already imported, and the child shares their pages), runs the function in the child and sends
its result, or its exception, back through a pipe. A child killed by a signal becomes a
``NativeCrashError`` (exit 3) naming the stage, the backend and, when the library's last words name
one, the operator; ``--quant-backend auto`` counts it as a failed backend and falls back.

Where ``os.fork`` does not exist (Windows) the function runs in this process, as before.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import sys
import tempfile
import traceback
import warnings
from typing import Any, Callable, TypeVar

from ..errors import RuntimeRunError

__all__ = [
    "BackgroundRun", "NativeCrashError", "run_isolated", "send_message", "send_progress", "start_isolated",
    "CRASH_HOOK_ENV",
    "PAUSE_HOOK_ENV",
]

T = TypeVar("T")

# Test hook: when this names the stage being run, the child aborts the way a native library does
# (the only way to test the crash path without a model that crashes LiteRT). Never set in normal use.
CRASH_HOOK_ENV = "EDGE_EXPORT_TEST_NATIVE_CRASH"
# Test hook: when this names a stage (an isolated child's, such as "parity check" or "int8
# quantization", or a StageClock stage such as "load" or "write"), the run waits there for
# PAUSE_SECONDS, so that a test can interrupt it in that stage. Never set in normal use.
PAUSE_HOOK_ENV = "EDGE_EXPORT_TEST_PAUSE"
PAUSE_SECONDS = 120.0
_PR_SET_PDEATHSIG = 1

# In a child started with ``progress=``: the pipe its progress lines go to (send_progress).
_progress_fd: int | None = None

# "Node number 3 (CONV_2D) failed to ..." is how LiteRT names an operator; TFLM says "Node CONV_2D".
_OPERATOR_IN_LOG = re.compile(r"Node(?: number \d+)? \(?([A-Z][A-Z0-9_]{2,})\)?")


class NativeCrashError(RuntimeRunError):
    """A native library killed the child process that ran one stage (exit 3)."""

    def __init__(self, message: str, hint: str | None = None, *, stage: str = "", backend: str = "",
                 signal_name: str = "", operator: str | None = None) -> None:
        super().__init__(message, hint)
        self.stage, self.backend, self.signal_name, self.operator = stage, backend, signal_name, operator


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


_DEFAULT_HINT = (
    "The crash is inside the native library, not in your model's Python code: run with --verbose for "
    "the library's own output, and report it to the library with the model if you can."
)


def _crash_error(stage: str, backend: str, number: int, log: str, hint: str) -> NativeCrashError:
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    operators = _OPERATOR_IN_LOG.findall(log)
    operator = operators[-1] if operators else None
    where = f" at operator {operator}" if operator else ""
    last = f" Its last message: {lines[-1][:300]}" if lines else ""
    name = _signal_name(number)
    return NativeCrashError(
        f"The {stage} crashed inside {backend}{where} (the native code was killed by {name}); "
        f"edge-export ran it in a child process and is still here.{last}",
        hint,
        stage=stage, backend=backend, signal_name=name, operator=operator,
    )


def send_progress(label: str, index: int, total: int) -> bool:
    """In a child run with ``progress``: send one progress report to the parent's callback and
    return True; elsewhere False (the caller reports it itself)."""
    if _progress_fd is None:
        return False
    line = json.dumps([str(label), int(index), int(total)]) + "\n"
    try:
        os.write(_progress_fd, line.encode("utf-8"))
    except OSError:  # the parent stopped listening: progress is only shown, never needed
        pass
    return True


def send_message(value: Any) -> bool:
    """In a child started by start_isolated: send one JSON value to the parent (BackgroundRun.events)."""
    if _progress_fd is None:
        return False
    try:
        os.write(_progress_fd, (json.dumps(value) + "\n").encode("utf-8"))
    except OSError:  # the parent stopped listening: it decides without this message
        pass
    return True


def die_with_parent(parent: int) -> None:
    """In a forked child: be killed when the process that forked it ends, however it ends. A parent
    SIGKILLed cannot end its children itself, and a confined child killed by its own parent on
    SIGTERM left the isolated child it ran (a parity check) running. Linux only (prctl)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return  # no prctl: the parent's own cleanup is all there is
    if os.getppid() != parent:  # the parent ended before the prctl
        os._exit(70)


def pause_for_test(stage: str) -> None:
    """The PAUSE_HOOK_ENV test hook: wait here when it names ``stage``."""
    if os.environ.get(PAUSE_HOOK_ENV) == stage:
        import time

        time.sleep(PAUSE_SECONDS)


def _child(fn: Callable[..., Any], args: tuple, kwargs: dict, write_fd: int, log_fd: int, stage: str,
           progress_fd: int | None = None) -> None:
    """Runs in the forked child; never returns."""
    global _progress_fd
    status = 0
    _progress_fd = progress_fd
    try:
        # Ctrl-C and SIGTERM end the child quietly; the parent handles them as it always did.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.dup2(log_fd, 2)  # native logs, kept so that a crash message can quote them
        import faulthandler

        faulthandler.disable()  # its Python stack dump would bury the library's own last message
        torch = sys.modules.get("torch")
        if torch is not None:
            torch.set_num_threads(1)  # OpenMP's pool does not survive fork (as in DataLoader workers)
        if os.environ.get(CRASH_HOOK_ENV) == stage:
            os.abort()
        pause_for_test(stage)
        try:
            payload = (True, fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001  (every exception goes back to the parent)
            from .child_results import transportable_error

            payload = (False, (transportable_error(exc), "".join(traceback.format_exception(exc))))
        data = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(write_fd, view):]
    except BaseException:  # noqa: BLE001
        status = 70
    finally:
        os._exit(status)  # no atexit handlers, no flushing of the parent's buffers


# Imported here, before the fork, so that each child inherits them instead of importing them again
# (and losing the import when it exits): the child then costs a fork, about 30 ms with torch loaded.
_PRELOAD = ("ai_edge_litert.interpreter",)


def flush_std_streams() -> None:
    """Before a fork: what Python buffered for stdout/stderr is written once, not by both processes."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def run_isolated(
    fn: Callable[..., T],
    *args: Any,
    stage: str,
    backend: str,
    hint: str = _DEFAULT_HINT,
    preload: tuple[str, ...] = (),
    progress: Callable[[str, int, int], None] | None = None,
    **kwargs: Any,
) -> T:
    """``fn(*args, **kwargs)`` run in a forked child: its return value, or its exception re-raised
    here; a NativeCrashError when a native library kills the child. ``stage`` and ``backend`` name
    what ran, for that message ("int16x8 quantization", "ai-edge-quantizer"); ``hint`` says what to
    try; ``preload`` names modules the child will import, imported here once."""
    run = start_isolated(fn, *args, stage=stage, backend=backend, hint=hint, preload=preload,
                         messages=progress is not None, **kwargs)
    if run is None:
        return fn(*args, **kwargs)
    try:
        for message in run.events():
            if progress is not None and isinstance(message, list):  # send_progress's [label, index, total]
                progress(*message)
        return run.result()
    except BaseException:  # Ctrl-C or SIGTERM while the child runs (or its error): end it, then re-raise
        run.cancel()
        raise


class BackgroundRun:
    """A child started by ``start_isolated``: it sends messages (``events``) and ends with a result
    (``result``), unless ``cancel`` kills it first."""

    def __init__(self, pid: int, read_fd: int, message_fd: int | None, log: Any, describe: tuple[str, str, str]) -> None:
        self.pid, self._read_fd, self._message_fd, self._log = pid, read_fd, message_fd, log
        self._describe = describe  # stage, backend, hint (for the errors of run_isolated)
        self._chunks: list[bytes] = []
        self._pending = b""
        self.finished = False  # its result pipe is closed: ``result`` does not block
        self.ended = False  # collected or cancelled

    def events(self, deadline: float = float("inf")) -> Any:
        """Yield each message the child sends, until its result is in (then return); TimeoutError
        once time.monotonic() passes ``deadline`` with the child still running."""
        import select
        import time

        while not self.finished:
            wait = None if deadline == float("inf") else max(0.0, deadline - time.monotonic())
            fds = [fd for fd in (self._message_fd, self._read_fd) if fd is not None]
            ready, _, _ = select.select(fds, [], [], wait)
            if not ready:
                raise TimeoutError(f"{self._describe[0]}: still running at the deadline")
            if self._message_fd in ready:
                yield from self._read_messages()
            if self._read_fd in ready:
                self._read_result_chunk()
        while self._message_fd is not None:  # what it sent just before its result (the pipe is at its end)
            yield from self._read_messages()

    def _read_messages(self) -> Any:
        if self._message_fd is None:
            return
        chunk = os.read(self._message_fd, 1 << 16)
        if not chunk:
            os.close(self._message_fd)
            self._message_fd = None
            return
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            yield json.loads(line)

    def _read_result_chunk(self) -> None:
        chunk = os.read(self._read_fd, 1 << 20)
        if chunk:
            self._chunks.append(chunk)
        else:
            os.close(self._read_fd)
            self._read_fd, self.finished = None, True

    def result(self) -> Any:
        """The child's return value (blocking until it ends), or its error, as run_isolated gives them."""
        for _ in self.events():
            pass
        _, status = os.waitpid(self.pid, 0)
        self._close()
        return _child_result(status, b"".join(self._chunks), _forward_child_log(self._log), *self._describe)

    def cancel(self) -> None:
        """Kill the child (if it still runs) and drop what it made; nothing of it is reported."""
        if self.ended:
            return
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        self._close()
        self._log.close()

    def _close(self) -> None:
        self.ended = True
        for name in ("_message_fd", "_read_fd"):
            fd = getattr(self, name)
            if fd is not None:
                os.close(fd)
                setattr(self, name, None)


def start_isolated(
    fn: Callable[..., Any], *args: Any, stage: str, backend: str, hint: str = _DEFAULT_HINT,
    preload: tuple[str, ...] = (), messages: bool = True, **kwargs: Any,
) -> BackgroundRun | None:
    """``fn(*args, **kwargs)`` started in a forked child that this process goes on beside; None
    where ``os.fork`` does not exist (the caller then runs it itself). In the child,
    ``send_message`` and ``send_progress`` reach the parent's ``BackgroundRun.events`` (with
    ``messages``; without, they return False there). torch runs on one thread there
    (set_num_threads(2) after a fork hung in libgomp). ``run_isolated`` is this and ``result``."""
    if not hasattr(os, "fork"):
        return None
    _preload(preload)
    flush_std_streams()
    log = tempfile.TemporaryFile()
    pid, read_fd, message_fd = _fork_child(fn, args, kwargs, stage, log, with_progress=messages)
    return BackgroundRun(pid, read_fd, message_fd, log, (stage, backend, hint))


def _preload(preload: tuple[str, ...]) -> None:
    """Import once in the parent what every child would import (each child then has it for free)."""
    import importlib

    for name in (*_PRELOAD, *preload):
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # the child reports it the way the function does


def _fork_child(
    fn: Callable[..., Any], args: tuple, kwargs: dict, stage: str, log: Any, *, with_progress: bool,
) -> tuple[int, int, int | None]:
    """Fork a child that runs ``fn`` and writes its pickled result to a pipe (its native output to
    ``log``); (its pid, the result pipe's read end, the progress pipe's read end or None)."""
    read_fd, write_fd = os.pipe()
    progress_read, progress_write = os.pipe() if with_progress else (None, None)
    parent = os.getpid()
    with warnings.catch_warnings():
        # JAX (loaded by the converter) warns at every fork that JAX in the child may deadlock; the
        # child never calls JAX, so the warning would only be noise in the report.
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        pid = os.fork()
    if pid == 0:
        die_with_parent(parent)
        os.close(read_fd)
        if progress_read is not None:
            os.close(progress_read)
        _child(fn, args, kwargs, write_fd, log.fileno(), stage, progress_write)
    os.close(write_fd)
    if progress_write is not None:
        os.close(progress_write)
    return pid, read_fd, progress_read


def _forward_child_log(log: Any) -> str:
    """The child's native output, written where the parent's would have gone (the terminal with
    --verbose, else the capture that hides the libraries' chatter); the log is closed."""
    log.seek(0)
    log_text = log.read().decode("utf-8", errors="replace")
    log.close()
    if log_text:
        try:
            os.write(2, log_text.encode("utf-8", errors="replace"))
        except OSError:
            pass
    return log_text


def _child_result(status: int, data: bytes, log_text: str, stage: str, backend: str, hint: str) -> Any:
    """The child's return value, or its exception raised here, or the error its death calls for."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number in (signal.SIGINT, signal.SIGTERM):
            raise KeyboardInterrupt
        raise _crash_error(stage, backend, number, log_text, hint)
    if os.WEXITSTATUS(status) != 0 or not data:
        raise NativeCrashError(
            f"The {stage} ended without a result: the {backend} child process exited with status "
            f"{os.WEXITSTATUS(status)}.",
            "Run with --verbose to see the library's own output.",
            stage=stage, backend=backend,
        )
    from .child_results import loads_child_result

    payload = loads_child_result(data)  # the child may have run a hostile model: its bytes are data
    if not (isinstance(payload, tuple) and len(payload) == 2):
        raise RuntimeError(f"the {stage} child returned something other than a result")
    ok, value = payload
    if ok:
        return value
    exc, exc_text = value if isinstance(value, tuple) and len(value) == 2 else (RuntimeError(str(value)[:500]), "")
    if not isinstance(exc, BaseException):
        raise RuntimeError(f"the {stage} child returned an error that is not an exception")
    if hasattr(exc, "add_note"):
        exc.add_note(f"(raised in the isolated child process of the {stage}:)\n{exc_text}")
    raise exc
