"""The ``generate`` command's body (cli.py stays a thin shell): the text streamed to stdout, then a
newline, then one line of figures on stderr (tokens, seconds, tokens/s on the wall clock)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .generate import GenerationRun, generate_text

__all__ = ["run_generate", "figures_line"]


def figures_line(run: GenerationRun) -> str:
    decode = "n/a" if not run.decode_tokens_per_second else f"{run.decode_tokens_per_second:,.1f}"
    prefill = "n/a" if not run.prefill_tokens_per_second else f"{run.prefill_tokens_per_second:,.1f}"
    tokens = run.decode_tokens if run.decode_tokens is not None else run.pieces
    return f"{tokens} tokens in {run.seconds:.2f} s; decode {decode} tokens/s, prefill {prefill} tokens/s (LiteRT-LM CPU, 1 thread, wall clock)"


def run_generate(model: Path, prompt: str, out: Any, err: Any, *, chat: bool, max_tokens: int, sample: bool) -> GenerationRun:
    """``out``/``err``: the session's consoles; the text goes to ``out``'s stream unwrapped, piece by piece."""
    stream = out.file
    run = generate_text(model, prompt, stream, chat=chat, max_tokens=max_tokens, sample=sample)
    stream.write("\n")
    stream.flush()
    err.print(figures_line(run), markup=False, highlight=False)
    return run
