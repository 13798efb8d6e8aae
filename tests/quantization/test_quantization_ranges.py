"""--range-algorithm: the MSE range search on known values, torchao's histogram cut at percentiles,
and the option's mapping onto each backend's observer (and its refusals, exit 2)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from quantization_models import CNN_SPEC, heldout, tflite_outputs, torch_outputs

from edge_export.config import QuantizeMode
from edge_export.errors import UsageError
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization import synthetic_calibration
from edge_export.quantization.flatbuffer_recipes import (
    _quantization_mse,
    _SortedValues,
    mse_range,
    quantize_flatbuffer,
)
from edge_export.quantization.ranges import check_range_algorithm, observers_for
from edge_export.validators.metrics import sqnr_db


def _quant_mse(values, lo, hi, levels=255):
    scale = (hi - lo) / levels
    zp = np.round(-lo / scale)
    q = np.clip(np.round(values / scale) + zp, 0, levels)
    return float(np.mean(((q - zp) * scale - values) ** 2))


def test_mse_range_keeps_a_dense_uniform_range():
    values = np.linspace(-1.0, 1.0, 20001)
    lo, hi = mse_range(values, -1.0, 1.0)
    assert lo <= -0.95 and hi >= 0.95  # clipping a uniform distribution costs more than it saves


def test_mse_range_finds_the_known_gaussian_clipping_points():
    # The MSE-optimal clipping of a Gaussian is about 2.5 sigma at 4 bits and 3.9 sigma at 8 bits
    # (Banner et al., "Post training 4-bit quantization", 2019).
    values = np.random.default_rng(0).standard_normal(100000)
    full = (values.min(), values.max())  # about +-4.6 sigma
    lo4, hi4 = mse_range(values, *full, levels=15)
    assert 2.2 < hi4 < 2.9 and -2.9 < lo4 < -2.2
    assert _quant_mse(values, lo4, hi4, 15) < 0.5 * _quant_mse(values, *full, 15)
    lo8, hi8 = mse_range(values, *full, levels=255)
    assert 3.6 < hi8 < 4.3 and -4.3 < lo8 < -3.6
    assert _quant_mse(values, lo8, hi8) < _quant_mse(values, *full)


def test_mse_range_keeps_a_lone_outlier_that_costs_more_clipped():
    # One value at 60 among 50000 standard normals: clipping it to ~4 costs 56^2/50001 = 0.06 in
    # MSE, far more than the coarser rounding of the whole range (step 0.25: 0.005).
    values = np.concatenate([np.random.default_rng(0).standard_normal(50000), [60.0]])
    lo, hi = mse_range(values, values.min(), 60.0)
    assert hi > 50.0 and lo <= 0.0


def test_mse_range_degenerate_inputs():
    assert mse_range(np.zeros(10), 0.0, 0.0) == (0.0, 0.0)
    assert mse_range(np.array([]), -1.0, 2.0) == (-1.0, 2.0)
    lo, hi = mse_range(np.array([0.5, 1.0]), 0.5, 1.0)  # zero is kept inside the range
    assert lo == 0.0 and hi > 0.0


def _mse_range_per_value(values, lo, hi, levels):
    """mse_range's search with the error evaluated value by value (the search before it was sped up)."""
    return mse_range(values, lo, hi, levels, per_value=True)


def _activation_like(kind: str, rng) -> np.ndarray:
    n = 30000
    return {
        "normal": rng.standard_normal(n),
        "relu": np.maximum(rng.standard_normal(n), 0.0) * 3.0,  # half exact zeros
        "offset": rng.laplace(size=n) * 0.01 + 5.0,  # far from zero: the widest cancellation
        "outliers": np.concatenate([rng.standard_normal(n), rng.standard_normal(20) * 40.0]),
        "heavy_float32": rng.standard_t(3, n).astype(np.float32),
    }[kind]


@pytest.mark.parametrize("kind", ["normal", "relu", "offset", "outliers", "heavy_float32"])
@pytest.mark.parametrize("levels", [255, 15])
def test_sorted_mse_search_finds_what_the_per_value_search_finds(kind, levels):
    # The running-sum evaluation is a speed-up only: same errors (to far below the 1e-9 tie
    # margin) and the same chosen range as evaluating every value.
    values = _activation_like(kind, np.random.default_rng(7))
    full = (float(values.min()), float(values.max()))
    sorted_values = _SortedValues(values)
    for lo, hi in (full, (0.5 * full[0], 0.7 * full[1]), (min(full[0], 0.0), 0.1 * full[1])):
        lo, hi = min(lo, 0.0), max(hi, 0.0)
        exact = _quantization_mse(np.asarray(values, np.float64), lo, hi, levels)
        assert sorted_values.quantization_mse(lo, hi, levels) == pytest.approx(exact, rel=1e-10)
    assert mse_range(values, *full, levels=levels) == _mse_range_per_value(values, *full, levels)


def test_pt2e_percentile_observer_cuts_the_histogram_tail():
    from edge_export.quantization.pt2e import _observer_class

    values = torch.cat([torch.linspace(-1.0, 1.0, 100000), torch.tensor([50.0])])
    percentile = _observer_class("percentile")(dtype=torch.qint8, qscheme=torch.per_tensor_affine)
    minmax = _observer_class("minmax")(dtype=torch.qint8, qscheme=torch.per_tensor_affine)
    percentile(values)
    minmax(values)
    p_scale, _ = percentile.calculate_qparams()
    m_scale, _ = minmax.calculate_qparams()
    assert float(p_scale) < 0.1 * float(m_scale)  # the outlier is outside the 99.99th percentile
    assert float(p_scale) * 255 >= 1.9  # the bulk [-1, 1] stays inside


def test_flatbuffer_mse_observer_gives_a_working_integer_model(cnn, cnn_float_bytes):
    calib = synthetic_calibration([CNN_SPEC], n=16, seed=5)
    data = quantize_flatbuffer(cnn_float_bytes, QuantizeMode.INT8, calib, observer="mse")
    assert read_flatbuffer(data).is_fully_integer
    xs = heldout(CNN_SPEC, 8)
    assert sqnr_db(torch_outputs(cnn, xs), tflite_outputs(data, xs)) > 25.0


def test_range_algorithm_names_map_onto_both_backends():
    assert observers_for(None) == {}
    assert observers_for("mse") == {"pt2e_observer": "histogram", "flatbuffer_observer": "mse"}
    assert observers_for("percentile") == {"pt2e_observer": "percentile", "flatbuffer_observer": "percentile"}
    with pytest.raises(UsageError, match="not known"):
        check_range_algorithm("kl")
    with pytest.raises(UsageError, match="does not"):
        check_range_algorithm("mse", QuantizeMode.DYNAMIC_INT8)


@pytest.fixture(scope="module")
def cnn_pt2(tmp_path_factory):
    from model_zoo import small_cnn

    src = tmp_path_factory.mktemp("ranges") / "cnn.pt2"
    x = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.export.save(torch.export.export(small_cnn(), (x,)), src)
    return src


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--quantize", "int8", "--range-algorithm", "kl"), "--range-algorithm kl is not known"),
        (("--quantize", "fp16", "--range-algorithm", "mse"), "does not calibrate"),
        (("--quantize", "int4", "--range-algorithm", "minmax"), "does not calibrate"),
    ],
)
def test_bad_range_algorithm_exits_2(tmp_path, run_cli, cnn_pt2, args, needle):
    res = run_cli(cnn_pt2, *args, "-o", tmp_path / "m.tflite")
    assert res.exit_code == 2 and needle in " ".join(res.stderr.split()) and "Traceback" not in res.stderr
    assert not (tmp_path / "m.tflite").exists()


def test_range_algorithm_reaches_the_report(tmp_path, run_cli, cnn_pt2):
    from cli_harness import read_report

    out = tmp_path / "mse.tflite"
    res = run_cli(cnn_pt2, "--quantize", "int8", "--range-algorithm", "mse", "--quant-backend", "flatbuffer",
                  "--calibration-samples", "16", "-o", out)
    assert res.exit_code == 0, res.stderr
    q = read_report(out)["quantization"]
    assert q["observer"] == "mse" and q["attempts"][0]["observer"] == "mse"


class PaddedMaxPool(torch.nn.Module):
    """ResNet's stem in small: a max pool with padding, which the runtime's kept tensor pads with -inf."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)
        self.head = torch.nn.Conv2d(8, 4, 1)

    def forward(self, x):
        return self.head(self.pool(torch.relu(self.conv(x))))


@pytest.mark.parametrize("observer", ["percentile", "mse"])
def test_flatbuffer_clipped_ranges_ignore_a_max_pools_infinite_padding(observer):
    # The percentile over a tensor holding -inf was NaN and became a NaN scale: LiteRT-invalid file.
    from edge_export.conversion.litert import convert_module

    torch.manual_seed(0)
    model = PaddedMaxPool().eval()
    float_bytes = convert_module(model, (torch.randn(*CNN_SPEC.shape),))
    calib = synthetic_calibration([CNN_SPEC], n=8, seed=5)
    data = quantize_flatbuffer(float_bytes, QuantizeMode.INT8, calib, observer=observer)
    assert read_flatbuffer(data).is_fully_integer  # read_flatbuffer refuses non-finite scales
    xs = heldout(CNN_SPEC, 8)
    assert sqnr_db(torch_outputs(model, xs), tflite_outputs(data, xs)) > 25.0
