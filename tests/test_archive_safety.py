"""An untrusted .pt2 archive runs no code: every member torch.export.load would unpickle (or evaluate)
is checked first, and refused with exit 2 naming the member unless --trust-pickle is given.

The crafted archives' payload creates a marker folder; the CLI runs in a subprocess so nothing in
this test process could hide the payload running.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest
import torch

from cli_harness import run_cli_subprocess


class _Payload:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _saved(obj) -> bytes:
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


def _rewrite(src: Path, dst: Path, replace: dict[str, bytes]) -> Path:
    """Copy an archive, replacing members named relative to its root folder."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
        for info in zin.infolist():
            tail = info.filename.split("/", 1)[1]
            zout.writestr(info.filename, replace.get(tail, zin.read(info.filename)))
    return dst


def _read(archive: Path, tail: str) -> bytes:
    with zipfile.ZipFile(archive) as zf:
        return zf.read(next(n for n in zf.namelist() if n.split("/", 1)[1] == tail))


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    """A legitimate archive (dynamic batch, so its graph holds symbolic expressions), its flatbuffer,
    and one malicious variant per kind of member torch would run code from."""
    folder = tmp_path_factory.mktemp("pt2")
    model = torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
    batch = torch.export.Dim("batch", min=1, max=8)
    good = folder / "good.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 4),), dynamic_shapes=({0: batch},)), good)
    fixed = folder / "fixed.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(2, 4),)), fixed)
    from edge_export import export

    tflite = export(str(fixed), output=folder / "fixed.tflite", validate=False).tflite_path

    markers = {kind: folder / f"PAYLOAD_RAN_{kind}" for kind in ("sample_inputs", "weight", "sympy")}
    weights_config = json.loads(_read(good, "data/weights/model_weights_config.json"))
    weights_config["config"]["0.weight"]["use_pickle"] = True
    pickled_config = json.dumps(weights_config).encode()
    code = f"__import__('os').mkdir({str(markers['sympy'])!r})"
    graph = _read(good, "models/model.json").decode()
    symbol = json.loads(graph)["graph_module"]["graph"]["tensor_values"]["input"]["sizes"][0]["as_expr"]["expr_str"]
    evil = {
        # the sample inputs are unpickled with a fallback to weights_only=False
        "sample_inputs": _rewrite(
            good, folder / "evil_sample_inputs.pt2",
            {"data/sample_inputs/model.pt": _saved((_Payload(str(markers["sample_inputs"])),))},
        ),
        # a weight whose config says use_pickle is loaded with torch.load(weights_only=False)
        "weight": _rewrite(
            good, folder / "evil_weight.pt2",
            {"data/weights/model_weights_config.json": pickled_config,
             "data/weights/weight_0": _saved(_Payload(str(markers["weight"])))},
        ),
        # symbolic shapes go through sympy.sympify, which evaluates Python (no quotes or dots needed)
        "sympy": _rewrite(
            good, folder / "evil_sympy.pt2",
            {"models/model.json": graph.replace(
                json.dumps(symbol)[1:-1], "eval(" + "+".join(f"chr({ord(c)})" for c in code) + ")"
            ).encode()},
        ),
    }
    # use_pickle with a plain tensor is what torch.export.save itself writes for some tensors
    plain = _rewrite(
        good, folder / "plain_pickled_weight.pt2",
        {"data/weights/model_weights_config.json": pickled_config,
         "data/weights/weight_0": _saved(torch.nn.Parameter(torch.randn(3, 4)))},
    )
    return {"good": good, "tflite": tflite, "evil": evil, "markers": markers, "plain": plain, "folder": folder}


MEMBERS = {
    "sample_inputs": "data/sample_inputs/model.pt",
    "weight": "data/weights/weight_0",
    "sympy": "models/model.json",
}


def _refused(res, member: str) -> None:
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    text = " ".join(res.stderr.split())
    assert member in text and "--trust-pickle" in text and "arbitrary code" in text, text
    assert text.count("error:") == 1 and "Traceback" not in res.stderr, res.stderr


@pytest.mark.parametrize("kind", sorted(MEMBERS))
def test_export_refuses_archive_payload(archives, tmp_path, kind):
    marker = archives["markers"][kind]
    res = run_cli_subprocess(archives["evil"][kind], "-o", tmp_path / "out.tflite", "--no-validate")
    assert not marker.exists(), f"the {kind} payload ran"
    _refused(res, MEMBERS[kind])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", ["sample_inputs", "weight"])
def test_validate_reference_refuses_archive_payload(archives, tmp_path, kind):
    marker = archives["markers"][kind]
    res = run_cli_subprocess(
        "validate", archives["tflite"], "--reference", archives["evil"][kind], "--report", tmp_path / "v"
    )
    assert not marker.exists(), f"the {kind} payload ran"
    _refused(res, MEMBERS[kind])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kind", sorted(MEMBERS))
def test_crafted_archives_do_run_code_when_trusted(archives, kind):
    """The control: the crafted archives are real attacks, so the refusals above mean something."""
    from edge_export.errors import EdgeExportError
    from edge_export.loading.sources import load_model

    marker = archives["markers"][kind]
    try:
        load_model(archives["evil"][kind], trust_pickle=True)
    except EdgeExportError:
        pass  # the payload replaced a tensor, so torch fails after running it
    assert marker.exists()
    marker.rmdir()


def test_legitimate_archives_load(archives, tmp_path, run_cli):
    from edge_export.loading.sources import load_model

    # a pickled plain tensor is loaded with weights_only=True, no --trust-pickle needed
    loaded = load_model(archives["plain"])
    assert loaded.module(torch.randn(2, 4)).shape == (2, 3)
    res = run_cli(archives["good"], "--trust-pickle", "-o", tmp_path / "trusted.tflite")
    assert res.exit_code == 0, res.stderr
    res = run_cli(archives["good"], "-o", tmp_path / "plain.tflite")
    assert res.exit_code == 0, res.stderr


def test_graph_calling_a_non_operator_is_refused(tmp_path):
    """torch's deserializer resolves any `torch.*` name in the graph JSON (e.g. torch.os.system)."""
    from edge_export.loading.archive_safety import UnsafeArchiveMember, check_graph_targets

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.call_function(os.getcwd, ())
    graph.output(graph.call_function(torch.ops.aten.relu.default, (x,)))
    module = torch.fx.GraphModule(torch.nn.Module(), graph)
    with pytest.raises(UnsafeArchiveMember, match="posix.getcwd"):
        check_graph_targets(Path("m.pt2"), module)
    exported = torch.export.export(torch.nn.Sequential(torch.nn.Linear(4, 3)), (torch.randn(2, 4),))
    check_graph_targets(Path("m.pt2"), exported.graph_module)  # operators only: accepted


@pytest.mark.parametrize("kind", ["sample_inputs", "weight"])
def test_unpickling_guard_alone_stops_the_payload(archives, monkeypatch, kind):
    """Defence in depth: with the member check switched off, torch.load held to weights_only while
    torch reads the archive still stops the payload."""
    from edge_export.loading import pt2_archive
    from edge_export.errors import ModelLoadError
    from edge_export.loading.sources import load_model

    def unchecked(path, limits=None):
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
            return pt2_archive.CheckedArchive(names[0].split("/")[0], {n.split("/", 1)[1]: zf.read(n) for n in names})

    monkeypatch.setattr(pt2_archive, "read_checked_archive", unchecked)
    with pytest.raises(ModelLoadError, match="more than tensors"):
        load_model(archives["evil"][kind])
    assert not archives["markers"][kind].exists()
