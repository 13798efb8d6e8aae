"""`edge-export bench`: host latency of a flatbuffer with LiteRT on CPU, with and without XNNPACK.

Each configuration gets its own interpreter, random inputs of the model's own dtypes (set once),
``warmup`` untimed invocations, then ``runs`` timed ones around ``invoke()`` alone. Host numbers
say how two variants of a model compare (fp32 vs int8, delegate vs not); they are not a prediction
of the latency on a phone or a board.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import RuntimeRunError, UsageError, map_exceptions
from ..flatbuffer import FlatbufferModel, read_flatbuffer
from .interpreter import IOTensor, Resolver, TFLiteRunner

if TYPE_CHECKING:
    from rich.console import Console

__all__ = [
    "LatencyStats", "LatencyReport", "benchmark_latency", "random_inputs", "render_latency",
    "HostLatency", "SLOWER_MARGIN", "measure_host_latency", "quantized_is_slower",
]

# The two configurations the bench compares: what apps get by default, and the plain kernels.
BENCH_RESOLVERS = (Resolver.XNNPACK, Resolver.BUILTIN)


@dataclass(frozen=True)
class LatencyStats:
    """Latency of one configuration, in milliseconds, over the timed runs."""

    resolver: Resolver
    runs: int
    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    stdev_ms: float

    @classmethod
    def from_samples(cls, resolver: Resolver, samples_ms: Sequence[float]) -> LatencyStats:
        arr = np.asarray(samples_ms, dtype=np.float64)
        return cls(
            resolver=resolver,
            runs=int(arr.size),
            median_ms=float(np.median(arr)),
            p10_ms=float(np.percentile(arr, 10)),
            p90_ms=float(np.percentile(arr, 90)),
            min_ms=float(arr.min()),
            max_ms=float(arr.max()),
            mean_ms=float(arr.mean()),
            stdev_ms=float(statistics.stdev(arr)) if arr.size > 1 else 0.0,
        )


@dataclass(frozen=True)
class LatencyReport:
    threads: int
    runs: int
    warmup: int
    size_bytes: int
    inputs: tuple[IOTensor, ...]
    results: tuple[LatencyStats, ...]  # in BENCH_RESOLVERS order
    host: str  # machine and CPU count, so numbers are not compared across hosts by accident

    JSON_KEYS = ("threads", "runs", "warmup", "size_bytes", "inputs", "results", "xnnpack_speedup", "host")

    def stats(self, resolver: Resolver) -> LatencyStats:
        for s in self.results:
            if s.resolver == resolver:
                return s
        raise KeyError(resolver)

    @property
    def xnnpack_speedup(self) -> float | None:
        """Median without XNNPACK divided by median with it (>1 means XNNPACK is faster)."""
        try:
            return self.stats(Resolver.BUILTIN).median_ms / self.stats(Resolver.XNNPACK).median_ms
        except (KeyError, ZeroDivisionError):
            return None


def random_inputs(specs: Sequence[IOTensor], seed: int = 0) -> list[np.ndarray]:
    """Arrays in each input's own dtype and shape (raw values: integer inputs use their full range)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays.append(rng.standard_normal(spec.shape).astype(dtype))
        elif dtype.kind == "b":
            arrays.append(rng.integers(0, 2, size=spec.shape).astype(dtype))
        elif spec.quantized and dtype.itemsize <= 2:
            info = np.iinfo(dtype)
            arrays.append(rng.integers(info.min, info.max, size=spec.shape, endpoint=True).astype(dtype))
        else:  # ids, indices, counts: small non-negative values are the safe choice
            arrays.append(rng.integers(0, 8, size=spec.shape).astype(dtype))
    return arrays


def _time_one(model: FlatbufferModel, resolver: Resolver, threads: int, runs: int, warmup: int) -> LatencyStats:
    runner = TFLiteRunner(model, resolver=resolver, num_threads=threads)
    interp = runner.interpreter
    for spec, arr in zip(runner.inputs, random_inputs(runner.inputs)):
        interp.set_tensor(spec.index, arr)
    samples = []
    with map_exceptions(
        {Exception: RuntimeRunError},  # LiteRT's pybind layer raises several kinds
        f"The LiteRT interpreter ({resolver.value}) failed while benchmarking: {{error}}",
        "Run `edge-export inspect` on the file to see its operators and inputs.",
    ):
        for _ in range(warmup):
            interp.invoke()
        for _ in range(runs):
            start = time.perf_counter_ns()
            interp.invoke()
            samples.append((time.perf_counter_ns() - start) / 1e6)
    return LatencyStats.from_samples(resolver, samples)


def benchmark_latency(
    model_bytes: bytes | FlatbufferModel,
    *,
    threads: int = 1,
    runs: int = 50,
    warmup: int = 5,
    resolvers: Sequence[Resolver] = BENCH_RESOLVERS,
) -> LatencyReport:
    """Time ``invoke()`` for each resolver. The buffer is verified before any runtime sees it (a
    ``FlatbufferModel`` already was, when it was read)."""
    if threads < 1:
        raise UsageError(f"--threads must be at least 1, got {threads}.", "Use --threads 1 for one CPU thread.")
    if runs < 2:
        raise UsageError(f"--runs must be at least 2 to give a spread, got {runs}.", "Try --runs 50.")
    if warmup < 0:
        raise UsageError(f"--warmup cannot be negative, got {warmup}.", "Use --warmup 0 to skip warm-up.")
    from ..processes.isolation import run_isolated

    model = model_bytes if isinstance(model_bytes, FlatbufferModel) else read_flatbuffer(model_bytes)

    def measure():
        results = tuple(_time_one(model, r, threads, runs, warmup) for r in resolvers)
        return results, tuple(TFLiteRunner(model, resolver=Resolver.BUILTIN).inputs)

    # In a child process: a native crash of the runtime is exit 3 naming this stage, not a SIGSEGV.
    results, inputs = run_isolated(measure, stage="latency benchmark", backend="the LiteRT interpreter")
    return LatencyReport(
        threads=threads,
        runs=runs,
        warmup=warmup,
        size_bytes=model.size_bytes,
        inputs=inputs,
        results=results,
        host=f"{platform.machine()} {platform.processor() or platform.system()}, {os.cpu_count()} CPUs",
    )


_RESOLVER_LABELS = {
    Resolver.XNNPACK: "LiteRT CPU + XNNPACK",
    Resolver.BUILTIN: "LiteRT CPU, no delegate",
    Resolver.REFERENCE: "LiteRT reference kernels",
}


def render_latency(report: LatencyReport, console: Console) -> None:
    from rich.table import Table

    table = Table(
        title=f"Latency in ms over {report.runs} runs after {report.warmup} warm-up, {report.threads} thread(s)",
        title_justify="left",
    )
    # Short headers so that a narrow terminal folds the runtime's name rather than cutting it.
    table.add_column("runtime", overflow="fold")
    for col in ("median", "p10", "p90", "min", "stdev"):
        table.add_column(col, justify="right")
    for s in report.results:
        table.add_row(
            _RESOLVER_LABELS.get(s.resolver, s.resolver.value),
            f"{s.median_ms:.3f}",
            f"{s.p10_ms:.3f}",
            f"{s.p90_ms:.3f}",
            f"{s.min_ms:.3f}",
            f"{s.stdev_ms:.3f}",
        )
    console.print(table)
    speedup = report.xnnpack_speedup
    if speedup is not None:
        console.print(f"XNNPACK speed-up (median): {speedup:.2f}x   host: {report.host}")


# --- The report's host latency: a quantized export against the float model it came from ---------

# A quantized model is flagged as slower only when its median is more than this fraction above the
# float model's. The two models are timed interleaved (one invoke of each in turn), so a change of
# load on a shared machine hits both. Ten back-to-back measurements of the same pair on this 2-core
# host, under load, moved the ratio by at most 3% (small CNN 0.634-0.667, MobileNetV2-like at 32x32
# 1.207-1.231); 10% leaves room for a noisier machine.
SLOWER_MARGIN = 0.10
HOST_LATENCY_RUNTIME = "LiteRT CPU + XNNPACK, 1 thread"

def quantized_is_slower(ratio: float, margin: float = SLOWER_MARGIN) -> bool:
    """The flag rule: the quantized median over the float median exceeds 1 + ``margin``."""
    return ratio > 1.0 + margin


@dataclass(frozen=True)
class HostLatency:
    """Median host latency of the written (quantized) model and of the float model it came from,
    timed interleaved. Reported, never a gate: the verdict and exit code ignore it."""

    quantize: str  # the --quantize mode of the written model
    quantized_ms: float
    float_ms: float
    runs: int  # timed invocations of each model
    warmup: int
    runtime: str = HOST_LATENCY_RUNTIME
    host: str = ""
    margin: float = SLOWER_MARGIN
    # The kernels that explain the time when they are not the mode's own: an int8 model whose mixed
    # precision raised operators to int16 runs those on int16x8 kernels (not in the JSON: the note says it).
    kernels: str | None = None

    JSON_KEYS = ("quantize", "quantized_ms", "float_ms", "ratio", "slower", "margin", "runs", "warmup", "runtime", "host", "note")

    @property
    def ratio(self) -> float:
        """Quantized median over float median: above 1 the quantized model is slower here."""
        return round(self.quantized_ms / self.float_ms, 3)

    @property
    def slower(self) -> bool:
        return quantized_is_slower(self.quantized_ms / self.float_ms, self.margin)

    @property
    def note(self) -> str | None:
        if not self.slower:
            return None
        # Why a mode can be slower than float32 on a desktop CPU: the mode table's note.
        from ..quantize_modes import slower_because

        why = slower_because(self.kernels or self.quantize) or "its kernels on this CPU are slower than the float ones"
        what = self.quantize if self.kernels in (None, self.quantize) else f"{self.quantize} (with {self.kernels} operators)"
        return (
            f"{what} runs {self.ratio:.2f}x slower than fp32 on this host ({self.runtime}; {why}). "
            "On an Arm phone a quantized model is usually faster: measure there (LiteRT's benchmark_model on the device)."
        )


def _host() -> str:
    return f"{platform.machine()} {platform.processor() or platform.system()}, {os.cpu_count()} CPUs"


def _time_pair(quantized: FlatbufferModel, float_model: FlatbufferModel, warmup: int, min_runs: int, max_runs: int,
               budget_s: float) -> tuple[float, float, int, int]:
    """Medians of the two models timed in turn: at least ``min_runs`` each, then more until
    ``max_runs`` or ``budget_s`` seconds of timed work, whichever comes first. A model whose first
    warm-up invocation alone outlasts the budget is timed once after it: CRAFT at int16x8 (LiteRT's
    reference int16 kernels, 10 s an invocation) spent 70 s on a figure that is only reported."""
    interpreters = []
    for model in (quantized, float_model):
        runner = TFLiteRunner(model, resolver=Resolver.XNNPACK, num_threads=1)
        for spec, arr in zip(runner.inputs, random_inputs(runner.inputs)):
            runner.interpreter.set_tensor(spec.index, arr)
        interpreters.append(runner.interpreter)
    first = []
    for interp in interpreters:
        start = time.perf_counter()
        interp.invoke()
        first.append(time.perf_counter() - start)
    if max(first) > budget_s:
        warmup, min_runs = 1, 1
    for interp in interpreters:
        for _ in range(warmup - 1):
            interp.invoke()
    samples: tuple[list[float], list[float]] = ([], [])
    spent = 0.0
    while len(samples[0]) < max_runs and (len(samples[0]) < min_runs or spent < budget_s):
        for interp, times in zip(interpreters, samples):
            start = time.perf_counter_ns()
            interp.invoke()
            elapsed = (time.perf_counter_ns() - start) / 1e9
            times.append(elapsed * 1e3)
            spent += elapsed
    return float(np.median(samples[0])), float(np.median(samples[1])), len(samples[0]), max(warmup, 1)


def measure_host_latency(
    quantized: FlatbufferModel,
    float_model: FlatbufferModel,
    quantize: str,
    *,
    warmup: int = 2,
    min_runs: int = 5,
    max_runs: int = 100,
    budget_s: float = 0.4,
    kernels: str | None = None,
) -> HostLatency | None:
    """Time the written model against the float one in a child process (a native crash is not an
    export failure). None when either cannot be timed: a latency is reported, never required."""
    from ..processes.isolation import run_isolated

    try:
        quantized_ms, float_ms, runs, warmup = run_isolated(
            _time_pair, quantized, float_model, warmup, min_runs, max_runs, budget_s,
            stage="host latency", backend="the LiteRT interpreter",
        )
    except Exception:  # LiteRT's pybind errors, a native crash: the export goes on without a latency
        return None
    if quantized_ms <= 0 or float_ms <= 0:
        return None
    return HostLatency(quantize, round(quantized_ms, 4), round(float_ms, 4), runs, warmup, host=_host(), kernels=kernels)
