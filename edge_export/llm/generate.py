"""``edge-export generate MODEL.litertlm "prompt"``: text from an exported package, streamed by the
LiteRT-LM runtime as it decodes (each piece written and flushed at once), and tokens/s at the end.

The package is checked first (``litertlm_file.read_litertlm``: format, sections, the TFLite model
through the project's verifier) so the native runtime only opens a file of the expected shape. The
prompt goes in raw (the runtime prepends the package's start token, as in the parity check) or,
with ``chat``, as one user turn through the Conversation API and the packaged chat template.
Greedy (top-k 1) unless ``sample``: then the package's sampler defaults. The model's text is
escaped for the terminal (text_safety.for_terminal) piece by piece; figures go to ``err`` so that
``out`` holds the text alone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TextIO

from ..errors import RuntimeRunError, UsageError, first_line
from .litertlm_file import LitertlmPackage, read_litertlm

__all__ = ["GenerationRun", "generate_text"]


@dataclass(frozen=True)
class GenerationRun:
    text: str
    pieces: int  # streamed chunks
    decode_tokens: int | None  # as the runtime counts them
    seconds: float  # from the call to the last piece
    decode_tokens_per_second: float | None
    prefill_tokens_per_second: float | None


def _check(package: LitertlmPackage, prompt: str, chat: bool, max_tokens: int) -> None:
    if max_tokens < 1:
        raise UsageError(f"--max-tokens {max_tokens} must be at least 1.", "e.g. --max-tokens 64.")
    if not prompt:
        raise UsageError("The prompt is empty.", 'Give some text: edge-export generate MODEL.litertlm "Once upon a time".')
    if chat and package.chat_template is None:
        raise UsageError(f"{package.path} has no chat template, so --chat has nothing to render the turn with.", "Drop --chat to send the prompt as raw text.")


def _pieces(engine: Any, litert_lm: Any, prompt: str, chat: bool, max_tokens: int, sample: bool) -> tuple[Iterator[str], Any]:
    sampler = None if sample else litert_lm.SamplerConfig(top_k=1)
    if chat:
        conv = engine.create_conversation(sampler_config=sampler, max_output_tokens=max_tokens)
        return (str(chunk.contents) for chunk in conv.send_message_async({"role": "user", "content": prompt})), conv
    session = engine.create_session(apply_prompt_template=False, sampler_config=sampler, max_output_tokens=max_tokens)
    session.run_prefill([prompt])
    return ("".join(chunk.texts[:1]) for chunk in session.run_decode_async()), session


def _stream(pieces: Iterator[str], out: TextIO) -> tuple[str, int, float | None, float | None]:
    """The text, the pieces, and when the first and the last piece arrived (perf_counter)."""
    from ..output.text_safety import for_terminal

    text, count, first, last = [], 0, None, None
    for piece in pieces:
        last = time.perf_counter()
        first = first if first is not None else last
        text.append(piece)
        count += 1
        out.write(for_terminal(piece))
        out.flush()  # a piece at a time, as the runtime decodes it
    return "".join(text), count, first, last


def _rates(info: Any, start: float, first: float | None, last: float | None) -> tuple[float | None, float | None]:
    """(prefill, decode) tokens/s on the wall clock, with the runtime's token counts: the prompt's
    tokens over the time to the first piece (which holds the first decoded token too), the decoded
    tokens after the first over the time from the first piece to the last. The runtime's own
    figures are not used (issue #35: half the wall clock's on SmolLM2-135M)."""
    prefill_n = getattr(info, "last_prefill_token_count", None)
    decode_n = getattr(info, "last_decode_token_count", None)
    prefill = prefill_n / (first - start) if prefill_n and first is not None and first > start else None
    decode = (decode_n - 1) / (last - first) if decode_n and decode_n > 1 and first is not None and last > first else None
    return prefill, decode


def generate_text(path: str | Path, prompt: str, out: TextIO, *, chat: bool = False, max_tokens: int = 64, sample: bool = False) -> GenerationRun:
    """Stream the package's continuation of ``prompt`` to ``out``; exit 2 for a bad file or
    usage, exit 3 when the runtime fails."""
    package = read_litertlm(path)
    _check(package, prompt, chat, max_tokens)
    from .parity import import_runtime

    litert_lm = import_runtime()
    start = time.perf_counter()
    try:
        with litert_lm.Engine(str(path), backend=litert_lm.Backend.CPU(thread_count=1), enable_benchmark=True) as engine:
            asked = time.perf_counter()  # the engine loaded: from here the prompt is prefilled
            pieces, owner = _pieces(engine, litert_lm, prompt, chat, max_tokens, sample)
            try:
                text, count, first, last = _stream(pieces, out)
                info = owner.get_benchmark_info()
            finally:
                owner.close()
    except (BrokenPipeError, KeyboardInterrupt):
        raise
    except Exception as exc:  # boundary: the runtime's C API says only "failed" (the reason went to stderr)
        raise RuntimeRunError(f"The LiteRT-LM runtime failed on {path}: {first_line(exc)}.", "Run with --verbose to see the runtime's own message.") from exc
    seconds = time.perf_counter() - start
    prefill, decode = _rates(info, asked, first, last)
    return GenerationRun(text, count, getattr(info, "last_decode_token_count", None), seconds, decode, prefill)
