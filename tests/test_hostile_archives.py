"""Hostile .pt2 archives, edited by hand from a clean torch.export.save file, are refused by the
allow-list reader (pt2_archive.py): exit 2 naming the member and the rule, no payload run, nothing
written. Each kind runs once through the CLI in a subprocess; its variants run through the reader.

The control (the payload does run when the file is trusted) is in test_sandbox.py.
"""

from __future__ import annotations

import json
import time
import zipfile
from pathlib import Path

import pytest

import hostile_archives as hostile
from cli_harness import run_cli_subprocess

pytestmark = pytest.mark.hostile  # untrusted input: in the default tier even where slow


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> Path:
    return hostile.build_clean(tmp_path_factory.mktemp("clean"))


def _kind(kind: str, clean: Path, folder: Path) -> tuple[Path, Path, str]:
    """(archive, marker, what the refusal says) for one kind; only that archive is built (building
    the inflating and exponent ones takes seconds)."""
    marker = folder / f"MARKER_{kind}"
    make = {
        "not_json": lambda: (hostile.write(folder / "a.pt2", hostile.program_member_not_json(clean, marker)), marker, "models/model.JSON"),
        "duplicate": lambda: (hostile.write(folder / "b.pt2", hostile.duplicate_program(clean, marker)), marker, "appears twice"),
        "param": lambda: (hostile.write(folder / "c.pt2", hostile.parameter_name_breakout(clean, marker)), marker, "not a dotted Python identifier"),
        "guard": lambda: (hostile.write(folder / "d.pt2", hostile.guard_code(clean, marker)), marker, "guard code"),
        "exponent": lambda: (hostile.write(folder / "e.pt2", hostile.exponent_bomb(clean)), folder / "none", "exponent"),
        "inflate": lambda: (hostile.write_inflating_sample_inputs(clean, folder / "f.pt2"), folder / "none", "declares 1073741824 bytes"),
    }
    return make[kind]()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["not_json", "duplicate", "param", "guard", "exponent", "inflate"])
def test_cli_refuses_hostile_archive(clean, tmp_path, kind):
    archive, marker, says = _kind(kind, clean, tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    start = time.monotonic()
    res = run_cli_subprocess(archive, "-o", out / "m.tflite", timeout=120)
    assert res.exit_code == 2, (res.exit_code, res.stderr[-2000:])
    text = " ".join(res.stderr.split())
    assert says in text and text.count("error:") == 1 and "Traceback" not in res.stderr, text
    assert "PAYLOAD_RAN" not in res.stderr and not marker.exists()
    assert list(out.iterdir()) == []
    assert time.monotonic() - start < 60  # the exponent is refused unread, not evaluated


def _refused(path: Path, match: str) -> None:
    from edge_export.loading.pt2_archive import UnsafeArchiveMember, read_checked_archive

    with pytest.raises(UnsafeArchiveMember, match=match):
        read_checked_archive(path)


@pytest.mark.parametrize("suffix", [".JSON", ".json.bak", "", "/nested.json", ".json "])
def test_program_member_of_any_other_name_is_refused(clean, tmp_path, suffix):
    archive = hostile.write(tmp_path / "a.pt2", hostile.program_member_not_json(clean, tmp_path / "m", suffix))
    _refused(archive, "not a form|not named|not one the archive format defines|name of a form")


@pytest.mark.parametrize("poisoned_first", [True, False])
def test_duplicate_member_is_refused_in_either_order(clean, tmp_path, poisoned_first):
    _refused(hostile.write(tmp_path / "d.pt2", hostile.duplicate_program(clean, tmp_path / "m", poisoned_first)), "appears twice")


def test_duplicate_weight_member_is_refused(clean, tmp_path):
    entries = hostile.members(clean)
    weight = next(e for e in entries if e[0].endswith("data/weights/weight_0"))
    _refused(hostile.write(tmp_path / "w.pt2", entries + [weight]), "appears twice")


@pytest.mark.parametrize("which", ["body.0.weight", "body.0.bias", "offset"])
def test_state_name_breakout_is_refused(clean, tmp_path, which):
    archive = hostile.write(tmp_path / "p.pt2", hostile.parameter_name_breakout(clean, tmp_path / "m", which))
    _refused(archive, "dotted Python identifier")


@pytest.mark.parametrize("expression", [
    "Pow(Integer(10), Pow(Integer(10), Integer(10)))",
    "10**10**10",
    "9**9**9**9",
    "s0**100000",
    "__import__('os').getcwd()",
    "Symbol('s0', positive=True, integer=True).__class__",
    "Lambda(s0, s0)",
    "(" * 60 + "s0" + ")" * 60,
])
def test_expressions_outside_the_grammar_are_refused(clean, tmp_path, expression):
    _refused(hostile.write(tmp_path / "x.pt2", hostile.exponent_bomb(clean, expression)), "symbolic expression")


def test_oversized_and_extra_members_are_refused(clean, tmp_path):
    entries = hostile.members(clean)
    root = entries[0][0].split("/")[0]
    _refused(hostile.write(tmp_path / "x.pt2", entries + [(f"{root}/extra/notes.txt", b"hi")]), "not one the archive format defines")
    _refused(hostile.write(tmp_path / "y.pt2", entries + [(f"{root}/data/weights/weight_9", b"\0" * 64)]), "not one the archive format defines")
    _refused(hostile.write(tmp_path / "z.pt2", entries + [("other/models/model.json", b"{}")]), "more than one root")
    _refused(hostile.write(tmp_path / "t.pt2", entries + [(f"{root}/../evil", b"")]), "name of a form")
    grown = [(n, d + b"\0" * 400 if n.endswith("weight_0") else d) for n, d in entries]
    _refused(hostile.write(tmp_path / "g.pt2", grown), "needs")


def test_program_with_unknown_keys_or_types_is_refused(clean, tmp_path):
    entries = hostile.members(clean)

    def edited(change) -> Path:
        out = []
        for name, data in entries:
            if name.endswith("models/model.json"):
                program = json.loads(data)
                change(program)
                data = json.dumps(program).encode()
            out.append((name, data))
        return hostile.write(tmp_path / "p.pt2", out)

    _refused(edited(lambda p: p["graph_module"].update(smuggled="x")), "keys the schema does not define")
    _refused(edited(lambda p: p["graph_module"]["graph"]["nodes"][0].update(target="torch.os.system")), "not a PyTorch operator")
    _refused(edited(lambda p: p["graph_module"]["graph"]["nodes"][0].update(inputs="x")), "not a list")
    _refused(edited(lambda p: p["graph_module"]["graph"]["nodes"][0]["outputs"][0].update(as_int=1)), "exactly one")


def test_a_clean_archive_round_trips_through_the_reader(clean):
    """The canonical bytes hold the same members, and torch loads them to the same module."""
    import torch

    from edge_export.loading.sources import load_model
    from edge_export.loading.pt2_archive import read_checked_archive

    checked = read_checked_archive(clean)
    with zipfile.ZipFile(clean) as zf:
        assert {n.split("/", 1)[1] for n in zf.namelist()} == set(checked.members)
    loaded = load_model(clean)
    x = torch.randn(3, 4)
    assert torch.allclose(loaded.module(x), torch.export.load(str(clean)).module()(x))
