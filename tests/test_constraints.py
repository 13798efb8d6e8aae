"""The pinned set travels with the package: the shipped copy is the root file, `edge-export constraints`
prints it, and a run's libraries are compared with it (`--version`, the report's `pinned_set`)."""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from cli_harness import REPO, run_cli_subprocess
from edge_export.constraints import (
    PINNED_LIBRARIES,
    check_pinned_set,
    constraints_text,
    library_versions,
    pinned_versions,
)

ROOT_CONSTRAINTS = REPO / "constraints.txt"


def test_shipped_copy_is_the_root_file():
    shipped = (REPO / "edge_export" / "constraints.txt").read_text()
    assert shipped == ROOT_CONSTRAINTS.read_text(), (
        "edge_export/constraints.txt differs from constraints.txt: cp constraints.txt edge_export/constraints.txt"
    )
    assert constraints_text() == shipped


def test_every_pin_is_read_and_the_pinned_libraries_are_pinned():
    pins = [line for line in ROOT_CONSTRAINTS.read_text().splitlines() if "==" in line and not line.startswith("#")]
    assert len(pinned_versions()) == len(pins)
    for line in pins:
        name, version = line.split("==")
        canonical = name.lower().replace("_", "-").replace(".", "-")
        assert pinned_versions()[canonical] == version.strip()
    assert set(PINNED_LIBRARIES) <= set(pinned_versions())


def test_cli_and_module_print_the_file_verbatim_without_heavy_imports():
    res = run_cli_subprocess("constraints")
    assert res.exit_code == 0 and res.stdout == ROOT_CONSTRAINTS.read_text()
    code = (
        "import sys, io, contextlib\n"
        "from edge_export.constraints import main\n"
        "from edge_export.cli import main as cli\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n    main()\n"
        "try:\n    cli(['--version'])\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('torch', 'litert_torch', 'ai_edge_litert', 'ai_edge_quantizer', 'numpy') if m in sys.modules]\n"
        "print('SAME', buf.getvalue() == open(sys.argv[1]).read(), 'HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(ROOT_CONSTRAINTS)], capture_output=True, text=True, timeout=60)
    assert "SAME True HEAVY []" in proc.stdout, proc.stdout + proc.stderr


def test_version_names_each_library_in_use():
    res = run_cli_subprocess("--version")
    assert res.exit_code == 0
    lines = res.stdout.splitlines()
    from edge_export import __version__

    assert lines[0] == f"edge-export {__version__}"
    for name in PINNED_LIBRARIES:
        assert any(line.split() == [name, metadata.version(name)] for line in lines), (name, res.stdout)
    # this environment is the tested one (CI installs it with -c constraints.txt): no warning
    assert check_pinned_set(library_versions()).status == "tested"
    assert "warning" not in res.stdout


def test_the_tested_versions_pass_and_a_local_build_label_is_accepted():
    pinned = {name: pinned_versions()[name] for name in PINNED_LIBRARIES}
    assert check_pinned_set(pinned).status == "tested" and check_pinned_set(pinned).warning() is None
    local = {**pinned, "torch": pinned["torch"] + "+cpu"}  # pip's ==X accepts X+cpu
    assert check_pinned_set(local).mismatches == ()


@pytest.mark.parametrize("installed", ["0.0.1", None])
def test_a_different_or_missing_library_is_a_named_mismatch(installed):
    pinned = {name: pinned_versions()[name] for name in PINNED_LIBRARIES}
    check = check_pinned_set({**pinned, "litert-torch": installed})
    assert check.status == "untested"
    assert [(m.name, m.pinned, m.installed) for m in check.mismatches] == [("litert-torch", pinned["litert-torch"], installed)]
    warning = check.warning()
    assert f"litert-torch {installed or 'not installed'} (tested: {pinned['litert-torch']})" in warning
    assert "edge-export constraints" in warning


def _report_with_libraries(libraries):
    from dataclasses import replace

    from report_fixtures import full_report

    return replace(full_report(), libraries=libraries, pinned_set=check_pinned_set(libraries))


def test_report_names_a_mismatch_in_json_markdown_and_summary():
    import io

    from rich.console import Console

    from cli_harness import validate_report
    from edge_export.reports.markdown import escape_markdown, render_markdown
    from edge_export.output.serialize import to_json_value
    from edge_export.reports.summary import print_summary

    pinned = {name: pinned_versions()[name] for name in PINNED_LIBRARIES}
    report = _report_with_libraries({"python": "3.11.7", **pinned, "torch": "0.0.1", "numpy": "2.0.0"})
    data = validate_report(to_json_value(report))
    assert data["pinned_set"] == {
        "status": "untested",
        "pinned": pinned,
        "mismatches": [{"name": "torch", "pinned": pinned["torch"], "installed": "0.0.1"}],
    }
    assert list(data)[:4] == ["schema_version", "tool", "libraries", "pinned_set"]
    markdown = render_markdown(report)
    warning = next(line for line in markdown.splitlines() if "Not the tested library set" in line)
    assert f"torch {escape_markdown('0.0.1')} (tested: {escape_markdown(pinned['torch'])})" in warning
    assert "`pip install edge-export -c <(edge-export constraints)`" in warning
    err = io.StringIO()
    print_summary(report, Console(file=io.StringIO(), width=300), Console(file=err, width=300))
    assert f"warning: not the tested library set: torch 0.0.1 (tested: {pinned['torch']})" in err.getvalue()


def test_report_of_the_tested_set_has_no_warning():
    from cli_harness import validate_report
    from edge_export.reports.markdown import render_markdown
    from edge_export.output.serialize import to_json_value

    pinned = {name: pinned_versions()[name] for name in PINNED_LIBRARIES}
    report = _report_with_libraries({"python": "3.11.7", **pinned, "numpy": "2.0.0"})
    assert validate_report(to_json_value(report))["pinned_set"]["status"] == "tested"
    assert "tested library set" not in render_markdown(report)


def test_the_wheel_ships_the_set_and_prints_it_before_its_dependencies_are_installed(tmp_path):
    """The bootstrap README and the GitLab job use: `pip install --no-deps` of the wheel, then
    `python -m edge_export.constraints` with none of edge-export's dependencies installed."""
    import zipfile

    wheels = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "--no-index", str(REPO), "-w", str(wheels)],
        check=True, timeout=300, capture_output=True,
    )
    (wheel,) = wheels.glob("edge_export-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert archive.read("edge_export/constraints.txt").decode() == ROOT_CONSTRAINTS.read_text()
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(site), str(wheel)],
                   check=True, timeout=300, capture_output=True)
    bare = tmp_path / "bare"  # a Python with nothing installed: no typer, rich, numpy or torch
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    proc = subprocess.run([bare / "bin" / "python", "-m", "edge_export.constraints"], capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)}, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and proc.stdout == ROOT_CONSTRAINTS.read_text(), proc.stderr
