"""The options of ``--task text-generation`` and the prompts, checked before any work."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import UsageError
from .recipes import BLOCK_SIZES, LLM_RECIPES

__all__ = ["BUILT_IN_PROMPTS", "LanguageModelOptions", "check_options", "read_prompts", "parse_lengths"]

# Short, plain prompts: any tokenizer trained on English text covers them.
BUILT_IN_PROMPTS = ("the quick brown fox", "hello world", "one two three four five")


@dataclass(frozen=True)
class LanguageModelOptions:
    tokenizer: str | None = None  # folder holding tokenizer.json (default: the model's folder)
    prefill_lengths: tuple[int, ...] | None = None  # None: from the config and weights (sizing.py)
    cache_length: int | None = None
    prompts: tuple[str, ...] | None = None  # None: --prompts file, else the built-in set
    prompts_file: str | None = None
    max_new_tokens: int = 16
    quantize: str = "none"  # none, fp16, dynamic-int8, int4 or auto
    block_size: int = 32
    atol: float | None = None  # max |Δlogit| (float32 default 1e-4)
    min_token_agreement: float | None = None  # --min-top1
    trust_pickle: bool = False
    junit: str | None = None
    write_tflite: bool = False  # also <stem>.tflite beside the .litertlm, which holds the same model


def parse_lengths(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.replace(" ", "").split(",") if v)
    except ValueError:
        values = ()
    if not values or min(values) <= 0:
        raise UsageError(f"Cannot read {option} '{text}'.", f"Write positive whole numbers separated by commas, e.g. {option} 32,128.")
    return values


def check_options(o: LanguageModelOptions) -> None:
    if o.quantize not in (*LLM_RECIPES, "auto"):
        raise UsageError(f"--quantize {o.quantize} does not apply to a language model.", f"Use one of {', '.join(LLM_RECIPES)} or auto.")
    if o.block_size not in BLOCK_SIZES:
        raise UsageError(f"--block-size {o.block_size} is not supported.", f"Use one of {', '.join(map(str, BLOCK_SIZES))} (int4's weight blocks).")
    if (o.cache_length is not None and o.cache_length <= 0) or (o.prefill_lengths is not None and (not o.prefill_lengths or min(o.prefill_lengths) <= 0)):
        raise UsageError("--cache-length and --prefill-lengths must be positive.", "e.g. --prefill-lengths 32,128 --cache-length 1024.")
    if o.cache_length is not None and o.prefill_lengths is not None and max(o.prefill_lengths) > o.cache_length:
        raise UsageError(f"A prefill length ({max(o.prefill_lengths)}) is longer than the cache ({o.cache_length}).", "Lower --prefill-lengths or raise --cache-length.")
    if o.max_new_tokens <= 0:
        raise UsageError("--max-new-tokens must be at least 1.", "e.g. --max-new-tokens 16.")


def read_prompts(o: LanguageModelOptions) -> tuple[str, ...]:
    """The prompts: given, from ``--prompts FILE`` (UTF-8, one per non-empty line), or built in."""
    if o.prompts is not None:
        prompts = tuple(o.prompts)
    elif o.prompts_file is not None:
        try:
            text = Path(o.prompts_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"Cannot read the prompts file {o.prompts_file}: {exc}.", "Pass a UTF-8 text file, one prompt per line.") from exc
        prompts = tuple(line.strip() for line in text.splitlines() if line.strip())
    else:
        prompts = BUILT_IN_PROMPTS
    if not prompts:
        raise UsageError(f"The prompts file {o.prompts_file} holds no prompt.", "Write one prompt per line.")
    return prompts
