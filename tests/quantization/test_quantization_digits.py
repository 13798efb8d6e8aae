"""The trained digits example (quick version): int8 keeps the held-out accuracy within 1 point."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "digits" / "digits_example.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("digits_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digits_int8_accuracy_drop_within_one_point(tmp_path):
    results = _load_example().run(quick=True, out_dir=tmp_path, modes=("int8",))
    models = results["models"]
    assert models["pytorch"]["top1"] > 0.9  # the model actually learned the task
    assert models["int8"]["fully_integer"]
    assert models["int8"]["drop_points"] <= 1.0, models
    assert models["fp32"]["drop_points"] <= 0.3, models
    assert (tmp_path / "digits_int8.tflite").stat().st_size < 0.4 * (tmp_path / "digits_fp32.tflite").stat().st_size


@pytest.mark.slow
def test_digits_mobilenetv2_int8_accuracy_drop_within_one_point(tmp_path):
    # A trained MobileNetV2-style network (depthwise convs, ReLU6, inverted residuals with residual
    # adds, global mean) keeps its accuracy in int8, although the same architecture with random
    # weights shows a poor int8 logits SQNR (random weights amplify the noise; examples/digits/README.md).
    results = _load_example().run(quick=True, out_dir=tmp_path, modes=("int8",), arch="mobilenetv2")
    models = results["models"]
    assert models["pytorch"]["top1"] > 0.9
    assert models["int8"]["fully_integer"]
    assert models["int8"]["drop_points"] <= 1.0, models
    assert models["fp32"]["drop_points"] <= 0.3, models
    assert models["int8"]["test_sqnr_db"] > 25.0, models  # 31 dB on the held-out images in this quick run
    assert (tmp_path / "digits_int8.tflite").stat().st_size < 0.6 * (tmp_path / "digits_fp32.tflite").stat().st_size
