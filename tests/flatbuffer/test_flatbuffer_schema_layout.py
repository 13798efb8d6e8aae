"""The flatbuffer verifier's schema layout ships with the package: it matches the pinned schema, is
read without deriving anything or writing under the user's home, and another schema is derived."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edge_export.flatbuffer import schema_layout as flatbuffer

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def fresh_layout_cache():
    flatbuffer.schema_layout.cache_clear()
    yield
    flatbuffer.schema_layout.cache_clear()


def test_shipped_layout_is_the_installed_schemas():
    """Fails after a change of the ai-edge-litert pin: run `python -m edge_export.flatbuffer --write-layout`."""
    layout, digest = flatbuffer._layout_from_json(flatbuffer._SHIPPED_LAYOUT.read_text(encoding="utf-8"))
    assert digest == flatbuffer._schema_source_digest()
    assert layout == flatbuffer._derive_schema_layout()
    assert {"Model", "SubGraph", "Buffer", "Conv2DOptions"} <= set(layout.tables)


def test_the_generator_reproduces_the_shipped_file(tmp_path):
    """`python -m edge_export.flatbuffer --write-layout` is deterministic: regenerating gives no diff."""
    written = flatbuffer.write_schema_layout(tmp_path / "layout.json")
    assert written.read_bytes() == flatbuffer._SHIPPED_LAYOUT.read_bytes()


def test_shipped_layout_is_package_data():
    section = re.search(r"\[tool\.setuptools\.package-data\]\nedge_export = \[(.*)\]", (REPO / "pyproject.toml").read_text())
    assert section and f'"flatbuffer/{flatbuffer._SHIPPED_LAYOUT.name}"' in section.group(1)
    assert flatbuffer._SHIPPED_LAYOUT.parent == REPO / "edge_export" / "flatbuffer"


def test_layout_is_read_not_derived_and_nothing_is_written_home(tmp_path, monkeypatch, fresh_layout_cache):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))

    def derive():
        raise AssertionError("the layout was derived although the shipped one fits the installed schema")

    monkeypatch.setattr(flatbuffer, "_derive_schema_layout", derive)
    layout = flatbuffer.schema_layout()
    assert layout.tables["Model"]
    assert list(tmp_path.iterdir()) == []


def test_another_schema_gets_a_derived_layout(tmp_path, monkeypatch, fresh_layout_cache):
    layout, _ = flatbuffer._layout_from_json(flatbuffer._SHIPPED_LAYOUT.read_text(encoding="utf-8"))
    stale = tmp_path / "layout.json"
    stale.write_text(flatbuffer._layout_to_json(flatbuffer.SchemaLayout(tables={}, unions={}), "0" * 64))
    monkeypatch.setattr(flatbuffer, "_SHIPPED_LAYOUT", stale)
    assert flatbuffer.schema_layout() == layout


def test_damaged_layout_is_an_internal_error(tmp_path, monkeypatch, fresh_layout_cache):
    from edge_export.errors import InternalError

    damaged = tmp_path / "layout.json"
    damaged.write_text("{not json")
    monkeypatch.setattr(flatbuffer, "_SHIPPED_LAYOUT", damaged)
    with pytest.raises(InternalError, match="missing or damaged"):
        flatbuffer.schema_layout()
