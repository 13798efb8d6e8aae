"""The third line of defence for an untrusted model archive: the whole run happens in a confined child.

Loading, tracing, conversion and validation of an untrusted ``.pt2`` (no ``--trust-pickle``) run in a
forked child process that, before it reads the archive, confines itself with:

- **Landlock** (Linux 5.13+; network rules from ABI 4, Linux 6.7): it may create, write, rename or
  delete files only inside a private temporary folder (``TMPDIR`` points there) and write to
  ``/dev/null``; files it opened before (the terminal, the capture of library output) stay usable;
  with ABI 4+ it may neither bind nor connect TCP sockets, and with ABI 6+ it may not signal
  processes outside itself or reach abstract Unix sockets;
- a new **network namespace** (``unshare``; a user namespace first when not root): no interface but
  a downed loopback, so no packet leaves, UDP included;
- ``PR_SET_NO_NEW_PRIVS``: nothing it executes gains privileges.

The child sends back the artifacts' bytes and the typed report; the parent, which never loads the
archive, unpickles them with an allow-list (edge_export's dataclasses, enums and errors, paths,
numpy arrays, plain containers) and writes the artifacts itself, atomically, at the paths it checked
before the run. Where the kernel offers neither mechanism (macOS, Windows, Linux before 5.13 or a
seccomp profile that blocks them), the child runs unconfined and the report says so
(``model.isolation``): the allow-list reader and the loading guards still apply.
"""

from __future__ import annotations

import ctypes
import io
import os
import pickle
import shutil
import signal
import struct
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

from .child_results import RestrictedUnpickler
from ..errors import EdgeExportError

__all__ = [
    "SandboxStatus", "LimitExceeded", "run_confined", "python_reads", "run_for_model", "confine_current_process",
    "RestrictedUnpickler",
]

_SYS_LANDLOCK_CREATE_RULESET = 444
_SYS_LANDLOCK_ADD_RULE = 445
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38
_CLONE_NEWUSER = 0x10000000
_CLONE_NEWNET = 0x40000000
# LANDLOCK_ACCESS_FS_*: everything that creates, changes or removes a file, by the ABI that added it.
_FS_WRITE_V1 = (1 << 1) | (1 << 4) | (1 << 5) | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)
_FS_REFER, _FS_TRUNCATE = 1 << 13, 1 << 14
_FS_WRITE_FILE = 1 << 1
_FS_READ = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE, READ_FILE, READ_DIR (ABI 1)
_NET_BIND_TCP, _NET_CONNECT_TCP = 1 << 0, 1 << 1
_SCOPE_ABSTRACT_UNIX_SOCKET, _SCOPE_SIGNAL = 1 << 0, 1 << 1
# Test hook: "off" runs the child unconfined (to measure the cost); never set in normal use.
SANDBOX_ENV = "EDGE_EXPORT_SANDBOX"


@dataclass(frozen=True)
class SandboxStatus:
    landlock_abi: int  # 0: not available
    network_namespace: bool
    reason: str = ""  # why a mechanism is missing
    reads_confined: bool = False  # Landlock also limits what it reads

    def describe(self) -> str:
        parts = []
        if self.landlock_abi:
            what = "reads only Python's own files and " if self.reads_confined else ""
            parts.append(f"Landlock ABI {self.landlock_abi} ({what}writes only to a private temporary folder"
                         + (", no TCP" if self.landlock_abi >= 4 else "") + ")")
        if self.network_namespace:
            parts.append("a network namespace (no network)")
        if not parts:
            return f"not confined: {self.reason or 'no Landlock and no namespaces on this system'}"
        return "confined child process: " + " and ".join(parts) + (f"; {self.reason}" if self.reason else "")


def run_for_model(confine: bool, stages: Any, fn: Callable[..., Any], *args: Any, report_type: type) -> Any:
    """``fn(*args)``: in a confined child when ``confine`` (the model is an untrusted archive:
    ``loading.needs_confinement``), else here. ``fn`` returns (report, files); a confined run's
    report must be a ``report_type`` (the caller's: reports/ is a layer above) and says how the
    child was confined (``model.isolation``). ``stages`` (one of ``args``) sends its labels to the
    parent's display from the child."""
    if not hasattr(os, "fork") or not confine:
        return fn(*args)
    import copy

    child_stages = copy.copy(stages)
    child_stages.redirect(None)  # the display stays here; the child gets a sender
    child_args = tuple(child_stages if a is stages else a for a in args)
    (report, files), status = run_confined(
        _staged_call, fn, child_stages, child_args, on_stage=stages.announce, on_progress=stages.on_progress
    )
    from dataclasses import is_dataclass, replace

    if not isinstance(report, report_type) or not is_dataclass(report) or not isinstance(files, list):
        raise RuntimeError("the confined run returned something other than a report and its artifacts")
    return replace(report, model=replace(report.model, isolation=status.describe())), files


def _staged_call(fn: Callable[..., Any], stages: Any, args: tuple, channel: "_Channel") -> Any:
    stages.redirect(channel.stage)
    stages.on_progress = channel.progress
    return fn(*args)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc() -> Any:
    return ctypes.CDLL(None, use_errno=True)


def _landlock(private_dir: str, reads: tuple[str, ...] | None = None) -> tuple[int, str]:
    """Restrict this process's writes to ``private_dir`` (and /dev/null), and with ``reads`` its
    reads to those paths, ``private_dir`` and /dev/null; (ABI used, or 0 and why)."""
    if not sys.platform.startswith("linux"):
        return 0, f"Landlock is Linux-only ({sys.platform})"
    libc = _libc()
    abi = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    if abi < 1:
        return 0, f"Landlock unavailable ({os.strerror(ctypes.get_errno())})"
    fs = _FS_WRITE_V1 | (_FS_REFER if abi >= 2 else 0) | (_FS_TRUNCATE if abi >= 3 else 0)
    read = _FS_READ if reads is not None else 0
    attr = _RulesetAttr(fs | read, (_NET_BIND_TCP | _NET_CONNECT_TCP) if abi >= 4 else 0,
                        (_SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL) if abi >= 6 else 0)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        return 0, f"Landlock ruleset refused ({os.strerror(ctypes.get_errno())})"
    try:
        for target, access in _rules(private_dir, fs, read, abi, reads):
            fd = os.open(target, os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneathAttr(access, fd)
                if libc.syscall(_SYS_LANDLOCK_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
                    return 0, f"Landlock rule refused ({os.strerror(ctypes.get_errno())})"
            finally:
                os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0) != 0:
            return 0, f"Landlock could not be enforced ({os.strerror(ctypes.get_errno())})"
    finally:
        os.close(ruleset)
    return abi, ""


def _rules(private_dir: str, fs: int, read: int, abi: int, reads: tuple[str, ...] | None) -> list[tuple[str, int]]:
    """(path, rights) for each Landlock rule: the private folder, /dev/null, and each read root
    (a file gets no directory right: Landlock refuses it)."""
    file_read = read & ~(1 << 3)
    rules = [(private_dir, fs | read), ("/dev/null", _FS_WRITE_FILE | (_FS_TRUNCATE if abi >= 3 else 0) | file_read)]
    return rules + [(p, read if os.path.isdir(p) else file_read) for p in reads or () if os.path.exists(p)]


def _network_namespace() -> tuple[bool, str]:
    if not sys.platform.startswith("linux"):
        return False, ""
    libc = _libc()
    flags = _CLONE_NEWNET if os.geteuid() == 0 else _CLONE_NEWUSER | _CLONE_NEWNET
    if libc.unshare(flags) == 0:
        return True, ""
    return False, f"no network namespace ({os.strerror(ctypes.get_errno())})"


def confine_current_process(private_dir: str, reads: tuple[str, ...] | None = None) -> SandboxStatus:
    """Confine this (child) process; irreversible. Call before touching untrusted input. With
    ``reads``, it may read only beneath those paths (and ``private_dir``) as well."""
    if os.environ.get(SANDBOX_ENV) == "off":
        return SandboxStatus(0, False, f"{SANDBOX_ENV}=off")
    netns, net_reason = _network_namespace()  # before Landlock: unshare may need to write /proc files
    abi, fs_reason = _landlock(private_dir, reads)
    os.environ["TMPDIR"] = private_dir
    tempfile.tempdir = private_dir
    return SandboxStatus(abi, netns, "; ".join(r for r in (fs_reason, net_reason) if r), bool(abi) and reads is not None)


# --- the child's messages: a 1-byte kind, a 4-byte length, the body ---------------------------------

def _send(fd: int, kind: bytes, body: bytes) -> None:
    view = memoryview(kind + struct.pack("<I", len(body)) + body)
    while view:
        view = view[os.write(fd, view):]


def _child(fn: Callable[..., Any], args: tuple, fd: int, private_dir: str, torch_threads_unsafe: bool,
           memory_limit: int | None = None, reads: tuple[str, ...] | None = None) -> None:
    status = 0
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _renew_thread_pools(torch_threads_unsafe)
        if memory_limit is not None:
            _limit_address_space(memory_limit)
        sandbox = confine_current_process(private_dir, reads)
        _send(fd, b"I", pickle.dumps(sandbox))
        try:
            result = fn(*args, _Channel(fd))
            _send(fd, b"R", pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
        except EdgeExportError as exc:
            _send(fd, b"E", _pickled_error(exc))
        except MemoryError:  # the address-space limit was hit (what is left unwound by now)
            _send(fd, b"M", b"")
        except BaseException as exc:  # noqa: BLE001 - anything else goes back as text, never as an object
            text = f"{type(exc).__name__}: {exc}"
            _send(fd, b"X", (text + "\n" + "".join(traceback.format_exception(exc))).encode("utf-8", "replace"))
    except BaseException:  # noqa: BLE001
        status = 70
    finally:
        os._exit(status)


def _limit_address_space(extra: int) -> None:
    """Let this (forked) process map at most ``extra`` bytes beyond what it inherited: the parent's
    libraries are already mapped here, so a fixed RLIMIT_AS would be too small or meaningless."""
    import resource

    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            mapped = int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):  # no /proc (macOS): the time limit still applies
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = mapped + extra if hard == resource.RLIM_INFINITY else min(mapped + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _pickled_error(exc: EdgeExportError) -> bytes:
    try:
        return pickle.dumps(exc)
    except Exception:  # an error holding something unpicklable: send its class and text
        return pickle.dumps(type(exc)(str(exc)))


class _Channel:
    """What a confined child tells its parent while it runs: stage labels and a long stage's steps."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def stage(self, label: str) -> None:
        _send(self.fd, b"S", label.encode("utf-8", "replace"))

    def progress(self, label: str, index: int, total: int) -> None:
        _send(self.fd, b"P", f"{int(index)}\0{int(total)}\0{label}".encode("utf-8", "replace"))


class LimitExceeded(Exception):
    """A child of ``run_confined`` ran past its ``time_limit`` (``kind`` "time", ``limit`` in
    seconds) or out of its ``memory_limit`` (``kind`` "memory", ``limit`` in bytes; ``detail`` says
    how it ended); the child is gone. The caller words the error: it knows what the child read."""

    def __init__(self, kind: str, limit: float, detail: str = "") -> None:
        super().__init__(f"the confined child exceeded its {kind} limit ({limit:g}){': ' + detail if detail else ''}")
        self.kind, self.limit, self.detail = kind, limit, detail


def run_confined(fn: Callable[..., Any], *args: Any, on_stage: Callable[[str], None] | None = None,
                 on_progress: Callable[[str, int, int], None] | None = None,
                 time_limit: float | None = None, memory_limit: int | None = None,
                 reads: tuple[str, ...] | None = None) -> tuple[Any, SandboxStatus]:
    """``fn(*args, emit_stage)`` in a confined child: its result and how the child was confined.
    The child's EdgeExportError is raised here; any other exception becomes a RuntimeError with its text.
    ``time_limit`` (seconds, wall clock) and ``memory_limit`` (bytes the child may map beyond what it
    inherits): past either, the child is killed and LimitExceeded raised. With ``reads``, the child
    reads only beneath those paths (``python_reads()``: the interpreter's own files)."""
    from .isolation import die_with_parent, flush_std_streams

    private_dir = tempfile.mkdtemp(prefix="edge-export-sandbox-")
    flush_std_streams()
    read_fd, write_fd = os.pipe()
    # torch imported here may have started OpenMP's threads, which the child would not have
    torch_threads_unsafe = "torch" in sys.modules
    import warnings

    with warnings.catch_warnings():
        # JAX warns at every fork; the child renews the one JAX pool it uses (_renew_thread_pools)
        warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
        parent, pid = os.getpid(), os.fork()
    if pid == 0:
        die_with_parent(parent)  # a parent SIGKILLed cannot end this child: it would run the export on
        os.close(read_fd)
        _child(fn, args, write_fd, private_dir, torch_threads_unsafe, memory_limit, reads)
    os.close(write_fd)
    deadline = None if time_limit is None else time.monotonic() + time_limit
    try:
        messages = _read_messages(read_fd, on_stage, on_progress, deadline)
        _, status = os.waitpid(pid, 0)
    except BaseException as exc:  # Ctrl-C, SIGTERM or the deadline: end the child, then as before
        _kill(pid)
        if isinstance(exc, _Deadline):
            raise LimitExceeded("time", float(time_limit or 0)) from None
        raise
    finally:
        shutil.rmtree(private_dir, ignore_errors=True)
    return _outcome(messages, status, memory_limit)


def python_reads() -> tuple[str, ...]:
    """What the interpreter itself reads while it runs: its installation, its site folders, the
    folders of edge_export and torch (an editable install lives elsewhere) and the system's shared
    libraries; nothing of the user's."""
    import site

    roots = {sys.prefix, sys.base_prefix, sys.exec_prefix, *site.getsitepackages(), "/usr/lib", "/usr/lib64", "/lib",
             "/lib64", "/usr/local/lib", "/etc/ld.so.cache"}
    for name in ("edge_export", "torch"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None):
            roots.add(os.path.dirname(os.path.abspath(module.__file__)))
    return tuple(sorted(os.path.realpath(r) for r in roots if r))


def _renew_thread_pools(torch_threads_unsafe: bool) -> None:
    """Thread pools this process inherited from its parent exist here as objects without threads: a
    task given to one waits forever. torch's OpenMP pool runs on one thread instead, and JAX's MLIR
    pool (the converter lowers through it) is replaced by a new one."""
    if torch_threads_unsafe:
        import torch

        torch.set_num_threads(1)
    mlir = sys.modules.get("jax._src.interpreters.mlir")
    if mlir is not None and hasattr(mlir, "global_thread_pool"):
        # the inherited pool is kept alive: destroying it would join threads that do not exist here
        _INHERITED_POOLS.append(mlir.global_thread_pool)
        mlir.global_thread_pool = mlir.ir.ThreadPool()


_INHERITED_POOLS: list = []


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


class _Deadline(Exception):
    """The child's time limit passed while the parent waited for its messages."""


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes | None:
    """``size`` bytes from the pipe (None at its end before them); _Deadline past ``deadline``."""
    import select

    chunks, left = [], size
    while left:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise _Deadline
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _read_messages(fd: int, on_stage: Callable[[str], None] | None, on_progress: Callable[[str, int, int], None] | None = None,
                   deadline: float | None = None) -> dict[bytes, bytes]:
    """Stage labels and progress are passed on as they arrive (as terminal-safe text); the last
    message of every other kind is kept."""
    from ..output.text_safety import for_terminal

    kept: dict[bytes, bytes] = {}
    try:
        while (head := _read_exactly(fd, 5, deadline)) is not None:
            body = _read_exactly(fd, struct.unpack("<I", head[1:])[0], deadline)
            if body is None:
                break
            kind = head[:1]
            if kind == b"S" and on_stage is not None:
                on_stage(for_terminal(body.decode("utf-8", "replace")[:200], keep_newlines=False))
            elif kind == b"P" and on_progress is not None:
                index, total, label = (body.decode("utf-8", "replace").split("\0", 2) + ["", ""])[:3]
                if index.isdigit() and total.isdigit():
                    on_progress(for_terminal(label[:200], keep_newlines=False), int(index), int(total))
            elif kind not in (b"S", b"P"):
                kept[kind] = body
    finally:
        os.close(fd)
    return kept


def _outcome(messages: dict[bytes, bytes], status: int, memory_limit: int | None = None) -> tuple[Any, SandboxStatus]:
    from .isolation import NativeCrashError

    sandbox = _restricted_loads(messages[b"I"]) if b"I" in messages else SandboxStatus(0, False, "unknown")
    if not isinstance(sandbox, SandboxStatus):
        sandbox = SandboxStatus(0, False, "the child did not report its confinement")
    if b"R" in messages:
        return _restricted_loads(messages[b"R"]), sandbox
    if memory_limit is not None:
        _check_memory_outcome(messages, status, memory_limit)
    if b"E" in messages:
        error = _restricted_loads(messages[b"E"])
        if isinstance(error, EdgeExportError):
            raise error
    if b"X" in messages:
        raise RuntimeError(messages[b"X"].decode("utf-8", "replace").split("\n", 1)[0][:500])
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGINT, signal.SIGTERM):
        # Ctrl-C reaches the whole foreground group: the child may die of it before the parent's
        # own KeyboardInterrupt is raised. Either way it is the user's interrupt, not a crash.
        raise KeyboardInterrupt
    signame = signal.Signals(os.WTERMSIG(status)).name if os.WIFSIGNALED(status) else f"exit status {os.WEXITSTATUS(status)}"
    raise NativeCrashError(
        f"The confined run of the untrusted model ended without a result ({signame}).",
        "Run with --verbose to see the libraries' own output; if you trust the file, --trust-pickle runs it unconfined.",
        stage="confined run", backend="sandbox", signal_name=signame,
    )


def _check_memory_outcome(messages: dict[bytes, bytes], status: int, memory_limit: int) -> None:
    """A child under a memory limit that raised MemoryError, or died of a signal without a result
    (native code aborts when an allocation fails: Rust, C++), ran out of memory."""
    if b"M" in messages:
        raise LimitExceeded("memory", memory_limit, "MemoryError")
    if b"E" not in messages and b"X" not in messages and os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        if number not in (signal.SIGINT, signal.SIGTERM):
            name = signal.Signals(number).name if number in signal.Signals._value2member_map_ else f"signal {number}"
            raise LimitExceeded("memory", memory_limit, f"ended by {name}")


def _restricted_loads(data: bytes) -> Any:
    try:
        return RestrictedUnpickler(io.BytesIO(data)).load()
    except Exception as exc:  # a result the allow-list refuses: the run's output cannot be trusted
        raise RuntimeError(f"the confined run returned a result that cannot be read safely ({exc})") from None
