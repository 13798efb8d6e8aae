"""The CLI's ``--task text-generation`` options turned into one ``run_text_generation`` call
(cli.py adds the options as one block and dispatches here early)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..errors import UsageError
from ..option_fields import option
from .task import TEXT_GENERATION, is_causal_lm_directory

__all__ = ["TASK_OPTIONS", "TASK_READS", "TextGenerationFlags", "wants_text_generation", "text_generation_call"]

_PANEL = "Language models (--task text-generation)"


@dataclass(frozen=True)
class TextGenerationFlags:
    """The flags of ``--task text-generation``: a Hugging Face causal LM to .tflite + .litertlm,
    checked against transformers. Read as typer parses them; ``text_generation_call`` checks them."""

    task: str | None = option(None, "--task", panel=_PANEL, help="text-generation: MODEL is a Hugging Face causal-LM folder (config.json, *.safetensors, tokenizer.json; inferred for such a folder) or a package.module:attr returning one (with --tokenizer); writes <stem>.litertlm and the reports (<stem>.tflite too with --write-tflite).")
    tokenizer: Path | None = option(None, "--tokenizer", panel=_PANEL, cli_type=Optional[Path], help="text-generation: the folder holding tokenizer.json (default: the model's folder).")
    prefill_lengths: str | None = option(None, "--prefill-lengths", panel=_PANEL, help="text-generation: prefill signature lengths, comma-separated, e.g. 32,128 (default: 1/8 of the cache, at most 128).")
    cache_length: int | None = option(None, "--cache-length", panel=_PANEL, cli_type=Optional[int], help="text-generation: KV cache length in tokens, the most prompt plus generated tokens (default: sized from config.json and the weights, see README).")
    prompts: Path | None = option(None, "--prompts", panel=_PANEL, cli_type=Optional[Path], help="text-generation: parity prompts, one per line (default: a built-in set of three).")
    max_new_tokens: int | None = option(None, "--max-new-tokens", panel=_PANEL, cli_type=Optional[int], help="text-generation: greedy tokens compared per prompt (default 16).")
    block_size: int | None = option(None, "--block-size", panel=_PANEL, cli_type=Optional[int], help="text-generation --quantize int4/auto: int4 weight block size, 32, 64, 128 or 256 (default 32).")
    write_tflite: bool = option(False, "--write-tflite", panel=_PANEL, cli_type=bool, help="text-generation: also write <stem>.tflite (the .litertlm already holds it; default: the .litertlm and reports only).")


# The task's options, refused with any other model; and what the task reads besides them (export's
# flags by field name): every other export option given with it is refused, not ignored.
TASK_OPTIONS = tuple(name for name in TextGenerationFlags.__dataclass_fields__ if name != "task")
TASK_READS = {"model", "output", "quantize", "target", "validate", "task", *TASK_OPTIONS, "atol", "min_top1", "trust_pickle", "junit", "quiet", "debug", "verbose"}


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
