"""TorchScript is code: an untrusted archive is read by an allow-list before torch sees it, and loaded
in a child that may read only Python's own files.

The hostile archives are real torch.jit.save output: a ``__setstate__`` that reads a secret file into a
weight with ``torch.from_file`` (the reader) and one that writes a file with ``torch.save`` (the
writer). Each is refused with the confinement on and off; with the reader's checks switched off by
their test hook, the confinement alone keeps the secret out and the marker unwritten.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest
import torch

from edge_export.errors import InputSpecError, ModelLoadError
from edge_export.loading.torchscript_archive import UnsafeTorchScript, read_checked_torchscript

pytestmark = pytest.mark.hostile  # untrusted input: in the default tier even where slow

SECRET = b"EDGE-EXPORT-SECRET-0123456789abcdef"
CHECKS_OFF = "EDGE_EXPORT_TEST_DISABLE_ARCHIVE_CHECKS"
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the confinement is Linux's Landlock")


def _reader_module(secret: Path) -> torch.nn.Module:
    source = f'''
import torch
from typing import Tuple

class Reader(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.zeros({len(SECRET)})

    def forward(self, x):
        return x + self.w[:3]

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, bool]:
        return (self.w, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]) -> None:
        self.w = torch.from_file({str(secret)!r}, False, {len(SECRET)}, dtype=torch.uint8).float()
        self.training = state[1]
'''
    return _scripted(source, "Reader")


def _writer_module(marker: Path) -> torch.nn.Module:
    source = f'''
import torch
from typing import Tuple

class Writer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.zeros(3)

    def forward(self, x):
        return x + self.w

    @torch.jit.export
    def __getstate__(self) -> Tuple[torch.Tensor, bool]:
        return (self.w, self.training)

    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]) -> None:
        torch.save(state[0], {str(marker)!r})
        self.w = state[0]
        self.training = state[1]
'''
    return _scripted(source, "Writer")


def _scripted(source: str, name: str) -> torch.nn.Module:
    """torch.jit.script needs the class's source in a file (inspect.getsource)."""
    import importlib.util
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="ts-src-"))
    module_path = folder / f"hostile_{name.lower()}.py"
    module_path.write_text(source)
    spec = importlib.util.spec_from_file_location(module_path.stem, module_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_path.stem] = module
    spec.loader.exec_module(module)
    return torch.jit.script(getattr(module, name)())


class _Clean(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x):
        return torch.relu(self.lin(x))


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ts")
    secret = folder / "secret.txt"
    secret.write_bytes(SECRET)
    marker = folder / "MARKER"
    torch.jit.save(_reader_module(secret), str(folder / "reader.pt"))
    torch.jit.save(_writer_module(marker), str(folder / "writer.pt"))
    torch.jit.save(torch.jit.script(_Clean().eval()), str(folder / "clean.pt"))
    marker.unlink(missing_ok=True)  # scripting does not run __setstate__, but be sure
    return folder


def _export(run_cli, monkeypatch, archive: Path, out: Path, env: dict) -> object:
    """The CLI in this process, with the test hooks in ``env`` (read when the archive is loaded, not at
    start-up): the archive is read in the child this process forks, as under the console script."""
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return run_cli(archive, "--input-shape", "1,3", "-o", out / "m.tflite", "--no-validate")


def _outputs_hold_secret(out: Path) -> bool:
    return any(SECRET in p.read_bytes() for p in out.rglob("*") if p.is_file())


@linux_only
@pytest.mark.slow
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_hostile_torchscript_is_refused_with_confinement_on_and_off(run_cli, monkeypatch, archives, tmp_path, sandbox):
    env = {"EDGE_EXPORT_SANDBOX": "off"} if sandbox == "off" else {}
    for name, operator in (("reader.pt", "torch.from_file"), ("writer.pt", "torch.save")):
        out = tmp_path / name
        out.mkdir()
        res = _export(run_cli, monkeypatch, archives / name, out, env)
        assert res.exit_code == 2, res.stderr[-2000:]
        assert operator in res.stderr and "--trust-pickle" in res.stderr and "Traceback" not in res.stderr
        assert list(out.iterdir()) == []
    assert not (archives / "MARKER").exists()


@linux_only
@pytest.mark.slow
def test_the_confinement_alone_keeps_the_secret_and_the_marker_out(run_cli, monkeypatch, archives, tmp_path):
    """The reader's checks off (their test hook): the TorchScript code runs, in the child that reads
    only Python's own files and writes only its private folder."""
    out = tmp_path / "out"
    out.mkdir()
    res = _export(run_cli, monkeypatch, archives / "reader.pt", out, {CHECKS_OFF: "1"})
    assert res.exit_code != 0 and not _outputs_hold_secret(out), res.stderr[-2000:]
    res = _export(run_cli, monkeypatch, archives / "writer.pt", out, {CHECKS_OFF: "1"})
    assert not (archives / "MARKER").exists(), res.stderr[-2000:]


@linux_only
@pytest.mark.slow
def test_control_without_either_line_the_payload_does_run(run_cli, monkeypatch, archives, tmp_path):
    """What the two lines stop: with the checks and the confinement both off, the writer's
    __setstate__ creates its marker."""
    env = {CHECKS_OFF: "1", "EDGE_EXPORT_SANDBOX": "off"}
    _export(run_cli, monkeypatch, archives / "writer.pt", tmp_path, env)
    assert (archives / "MARKER").exists()
    (archives / "MARKER").unlink()


def test_a_clean_scripted_model_loads_and_computes(archives):
    from edge_export.loading.sources import load_model

    x = torch.randn(2, 3)
    loaded = load_model(archives / "clean.pt", example_inputs=(x,))
    reference = torch.jit.load(str(archives / "clean.pt"))
    assert loaded.kind.value == "torchscript" and loaded.input_names == ("x",)
    torch.testing.assert_close(loaded.module(x), reference(x))


def test_reader_names_the_operator_and_the_line(archives):
    with pytest.raises(UnsafeTorchScript, match=r"torch\.from_file \(line \d+\).*filename"):
        read_checked_torchscript(archives / "reader.pt")
    with pytest.raises(UnsafeTorchScript, match=r"torch\.save"):
        read_checked_torchscript(archives / "writer.pt")


# --- the reader's other rules, on a clean archive changed one member at a time ---------------------


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _rewritten(path: Path, target: Path, change) -> Path:
    members = change(_members(path))
    with zipfile.ZipFile(target, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return target


def _code_member(members: dict[str, bytes]) -> str:
    return next(n for n in members if n.endswith(".py") and b"torch.relu(" in members[n])


def _with_code(members, old: bytes, new: bytes):
    name = _code_member(members)
    assert old in members[name]
    return {**members, name: members[name].replace(old, new)}


CASES = {
    "unknown member": (lambda m: {**m, "clean/extra_code.py": b"x = 1"}, "not one torch.jit.save writes"),
    "a custom namespace": (lambda m: _with_code(m, b"torch.relu(", b"ops.myns.relu("), "namespace"),
    "a C++ class": (lambda m: _with_code(m, b"torch.relu(", b"__torch__.torch.classes.x.Y("), "custom C\\+\\+ class"),
    "torch itself": (lambda m: _with_code(m, b"torch.relu(", b"torch.ops.load_library("), "not allowed"),
    "a top-level call": (lambda m: {**m, _code_member(m): m[_code_member(m)] + b"\ntorch.relu(1)\n"}, "top-level Expr"),
    "not code": (lambda m: {**m, _code_member(m): b"class X(:\n"}, "not TorchScript code"),
    "pickle global": (lambda m: {**m, "clean/constants.pkl": b"\x80\x02cos\nsystem\nq\x00."}, "os.system"),
    "stack global": (lambda m: {**m, "clean/constants.pkl": b"\x80\x04\x8c\x02os\x8c\x06system\x93."}, "STACK_GLOBAL"),
    "broken pickle": (lambda m: {**m, "clean/constants.pkl": b"\x80\x02\xff"}, "well-formed pickle"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_reader_refuses(archives, tmp_path, case):
    change, message = CASES[case]
    bad = _rewritten(archives / "clean.pt", tmp_path / "bad.pt", change)
    with pytest.raises(UnsafeTorchScript, match=message):
        read_checked_torchscript(bad)


def test_refused_archive_is_exit_2_in_the_cli(archives, tmp_path, run_cli):
    bad = _rewritten(archives / "clean.pt", tmp_path / "bad.pt", CASES["a custom namespace"][0])
    res = run_cli(bad, "--input-shape", "1,3", "-o", tmp_path / "out" / "m.tflite")
    assert res.exit_code == 2 and "ops.myns.relu" in res.stderr and not (tmp_path / "out").exists()


class _Vad(torch.nn.Module):
    """Shaped like a streaming voice-activity detector shipped as TorchScript: a sample-rate argument
    and state kept in an attribute between calls."""

    def __init__(self):
        super().__init__()
        self.state = torch.zeros(1, 4)

    def forward(self, x: torch.Tensor, sr: int) -> torch.Tensor:
        self.state = self.state + x[:, :4].mean()
        return x * float(sr) + self.state.sum()


def test_forward_with_a_non_tensor_argument_and_state_is_explained(tmp_path):
    path = tmp_path / "vad.pt"
    torch.jit.save(torch.jit.script(_Vad()), str(path))
    with pytest.raises(InputSpecError) as caught:
        read_checked_torchscript(path)
    text = str(caught.value) + " " + (caught.value.hint or "")
    assert "sr: int" in text and "self.state" in text and "torch.export" in text


def test_forward_with_a_non_tensor_argument_is_exit_2_naming_it(tmp_path, run_cli):
    path = tmp_path / "vad.pt"
    torch.jit.save(torch.jit.script(_Vad()), str(path))
    res = run_cli(path, "--input-shape", "1,8", "-o", tmp_path / "out" / "m.tflite")
    assert res.exit_code == 2 and "sr: int" in res.stderr and "INTERNAL ASSERT" not in res.stderr


class _TwoInputs(torch.nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
        return x if y is None else x + y


def test_too_few_input_shapes_name_forwards_parameters(tmp_path):
    from edge_export.loading.sources import load_model

    path = tmp_path / "two.pt"
    torch.jit.save(torch.jit.script(_TwoInputs()), str(path))
    with pytest.raises(InputSpecError, match=r"forward\(x: Tensor, y: Optional\[Tensor\]\) takes 2 inputs; --input-shape gave 1"):
        load_model(path, example_inputs=(torch.randn(1, 3),))


def test_damaged_archive_is_a_load_error(tmp_path):
    path = tmp_path / "cut.pt"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 40)
    with pytest.raises(ModelLoadError):
        read_checked_torchscript(path)


def test_a_method_call_resolving_to_a_refused_operator_is_refused(archives, tmp_path):
    """``w.set_(storage)`` in TorchScript is aten::set_, whose Storage overloads point a tensor at raw
    memory: refused though it is written as a method of a value."""
    bad = _rewritten(archives / "clean.pt", tmp_path / "bad.pt", lambda m: _with_code(m, b"torch.relu(", b"lin.set_("))
    with pytest.raises(UnsafeTorchScript, match=r"lin\.set_.*Storage"):
        read_checked_torchscript(bad)
