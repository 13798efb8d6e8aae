"""Headroom for 16-bit activations (quantization/int16_headroom.py): a tensor an int16 operator writes
gets a wider range, by as much as its extremes grew from half of the calibration samples to all of
them (at most 2x), so an input a little beyond the calibration data is not clipped; a
normalization's statistics (squares, their mean, RSQRT) and int8 tensors keep theirs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quantization_models import Mlp, RmsNormed, make
from torch import nn

from edge_export.config import InputSpec
from edge_export.flatbuffer import read_flatbuffer
from edge_export.options import QuantizeMode
from edge_export.quantization import flatbuffer_recipes, int16_headroom
from edge_export.quantization.calibration import CalibrationSet

SPEC = InputSpec((1, 8, 16), name="x")


class NormedMlp(nn.Module):
    """A projection, a LayerNorm (SQUARED_DIFFERENCE, MEAN, ADD eps, RSQRT), a ReLU MLP head."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.hidden = nn.Linear(32, 32)
        self.head = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.hidden(self.norm(self.proj(x))))).flatten(1)


def _float_bytes(module: nn.Module) -> bytes:
    from edge_export.conversion.litert import convert_module

    return convert_module(module, (torch.zeros(SPEC.shape),))


def _calibration(scale: float, n: int = 16, seed: int = 3) -> CalibrationSet:
    rng = np.random.default_rng(seed)
    return CalibrationSet(tuple((rng.standard_normal(SPEC.shape).astype(np.float32) * scale,) for _ in range(n)), "test", True)


@pytest.fixture(scope="module")
def normed():
    module = make(NormedMlp)
    return module, _float_bytes(module)


def _by_opcode(model, names):
    writer = {model.tensors[i].name: op.opcode for op in model.operators for i in op.outputs}
    return sorted(writer[n] for n in names)


def test_a_layernorms_statistics_are_found_and_nothing_else(normed):
    model = read_flatbuffer(normed[1], origin="test")
    found = int16_headroom.statistic_tensors(model)
    opcodes = _by_opcode(model, found)
    assert {"SQUARED_DIFFERENCE", "MEAN", "ADD", "RSQRT"} <= set(opcodes), opcodes
    assert opcodes.count("FULLY_CONNECTED") == 0 and opcodes.count("MEAN") == 1, opcodes
    rms = read_flatbuffer(_float_bytes(make(RmsNormed)), origin="test")
    rms_found = _by_opcode(rms, int16_headroom.statistic_tensors(rms))
    assert "RSQRT" in rms_found and "FULLY_CONNECTED" not in rms_found, rms_found
    # the product y * rsqrt(...) is the normalized value, not a statistic
    assert rms_found.count("MUL") <= 1


def test_headroom_doubles_ranges_away_from_zero_and_keeps_statistics_constants_and_non_numbers(normed):
    model = read_flatbuffer(normed[1], origin="test")
    stats = sorted(int16_headroom.statistic_tensors(model))
    constant = next(t.name for t in model.tensors if t.is_constant)
    free = [t.name for t in model.tensors if not t.is_constant and t.name not in stats][:4]
    qsvs = {
        free[0]: {"min": np.float32(-1.5), "max": np.float32(3.0)},
        free[1]: {"min": np.float32(0.5), "max": np.float32(3.0)},  # one-sided: grows from zero
        free[2]: {"min": np.float32(-np.inf), "max": np.float32(1.0)},
        free[3]: {"min": np.float32(-3e38), "max": np.float32(1.0)},  # doubled would overflow float32
        stats[0]: {"min": np.float32(0.0), "max": np.float32(7.0)},
        constant: {"min": np.float32(-1.0), "max": np.float32(1.0)},
    }
    growth = dict.fromkeys(qsvs, 2.0)
    result, widened = int16_headroom.with_headroom(qsvs, qsvs, model, growth)
    assert widened == tuple(int16_headroom.RangeHeadroom(name, 2.0) for name in sorted(free[:2]))
    assert (float(result[free[0]]["min"]), float(result[free[0]]["max"])) == (-3.0, 6.0)
    assert (float(result[free[1]]["min"]), float(result[free[1]]["max"])) == (0.0, 6.0)
    for kept in (free[2], free[3], stats[0], constant):
        assert result[kept] is qsvs[kept]
    assert result[free[0]]["min"].dtype == np.float32
    # a tensor's own growth: 1.5x, and none without one (or at 1)
    result, widened = int16_headroom.with_headroom(qsvs, qsvs, model, {free[0]: 1.5, free[1]: 1.0})
    assert widened == (int16_headroom.RangeHeadroom(free[0], 1.5),) and (float(result[free[0]]["min"]), float(result[free[0]]["max"])) == (-2.25, 4.5)


def test_growth_is_what_one_half_of_the_samples_missed_clipped_to_the_cap():
    q = lambda lo, hi: {"min": np.float32(lo), "max": np.float32(hi)}  # noqa: E731
    first = {"steady": q(-1, 2), "spiky": q(0, 1), "wild": q(0, 10), "dead": q(0, 0), "moved": q(0, 0), "nan": q(0, np.nan)}
    second = {"steady": q(-1.8, 2.02), "spiky": q(0, 1.5), "wild": q(0, 1), "dead": q(0, 0), "moved": q(0, 3), "nan": q(0, 1)}
    growth = int16_headroom.growth_between(first, second)
    assert growth["steady"] == pytest.approx(1.01) and growth["spiky"] == pytest.approx(1.5)
    assert growth["wild"] == growth["moved"] == growth["nan"] == int16_headroom.HEADROOM_CAP and growth["dead"] == 1.0
    union = int16_headroom.union_of(first, second)
    assert (float(union["steady"]["min"]), float(union["steady"]["max"])) == (pytest.approx(-1.8), pytest.approx(2.02))
    assert union["wild"]["max"] == np.float32(10)


def test_the_calibrated_ranges_are_those_of_every_sample_and_the_growth_is_measured(normed):
    """Calibrating in two halves gives the same ranges as one calibration over all the samples."""
    from ai_edge_quantizer import quantizer as aeq
    from ai_edge_quantizer import recipe as aeq_recipe

    _, float_bytes = normed
    model = read_flatbuffer(float_bytes, origin="test")
    data = flatbuffer_recipes._signature_data(model, _calibration(1.0))
    qz = aeq.Quantizer(bytearray(float_bytes), aeq_recipe.static_wi8_ai8())
    whole = flatbuffer_recipes._min_max_ranges(qz, model, float_bytes, data, "minmax")
    split, growth = flatbuffer_recipes._split_min_max_ranges(qz, model, float_bytes, data, "minmax")
    assert split.keys() == whole.keys()
    for name in whole:
        np.testing.assert_array_equal(split[name]["min"], whole[name]["min"])
        np.testing.assert_array_equal(split[name]["max"], whole[name]["max"])
    assert growth and all(1.0 <= g <= int16_headroom.HEADROOM_CAP for g in growth.values())
    assert 1.0 < np.median(list(growth.values())) < 1.5  # 8 Gaussian samples against 8 more
    # three samples say nothing about the spread: the cap; a narrowing observer: no growth
    few = {key: samples[:3] for key, samples in data.items()}
    assert set(flatbuffer_recipes._split_min_max_ranges(qz, model, float_bytes, few, "minmax")[1].values()) == {2.0}
    assert flatbuffer_recipes._split_min_max_ranges(qz, model, float_bytes, data, "percentile")[1] == {}


def _scales(model_bytes: bytes) -> dict[str, float]:
    model = read_flatbuffer(model_bytes, origin="test")
    return {t.name: t.quant.scales[0] for t in model.tensors if t.quant and len(t.quant.scales) == 1 and not t.is_constant}


def _no_growth(monkeypatch) -> None:
    real = int16_headroom.growth_between
    monkeypatch.setattr(int16_headroom, "growth_between", lambda a, b: dict.fromkeys(real(a, b), 1.0))


def test_int16x8_widens_linear_tensors_by_their_growth_not_the_normalization(normed, monkeypatch):
    _, float_bytes = normed
    calibration = _calibration(1.0, n=4)  # 2 against 2: every tensor's extremes grow
    with_room = _scales(flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT16X8, calibration))
    int8 = _scales(flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT8, calibration, weight_rounding=False))
    _no_growth(monkeypatch)
    without = _scales(flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT16X8, calibration))
    stats = int16_headroom.statistic_tensors(read_flatbuffer(float_bytes, origin="test"))
    ratios = {name: with_room[name] / without[name] for name in with_room.keys() & without.keys()}
    assert any(r > 1.05 for n, r in ratios.items() if n not in stats), ratios
    assert all(r <= 2.0 + 1e-3 for r in ratios.values())
    stat_ratios = [r for n, r in ratios.items() if n in stats]
    assert stat_ratios and all(r == pytest.approx(1.0, rel=1e-3) for r in stat_ratios), stat_ratios
    # int8 keeps its calibrated ranges
    assert int8 == _scales(flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT8, calibration, weight_rounding=False))


def _sqnr(module: nn.Module, model_bytes: bytes, inputs: list[np.ndarray]) -> float:
    from edge_export.runtime.interpreter import TFLiteRunner

    runner = TFLiteRunner(read_flatbuffer(model_bytes, origin="test"))
    ref = np.concatenate([module(torch.from_numpy(x)).detach().numpy().ravel() for x in inputs]).astype(np.float64)
    got = np.concatenate([np.asarray(runner.run([x])[0]).ravel() for x in inputs]).astype(np.float64)
    return float(10 * np.log10(np.sum(ref**2) / max(np.sum((ref - got) ** 2), 1e-30)))


def _spiky_calibration(n: int = 16) -> CalibrationSet:
    """Inputs of spread 0.4 but one of spread 1 (as a few photos of high contrast set a detector's
    extremes): the half of the samples without it reaches about half as far."""
    rng = np.random.default_rng(3)
    spreads = [1.0] + [0.4] * (n - 1)
    return CalibrationSet(tuple((rng.standard_normal(SPEC.shape).astype(np.float32) * s,) for s in spreads), "test", True)


def test_an_input_beyond_spiky_calibration_data_is_not_clipped_at_int16(monkeypatch):
    """Calibrated on inputs of spread 0.4 with one of spread 1, run on inputs of spread 1.4 (YOLO11n's
    held-out photos exceeded its calibrated ranges by up to 1.44x): with headroom the int16 model
    still follows PyTorch; without it every tensor clips."""
    module = make(Mlp)
    float_bytes = _float_bytes(module)
    calibration = _spiky_calibration()
    wider = [x[0] * 1.4 for x in _calibration(1.0, n=8, seed=11).samples]
    with_room = _sqnr(module, flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT16X8, calibration), wider)
    _no_growth(monkeypatch)
    clipped = _sqnr(module, flatbuffer_recipes.quantize_flatbuffer(float_bytes, QuantizeMode.INT16X8, calibration), wider)
    assert with_room > clipped + 10, (with_room, clipped)
    assert with_room > 35, with_room


def test_the_search_gives_headroom_only_to_what_int16_operators_alone_read(normed):
    from edge_export.quantization.mixed_precision.order import promotion_overrides
    from edge_export.quantization.operator_scopes import quantizable_ops
    from edge_export.quantization.sensitivity import RecipeQuantizer

    _, float_bytes = normed
    quantizer = RecipeQuantizer(float_bytes, _calibration(1.0), weight_rounding=False)
    quantizer.growth = dict.fromkeys(quantizer.growth, 2.0)
    model = quantizer.float_model
    proj, hidden, head = [op for op in quantizable_ops(model) if op.opcode == "FULLY_CONNECTED"]

    def ratio(ranges, op) -> float:
        name = model.tensors[model.operators[op.index].outputs[0]].name
        width = lambda qsv: float(np.max(qsv["max"]) - np.min(qsv["min"]))  # noqa: E731
        return width(ranges[name]) / width(quantizer.qsvs[name])

    # hidden and head at int16: hidden's output, which only head reads, is widened; proj's is not
    ranges = quantizer._ranges_and_headroom("int8", promotion_overrides(quantizer, [hidden, head], "int16"))[0]
    assert ratio(ranges, hidden) == pytest.approx(2.0) and ratio(ranges, proj) == pytest.approx(1.0)
    # hidden alone: its int8 reader requantizes its output from the same range, which stays
    ranges = quantizer._ranges_and_headroom("int8", promotion_overrides(quantizer, [hidden], "int16"))[0]
    assert ratio(ranges, hidden) == pytest.approx(1.0)
    # an int16 base: every operator's output but those an int8 one reads
    ranges = quantizer._ranges_and_headroom("int16", {proj: "int8"})[0]
    assert ratio(ranges, hidden) == pytest.approx(2.0) and ratio(ranges, proj) == pytest.approx(1.0)
    assert ratio(quantizer._ranges_and_headroom("int8", {})[0], hidden) == pytest.approx(1.0)
