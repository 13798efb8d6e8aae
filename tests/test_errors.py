"""The error tree and the one boundary (issue 9, item 5): every EdgeExportError subclass has a
documented exit code and a line in the tree of errors.py's docstring; third-party errors are mapped
with ``map_exceptions`` and quoted by ``first_line``; no bad user input reaches exit 4."""

from __future__ import annotations

import importlib
import io
import pkgutil
import re
import zipfile

import pytest
import torch

import edge_export
from edge_export import errors
from edge_export.errors import (
    EXIT_EXPORT_FAILED,
    EXIT_USAGE,
    CalibrationDataError,
    EdgeExportError,
    InternalError,
    ModelLoadError,
    TraceError,
    first_line,
    map_exceptions,
)


def _all_subclasses(cls: type) -> set[type]:
    found = set()
    for sub in cls.__subclasses__():
        found |= {sub} | _all_subclasses(sub)
    return found


def _import_every_module() -> None:
    for info in pkgutil.walk_packages(edge_export.__path__, "edge_export."):
        importlib.import_module(info.name)


def test_every_error_class_has_a_documented_exit_code_in_the_tree():
    _import_every_module()  # subclasses defined outside errors.py (archive_safety, isolation) count too
    classes = {c for c in _all_subclasses(EdgeExportError) if c.__module__.startswith("edge_export")}
    assert len(classes) >= 13
    tree = errors.__doc__
    for cls in sorted(classes | {EdgeExportError, InternalError}, key=lambda c: c.__name__):
        assert cls.exit_code in (EXIT_USAGE, EXIT_EXPORT_FAILED, errors.EXIT_INTERNAL), cls
        line = re.search(rf"^\W*{cls.__name__}\b(.*)$", tree, re.MULTILINE)
        assert line, f"{cls.__name__} is missing from the error tree in errors.py's docstring"
        if cls is not EdgeExportError:
            assert f"exit {cls.exit_code}" in line.group(1), (cls.__name__, line.group(0))


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (EOFError(), "EOFError"),
        (IndexError(""), "IndexError"),
        (ValueError("\n\n  first\nsecond"), "first"),
        (SystemExit(3), "sys.exit(3)"),
        (TraceError("the message", "the hint"), "the message"),
        (RuntimeError("x" * 1000), "x" * 300),
    ],
)
def test_first_line(exc, expected):
    assert first_line(exc) == expected


def test_first_line_with_type_and_limit():
    assert first_line(ValueError("bad\nmore"), with_type=True) == "ValueError: bad"
    assert first_line(ValueError("abcdef"), 3) == "abc"


def test_map_exceptions_maps_listed_types_and_keeps_the_cause():
    with pytest.raises(CalibrationDataError) as info:
        with map_exceptions({(OSError, ValueError): CalibrationDataError}, "Cannot read {x}.npy: {error}.", "Fix it."):
            raise ValueError("bad header.\nsecond line")
    assert info.value.message == "Cannot read {x}.npy: bad header."  # braces in paths survive
    assert info.value.hint == "Fix it."
    assert isinstance(info.value.__cause__, ValueError)


def test_map_exceptions_first_match_wins_and_type_is_named():
    with pytest.raises(TraceError, match="KeyError: 'k'"):
        with map_exceptions({KeyError: TraceError, Exception: ModelLoadError}, "{type}: {error}"):
            raise KeyError("k")


def test_map_exceptions_passes_own_errors_and_unlisted_bugs_through():
    own = ModelLoadError("already mapped")
    with pytest.raises(ModelLoadError) as info:
        with map_exceptions({Exception: TraceError}, "x"):
            raise own
    assert info.value is own
    with pytest.raises(ZeroDivisionError):  # a bug: reaches the CLI as exit 4
        with map_exceptions({OSError: ModelLoadError}, "x"):
            1 / 0


# ---- no user input reaches exit 4 ---------------------------------------------------------------

@pytest.fixture(scope="module")
def good_pt2(tmp_path_factory):
    from model_zoo import small_cnn

    path = tmp_path_factory.mktemp("good") / "cnn.pt2"
    torch.export.save(torch.export.export(small_cnn(), (torch.randn(1, 3, 16, 16),)), path)
    return path


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def _zip(path, members: dict[str, bytes]):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return path


def _pt2_without(good, path, suffix: str):
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(path, "w") as dst:
        names = [n for n in src.namelist() if not n.endswith(suffix)]
        assert len(names) < len(src.namelist()), (suffix, src.namelist())
        for name in names:
            dst.writestr(name, src.read(name))
    return path


def _png_cut(path):
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (10, 20, 30)).save(buf, format="PNG")
    path.mkdir()
    (path / "a.png").write_bytes(buf.getvalue()[:40])
    return path


MODEL_REF = "model_zoo:small_cnn"
SHAPE = ("--input-shape", "1,3,16,16")

# name -> (build(tmp, good_pt2) -> CLI args, a word the message must contain)
BAD_INPUTS = {
    "truncated pickle": (lambda t, g: [_write(t / "m.pt", b"\x80\x02")], "truncated"),
    "truncated pickle, trusted": (lambda t, g: [_write(t / "m.pt", b"\x80\x02"), "--trust-pickle"], "truncated"),
    "truncated pickle of a global, trusted": (
        lambda t, g: [_write(t / "m.pt", b"\x80\x02cbuiltins\nprint\n"), "--trust-pickle"], "unpickled"),
    "empty .pt": (lambda t, g: [_write(t / "m.pt", b"")], "m.pt"),
    "empty .pt2": (lambda t, g: [_write(t / "m.pt2", b"")], "m.pt2"),
    "zip that is not a .pt2": (lambda t, g: [_zip(t / "m.pt2", {"readme.txt": b"hello"})], "m.pt2"),
    "pt2 without its weights": (lambda t, g: [_pt2_without(g, t / "m.pt2", "weight_0")], "m.pt2"),
    "pt2 without its program": (lambda t, g: [_pt2_without(g, t / "m.pt2", "model.json")], "m.pt2"),
    "truncated TorchScript": (lambda t, g: [_zip(t / "m.pt", {"m/code/": b""}), *SHAPE], "m.pt"),
    "truncated weights": (lambda t, g: [MODEL_REF, "--weights", _write(t / "w.pt", b"\x80\x02"), *SHAPE], "w.pt"),
    "empty calibration .npy": (
        lambda t, g: [MODEL_REF, *SHAPE, "--quantize", "int8", "--calibration-data", _write(t / "c.npy", b"")], "c.npy"),
    "calibration .npz that is not a zip": (
        lambda t, g: [MODEL_REF, *SHAPE, "--quantize", "int8", "--calibration-data", _write(t / "c.npz", b"PK\x03\x04junk")],
        "c.npz"),
    "truncated calibration image": (
        lambda t, g: [MODEL_REF, *SHAPE, "--quantize", "int8", "--calibration-data", _png_cut(t / "imgs")], "a.png"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_exits_2_with_one_paragraph(case, tmp_path, run_cli, good_pt2):
    build, needle = BAD_INPUTS[case]
    args = build(tmp_path, good_pt2)
    res = run_cli("export", *args, "-o", tmp_path / "out.tflite")
    assert res.exit_code == EXIT_USAGE, (case, res.exit_code, res.stderr)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    error = res.stderr[res.stderr.index("error:"):]
    paragraph = error.split("(run with --debug")[0].strip()
    assert "\n\n" not in paragraph, paragraph
    assert needle.lower() in " ".join(paragraph.split()).lower(), paragraph
    assert not list(tmp_path.glob("out*")) and not list(tmp_path.glob(".out*"))

