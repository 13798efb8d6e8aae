"""The table of quantization modes (quantize_modes.py) is the one place a mode is described:
a mode added to it at run time is picked up by every consumer without any other edit."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from edge_export.config import DEFAULT_THRESHOLDS, QuantBackend, QuantizeMode, default_thresholds
from edge_export.errors import UsageError
from edge_export.quantization import backends_for
from edge_export.quantization.flatbuffer_recipes import recipe_name
from edge_export.quantize_modes import MODES, mode_spec
from edge_export.quantization.pt2e import pt2e_supports
from edge_export.runtime.latency import HostLatency
from edge_export.stages.precision import infer_precision

FAKE = "int8-fake"


@pytest.fixture
def fake_mode(monkeypatch):
    """int8's entry under a new name, with its own thresholds, latency note, and a detector tried
    before every other one: the one edit a new mode needs."""
    spec = replace(
        MODES["int8"], name=FAKE, description="a test's mode", thresholds={**MODES["int8"].thresholds, "min_sqnr_db": 42.0},
        slower_because="the fake kernels are slow", detect_rank=-1,
    )
    monkeypatch.setitem(MODES, FAKE, spec)
    return spec


def test_every_mode_of_the_enum_has_one_entry():
    assert list(MODES) == [mode.value for mode in QuantizeMode]
    assert len({spec.detect_rank for spec in MODES.values()}) == len(MODES)
    assert all(mode_spec(mode) is MODES[mode.value] for mode in QuantizeMode)


def test_the_enum_flags_read_the_table():
    assert [m.value for m in QuantizeMode if m.is_integer] == ["dynamic-int8", "int8", "int16x8", "int4"]
    assert [m.value for m in QuantizeMode if m.needs_calibration] == ["int8", "int16x8"]


def test_a_mode_added_to_the_table_reaches_the_backends_and_recipes(fake_mode):
    assert backends_for(FAKE, QuantBackend.AUTO) == ["flatbuffer", "pt2e"]
    assert backends_for(FAKE, QuantBackend.PT2E) == ["pt2e"] and pt2e_supports(FAKE)
    assert recipe_name(FAKE) == "static_wi8_ai8"


def test_a_mode_without_pt2e_is_refused_by_the_pt2e_backend(monkeypatch):
    monkeypatch.setitem(MODES, FAKE, replace(MODES["int16x8"], name=FAKE, detect_rank=-1))
    assert backends_for(FAKE, QuantBackend.AUTO) == ["flatbuffer"]
    with pytest.raises(UsageError, match=f"cannot do --quantize {FAKE}"):
        backends_for(FAKE, QuantBackend.PT2E)


def test_a_mode_added_to_the_table_has_its_thresholds(fake_mode):
    assert default_thresholds(FAKE).min_sqnr_db == 42.0
    assert default_thresholds(FAKE).min_cosine == default_thresholds(QuantizeMode.INT8).min_cosine
    assert FAKE in list(DEFAULT_THRESHOLDS) and DEFAULT_THRESHOLDS[FAKE].min_sqnr_db == 42.0


def test_a_mode_added_to_the_table_has_its_latency_note(fake_mode):
    slow = HostLatency(quantize=FAKE, quantized_ms=3.0, float_ms=1.0, runs=3, warmup=1)
    assert "the fake kernels are slow" in slow.note
    assert "int8-fake runs 3.00x slower than fp32" in slow.note


def test_a_mode_added_to_the_table_is_recognised_in_a_flatbuffer(fake_mode):
    int8_model = SimpleNamespace(is_fully_integer=True, tensors=[SimpleNamespace(dtype="int8", quant=object(), is_constant=False)])
    assert infer_precision(int8_model) == FAKE


def test_precision_inference_keeps_its_order_without_the_new_mode():
    def model(*tensors, fully_integer=False):
        return SimpleNamespace(is_fully_integer=fully_integer, tensors=[SimpleNamespace(dtype=d, quant=q, is_constant=c) for d, q, c in tensors])

    quant = object()
    assert infer_precision(model(("int16", quant, False), ("int8", quant, False))) is QuantizeMode.INT16X8
    assert infer_precision(model(("int8", quant, False), ("int4", quant, True))) is QuantizeMode.INT8
    assert infer_precision(model(("float32", None, False), ("int4", quant, True), ("int8", quant, True))) is QuantizeMode.INT4
    assert infer_precision(model(("float32", None, False), ("int8", quant, True))) is QuantizeMode.DYNAMIC_INT8
    assert infer_precision(model(("float32", None, False), ("float16", None, True))) is QuantizeMode.FP16
    assert infer_precision(model(("float32", None, False), ("float32", None, True))) is QuantizeMode.NONE


def test_a_mode_added_to_the_table_is_a_quantize_mode_everywhere(tmp_path):
    """The enum is made from the table: an entry added before edge_export.config is imported (as a
    new mode is, in the source) is a QuantizeMode member that --quantize and ExportOptions accept,
    integer and calibrated as its entry says. In a fresh interpreter: the enum is
    made once, at import."""
    import subprocess
    import sys

    script = f"""
from dataclasses import replace
import edge_export.quantize_modes as table
table.MODES[{FAKE!r}] = replace(table.MODES["int8"], name={FAKE!r}, detect_rank=-1)
from edge_export.config import QuantizeMode, default_thresholds
from edge_export.options import ExportOptions
mode = QuantizeMode({FAKE!r})
assert mode.name == "INT8_FAKE" and mode.is_integer and mode.needs_calibration
assert ExportOptions.from_keywords(quantize={FAKE!r}).quantization.quantize is mode
assert default_thresholds(mode) == default_thresholds(QuantizeMode.INT8)
print("ok", mode.value)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"ok {FAKE}"
