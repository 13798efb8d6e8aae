"""The CLI's ``--task text-generation`` options turned into one ``run_text_generation`` call
(cli.py adds the options as one block and dispatches here early)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..errors import UsageError
from .task import TEXT_GENERATION, is_causal_lm_directory

__all__ = ["wants_text_generation", "text_generation_call"]


def wants_text_generation(model: str, task: str | None) -> bool:
    """``--task text-generation``, or no --task and MODEL a causal-LM directory (inferred)."""
    return task is not None or is_causal_lm_directory(model)


def text_generation_call(
    model: str, output: Path | None, quantize: str, target: str, validate: bool, *, task: str | None, tokenizer: Path | None,
    prefill_lengths: str, cache_length: int, prompts: Path | None, max_new_tokens: int, block_size: int, checking: dict,
) -> Callable[[Any, Any], Any]:
    """The call cli._run runs: options checked inside it, so a bad value is exit 2 like any other."""

    def call(on_stage, on_progress):
        from .options import LanguageModelOptions, parse_lengths
        from .pipeline import run_text_generation

        if task not in (None, TEXT_GENERATION):
            raise UsageError(f"--task {task} is not a task edge-export knows.", f"Use --task {TEXT_GENERATION}, or leave --task out for other models.")
        if target != "cpu":
            raise UsageError(f"--target {target} does not apply to --task {TEXT_GENERATION} (LiteRT-LM on CPU).", "Drop --target.")
        if not validate:
            raise UsageError(f"--no-validate is not supported with --task {TEXT_GENERATION}: parity decides the recipe and the verdict.", "Drop --no-validate.")
        options = LanguageModelOptions(
            tokenizer=str(tokenizer) if tokenizer else None, prefill_lengths=parse_lengths(prefill_lengths, "--prefill-lengths"),
            cache_length=cache_length, prompts_file=str(prompts) if prompts else None, max_new_tokens=max_new_tokens,
            quantize=quantize, block_size=block_size, atol=checking["atol"], min_token_agreement=checking["min_top1"],
            trust_pickle=checking["trust_pickle"], junit=str(checking["junit"]) if checking["junit"] else None,
        )
        return run_text_generation(model, output, options, on_stage=on_stage)

    return call
