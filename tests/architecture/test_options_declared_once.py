"""Options are declared once and never patched (issue 37, point 1): no class of edge_export gets an
attribute assigned after its class statement, every option field carries its flag, and
`export --help` shows the flags in their panels."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "edge_export"


def _patched_classes(path: Path) -> list[str]:
    """``Class.attr = ...`` at module level, for every class the module defines."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    found = []
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id in classes:
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {target.value.id}.{target.attr}")
    return found


def test_no_class_is_patched_after_its_class_statement():
    patched = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _patched_classes(path)]
    assert not patched, patched


def test_every_option_field_declares_its_flag():
    from edge_export.option_fields import flag_of
    from edge_export.options import GROUPS
    from edge_export.targets.registry import target_options_classes

    unflagged = [
        f"{cls.__name__}.{f.name}" for cls in [*GROUPS.values(), *target_options_classes()]
        for f in dataclasses.fields(cls) if flag_of(f) is None and f.name != "quiet_libraries"  # API only: the CLI's session captures
    ]
    assert not unflagged, unflagged


def test_export_help_shows_the_panels(run_cli):
    result = run_cli("export", "--help")
    assert result.exit_code == 0
    for panel in ("Input", "Layout", "Quantization", "Parity", "Metadata", "Outputs", "Target", "Target: micro", "Target: gpu",
                  "Target: edgetpu", "Language models (--task text-generation)"):
        assert f"─ {panel} ─" in result.stdout, panel
    assert "[NAME=]FILE" in result.stdout and "edge-export[plot]" in " ".join(result.stdout.split())  # brackets are not markup


def test_validate_help_shows_its_own_flags_only(run_cli):
    result = run_cli("validate", "--help")
    assert result.exit_code == 0 and "--reference" in result.stdout and "--test-vectors" in result.stdout
    assert "--channels-last" in result.stdout and "--no-channels-last" not in result.stdout
    for export_only in ("--quantize", "--max-flash", "--task", "--test-vectors-count"):
        assert export_only not in result.stdout, export_only
