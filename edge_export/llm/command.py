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
    prefill_lengths: str | None, cache_length: int | None, prompts: Path | None, max_new_tokens: int | None, block_size: int | None, write_tflite: bool = False,
    checking: dict, not_for_the_task: list[str] = (),
) -> Callable[[Any, Any], Any]:
    """The call cli._run runs: options checked inside it, so a bad value is exit 2 like any other.
    ``not_for_the_task``: the flags of export options given that this task does not read (refused).
    Options left out (None) take LanguageModelOptions' defaults."""

    def call(on_stage, on_progress):
        from .options import LanguageModelOptions, parse_lengths
        from .pipeline import run_text_generation

        if not_for_the_task:
            verb = "does" if len(not_for_the_task) == 1 else "do"
            raise UsageError(
                f"{', '.join(not_for_the_task)} {verb} not apply to --task {TEXT_GENERATION}: a language model is exported "
                "by its own chain (prefill and decode signatures, judged token by token against transformers).",
                "Drop it; the language-model options are --tokenizer, --prefill-lengths, --cache-length, --prompts, "
                "--max-new-tokens, --block-size, --write-tflite, --quantize, --atol, --min-top1 and --junit.",
            )
        if task not in (None, TEXT_GENERATION):
            raise UsageError(f"--task {task} is not a task edge-export knows.", f"Use --task {TEXT_GENERATION}, or leave --task out for other models.")
        if target != "cpu":
            raise UsageError(f"--target {target} does not apply to --task {TEXT_GENERATION} (LiteRT-LM on CPU).", "Drop --target.")
        if not validate:
            raise UsageError(f"--no-validate is not supported with --task {TEXT_GENERATION}: parity decides the recipe and the verdict.", "Drop --no-validate.")
        given = {"prefill_lengths": parse_lengths(prefill_lengths, "--prefill-lengths") if prefill_lengths is not None else None,
                 "cache_length": cache_length, "max_new_tokens": max_new_tokens, "block_size": block_size}
        options = LanguageModelOptions(
            tokenizer=str(tokenizer) if tokenizer else None, prompts_file=str(prompts) if prompts else None,
            quantize=quantize, atol=checking["atol"], min_token_agreement=checking["min_top1"],
            trust_pickle=checking["trust_pickle"], junit=str(checking["junit"]) if checking["junit"] else None,
            write_tflite=write_tflite,
            **{name: value for name, value in given.items() if value is not None},
        )
        return run_text_generation(model, output, options, on_stage=on_stage)

    return call
