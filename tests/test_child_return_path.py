"""The parent trusts no value from a child: a compromised confined child (its stage function replaced
before the fork, the way code run by a hostile model could replace it) cannot choose where the parent
writes, and no child's bytes are unpickled outside the allow-list."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

import hostile_archives as hostile

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="children are forked")


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    return hostile.build_clean(tmp_path_factory.mktemp("clean"), dynamic=False)


def _compromised(victim: Path, files_extra: list):
    """A stage function that runs the real export, then lies about its artifacts."""
    import edge_export.api as api

    real = api._run_export

    def run(*args):
        report, files = real(*args)
        artifacts = replace(report.artifacts, report_json=str(victim / "r.json"), report_markdown=str(victim / "r.md"), junit=str(victim / "j.xml"))
        return replace(report, artifacts=artifacts), files + files_extra

    return run


def test_a_child_naming_other_report_paths_writes_only_where_the_user_asked(clean, tmp_path, monkeypatch):
    import edge_export.api as api
    from edge_export import export

    victim = tmp_path / "victim"
    victim.mkdir()
    monkeypatch.setattr(api, "_run_export", _compromised(victim, []))
    out = tmp_path / "out" / "m.tflite"
    result = export(str(clean), output=out, validate=False)
    assert list(victim.iterdir()) == []
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.report.json", "m.report.md", "m.tflite"]
    assert result.report["artifacts"]["report_json"] == str(out.parent / "m.report.json")
    assert result.report["model"]["isolation"].startswith("confined child process")


def test_a_child_returning_an_artifact_elsewhere_writes_nothing(clean, tmp_path, monkeypatch):
    import edge_export.api as api
    from edge_export import export

    victim = tmp_path / "victim"
    victim.mkdir()
    monkeypatch.setattr(api, "_run_export", _compromised(victim, [(victim / "planted.sh", b"echo owned")]))
    out = tmp_path / "out" / "m.tflite"
    with pytest.raises(RuntimeError, match="not among the checked outputs"):
        export(str(clean), output=out, validate=False)
    assert list(victim.iterdir()) == [] and not (tmp_path / "out").exists()


class _Evil:
    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_a_confined_child_returning_a_code_running_pickle_runs_nothing_here(tmp_path):
    from edge_export.processes.sandbox import run_confined

    marker = tmp_path / "MARKER"
    with pytest.raises(RuntimeError, match="cannot be read safely"):
        run_confined(lambda channel: _Evil(str(marker)))
    assert not marker.exists()


@pytest.mark.parametrize("how", ["result", "error"])
def test_an_isolated_child_returning_a_code_running_pickle_runs_nothing_here(tmp_path, how):
    """Every stage run apart (quantization, parity, latency, TFLite Micro...) comes back through the
    same allow-list: a result or an error object that would run code is refused."""
    from edge_export.processes.isolation import run_isolated

    marker = tmp_path / "MARKER"

    class EvilError(Exception):
        def __reduce__(self):
            return (os.mkdir, (str(marker),))

    def stage():
        if how == "error":
            raise EvilError("boom")
        return _Evil(str(marker))

    with pytest.raises(RuntimeError):
        run_isolated(stage, stage="test stage", backend="a test")
    assert not marker.exists()


def test_an_isolated_childs_third_party_error_comes_back_as_its_text():
    from edge_export.processes.isolation import run_isolated

    def stage():
        import json

        json.loads("{")  # json.JSONDecodeError: not a builtin, so it travels as text

    with pytest.raises(RuntimeError, match=r"json\.decoder\.JSONDecodeError: Expecting property name"):
        run_isolated(stage, stage="test stage", backend="a test")


def test_an_isolated_childs_own_errors_and_results_are_read_back():
    import numpy as np

    from edge_export.errors import UsageError
    from edge_export.processes.isolation import run_isolated

    def usage():
        raise UsageError("bad flag", "drop it")

    with pytest.raises(UsageError, match="bad flag"):
        run_isolated(usage, stage="test stage", backend="a test")
    with pytest.raises(ValueError, match="plain"):
        run_isolated(lambda: (_ for _ in ()).throw(ValueError("plain")), stage="test stage", backend="a test")
    value = run_isolated(lambda: {"a": np.arange(3), "b": (1.5, "x", None)}, stage="test stage", backend="a test")
    np.testing.assert_array_equal(value["a"], np.arange(3))
    assert value["b"] == (1.5, "x", None)


def test_no_child_result_is_unpickled_outside_the_allow_list():
    """A source-level guard: no module calls pickle.load/loads or builds an Unpickler of its own;
    child_results.py holds the one allow-list reader."""
    import re

    root = Path(__file__).resolve().parents[1] / "edge_export"
    calls = re.compile(r"\bpickle\.(loads?|Unpickler)\(|\bUnpickler\(")
    offenders = [
        f"{path.relative_to(root)}:{number}"
        for path in root.rglob("*.py") if path.name != "child_results.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if calls.search(line.split("#", 1)[0]) and '"""' not in line and "``" not in line
    ]
    assert offenders == []
