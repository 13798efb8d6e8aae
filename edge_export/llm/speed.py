"""Prefill and decode tokens/s of a .litertlm timed by edge-export itself (not the runtime's
benchmark figure for one prompt, which issue #35 found at half the wall clock's on SmolLM2-135M).

Each run is one LiteRT-LM session (CPU, the given thread count, greedy): ``run_prefill`` and
``run_decode`` are each timed with ``time.perf_counter``; the token counts are the runtime's own
(its benchmark info), so tokens/s = counted tokens / measured seconds. Prompts of two lengths
(each prompt as given and repeated to about the longest prefill signature), one warm-up run not
counted, the median over the rest; the host's load average and thread count go with it, since
a loaded 2-core host halves the figures.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any, Sequence

from ..errors import RuntimeRunError, first_line
from ..output.serialize import json_field

__all__ = ["LlmSpeed", "speed_prompts", "measure_speed", "MAX_TIMED_RUNS"]

MAX_TIMED_RUNS = 6  # bounded whatever the prompts: 3 prompts x 2 lengths


@dataclass(frozen=True)
class LlmSpeed:
    prefill_tokens_per_second: float | None = json_field(digits=1)  # median over the timed runs
    decode_tokens_per_second: float | None = json_field(digits=1)
    runs: int  # timed runs (the warm-up excluded)
    prompt_tokens: tuple[int, ...]  # each timed run's prefill tokens, as the runtime counted them
    threads: int  # LiteRT-LM CPU threads
    host_load_average: float | None = json_field(digits=2)  # 1-minute load average when timing began
    host_cpus: int | None


def speed_prompts(tokenizer: Any, prompts: Sequence[str], target_tokens: int) -> tuple[str, ...]:
    """Up to 3 prompts as given, then each repeated to about ``target_tokens`` tokens (never more)."""
    chosen = list(prompts[:3])
    longer = []
    for prompt in chosen:
        n = max(len(tokenizer(prompt).input_ids), 1)
        repeats = max(target_tokens // (n + 1), 1)
        if repeats > 1:
            longer.append(" ".join([prompt] * repeats))
    return tuple(chosen + longer)[:MAX_TIMED_RUNS]


def _rate(tokens: int, seconds: float) -> float | None:
    return tokens / seconds if tokens > 0 and seconds > 0 and math.isfinite(seconds) else None


def _median(values: Sequence[float | None]) -> float | None:
    finite = [v for v in values if v is not None and math.isfinite(v)]
    return statistics.median(finite) if finite else None


def _timed_run(engine: Any, litert_lm: Any, prompt: str, max_new_tokens: int) -> tuple[int, float | None, float | None]:
    """(prefill tokens, prefill tokens/s, decode tokens/s) of one greedy session."""
    session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=max_new_tokens)
    try:
        start = time.perf_counter()
        session.run_prefill([prompt])
        prefill_s = time.perf_counter() - start
        start = time.perf_counter()
        session.run_decode()
        decode_s = time.perf_counter() - start
        info = session.get_benchmark_info()
    finally:
        session.close()
    prefill_n, decode_n = int(info.last_prefill_token_count), int(info.last_decode_token_count)
    return prefill_n, _rate(prefill_n, prefill_s), _rate(decode_n, decode_s)


def measure_speed(litertlm_path: str, prompts: Sequence[str], max_new_tokens: int, threads: int = 1) -> LlmSpeed:
    """The median prefill and decode tokens/s over ``prompts`` (the first run is a warm-up)."""
    from .parity import import_runtime

    litert_lm = import_runtime()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    runs = []
    try:
        with litert_lm.Engine(litertlm_path, backend=litert_lm.Backend.CPU(thread_count=threads), enable_benchmark=True) as engine:
            _timed_run(engine, litert_lm, prompts[0], max_new_tokens)  # warm-up: first allocations and caches
            runs = [_timed_run(engine, litert_lm, p, max_new_tokens) for p in prompts[:MAX_TIMED_RUNS]]
    except Exception as exc:  # boundary: the runtime's C API says only "failed"
        raise RuntimeRunError(f"The LiteRT-LM runtime failed while timing the .litertlm: {first_line(exc)}.",
                              "Run with --verbose to see the runtime's own message.") from exc
    return LlmSpeed(_median([r[1] for r in runs]), _median([r[2] for r in runs]), len(runs), tuple(r[0] for r in runs),
                    threads, load, os.cpu_count())
