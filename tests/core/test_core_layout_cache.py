"""The flatbuffer verifier's schema layout is cached on disk; a damaged cache is rebuilt."""

from __future__ import annotations

import json

import torch

from edge_export import flatbuffer
from edge_export.conversion import convert_module
from model_zoo import small_cnn


def test_layout_cache_round_trip_and_repair(tmp_path, monkeypatch):
    data = convert_module(small_cnn(), (torch.randn(1, 3, 16, 16),))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    flatbuffer._schema_layout.cache_clear()
    fresh = flatbuffer._derive_schema_layout()
    assert flatbuffer.read_flatbuffer(data).num_operators > 0
    files = list((tmp_path / "edge-export").glob("flatbuffer-schema-layout-*.json"))
    assert len(files) == 1
    flatbuffer._schema_layout.cache_clear()
    assert flatbuffer._schema_layout() == fresh  # read back from the cache, identical
    files[0].write_text("{not json")
    flatbuffer._schema_layout.cache_clear()
    assert flatbuffer._schema_layout() == fresh  # damaged cache: derived again
    assert json.loads(files[0].read_text())["tables"]  # and rewritten
    flatbuffer._schema_layout.cache_clear()
