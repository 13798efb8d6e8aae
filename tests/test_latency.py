from __future__ import annotations

import io
import json

import numpy as np
import pytest
from rich.console import Console

from edge_export.errors import FlatbufferError, UsageError
from edge_export.runtime.latency import LatencyStats, benchmark_latency, random_inputs, render_latency
from edge_export.runtime.interpreter import IOTensor, Resolver
from tools_models import cnn_models  # noqa: F401  (a pytest fixture)
from edge_export.output.serialize import to_json_value


def test_stats_from_known_samples():
    stats = LatencyStats.from_samples(Resolver.BUILTIN, [float(v) for v in range(1, 11)])
    assert stats.runs == 10
    assert stats.min_ms == 1.0 and stats.max_ms == 10.0
    assert stats.median_ms == 5.5 and stats.mean_ms == 5.5
    assert stats.p10_ms == pytest.approx(1.9) and stats.p90_ms == pytest.approx(9.1)
    assert stats.stdev_ms == pytest.approx(np.std(np.arange(1, 11), ddof=1))


@pytest.mark.parametrize("kind", ["fp32", "int8"])
def test_bench_reports_both_runtimes(cnn_models, kind):
    data = getattr(cnn_models, kind)
    report = benchmark_latency(data, threads=1, runs=5, warmup=1)

    assert [s.resolver for s in report.results] == [Resolver.XNNPACK, Resolver.BUILTIN]
    for s in report.results:
        assert s.runs == 5
        assert 0 < s.min_ms <= s.p10_ms <= s.median_ms <= s.p90_ms <= s.max_ms
        assert s.stdev_ms >= 0
    assert report.inputs[0].dtype == ("float32" if kind == "fp32" else "int8")
    assert report.xnnpack_speedup > 0

    d = json.loads(json.dumps(to_json_value(report)))
    assert list(d["results"][0]) == [
        "resolver", "runs", "median_ms", "p10_ms", "p90_ms", "min_ms", "max_ms", "mean_ms", "stdev_ms",
    ]
    assert d["threads"] == 1 and d["runs"] == 5 and d["warmup"] == 1

    buf = io.StringIO()
    render_latency(report, Console(file=buf, width=160, color_system=None))
    text = buf.getvalue()
    assert "XNNPACK" in text and "no delegate" in text and "median" in text and "Latency in ms" in text


def test_random_inputs_use_each_dtype():
    specs = [
        IOTensor("a", 0, (2, 3), "float32", None, None),
        IOTensor("b", 1, (4,), "int8", 0.1, -3),
        IOTensor("c", 2, (5,), "int32", None, None),
        IOTensor("d", 3, (2,), "bool", None, None),
    ]
    arrays = random_inputs(specs)
    assert [a.dtype.name for a in arrays] == ["float32", "int8", "int32", "bool"]
    assert [a.shape for a in arrays] == [(2, 3), (4,), (5,), (2,)]
    assert arrays[2].min() >= 0


def test_bench_rejects_bad_arguments_and_files(cnn_models):
    with pytest.raises(UsageError, match="--threads"):
        benchmark_latency(cnn_models.fp32, threads=0, runs=5, warmup=0)
    with pytest.raises(UsageError, match="--runs"):
        benchmark_latency(cnn_models.fp32, threads=1, runs=1, warmup=0)
    with pytest.raises(FlatbufferError):
        benchmark_latency(cnn_models.fp32[: len(cnn_models.fp32) // 2], threads=1, runs=5, warmup=0)


# --- host latency in the export report: the flag rule and the section -------------------------


@pytest.mark.parametrize(
    ("quantized_ms", "float_ms", "slower"),
    [
        (1.0, 1.0, False),  # equal
        (0.5, 1.0, False),  # faster
        (1.10, 1.0, False),  # exactly at the margin: noise, not flagged
        (1.11, 1.0, True),  # past the margin
        (1.4, 1.0, True),
    ],
)
def test_the_slower_flag_is_the_ratio_past_the_noise_margin(quantized_ms, float_ms, slower):
    from edge_export.runtime.latency import SLOWER_MARGIN, HostLatency, quantized_is_slower

    assert SLOWER_MARGIN == 0.10
    latency = HostLatency("int8", quantized_ms, float_ms, runs=5, warmup=2)
    assert latency.ratio == pytest.approx(quantized_ms / float_ms, abs=1e-3)
    assert latency.slower is slower is quantized_is_slower(quantized_ms / float_ms)
    assert (latency.note is not None) is slower


def test_the_note_names_the_mode_the_ratio_and_where_to_measure():
    from edge_export.runtime.latency import HostLatency

    note = HostLatency("int8", 1.4, 1.0, runs=5, warmup=2).note
    assert note.startswith("int8 runs 1.40x slower than fp32 on this host")
    assert "depthwise" in note and "measure there" in note
    assert "no int16x8 kernels" in HostLatency("int16x8", 3.0, 1.0, runs=5, warmup=2).note
    # a wider margin given by the caller moves the flag
    assert HostLatency("int8", 1.4, 1.0, runs=5, warmup=2, margin=0.5).slower is False
    # an int8 model with int16x8 operators (mixed precision) is blamed on those, not on int8 kernels
    mixed = HostLatency("int8", 30.0, 1.0, runs=5, warmup=2, kernels="int16x8").note
    assert mixed.startswith("int8 (with int16x8 operators) runs 30.00x slower") and "no int16x8 kernels" in mixed
    assert "depthwise" not in mixed


def test_measure_host_latency_times_both_models(cnn_models):
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.latency import measure_host_latency

    latency = measure_host_latency(read_flatbuffer(cnn_models.int8), read_flatbuffer(cnn_models.fp32), "int8")

    assert latency.quantized_ms > 0 and latency.float_ms > 0
    assert 5 <= latency.runs <= 100 and latency.warmup == 2
    assert latency.ratio == pytest.approx(latency.quantized_ms / latency.float_ms, abs=1e-3)
    assert latency.slower is (latency.ratio > 1 + latency.margin)
    data = to_json_value(latency)
    assert list(data) == list(type(latency).JSON_KEYS)


def test_a_model_slower_than_the_budget_is_timed_once(cnn_models):
    """Whose first warm-up invocation outlasts the budget (here a budget of 0 s) is timed once after
    one warm-up, and the report says so: a 10 s invocation is not run seven times for a figure that
    is only reported."""
    from edge_export.flatbuffer import read_flatbuffer
    from edge_export.runtime.latency import measure_host_latency

    latency = measure_host_latency(read_flatbuffer(cnn_models.int8), read_flatbuffer(cnn_models.fp32), "int8", budget_s=0.0)
    assert latency.runs == 1 and latency.warmup == 1
    assert latency.quantized_ms > 0 and latency.float_ms > 0
