"""The body of ``pipeline.run_text_generation``, in a private work folder; and ``check_recipes``,
which judges recipes on an exported float flatbuffer (also what the tests and the benchmark call,
so the model is exported once and every recipe is applied to that one flatbuffer)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ..errors import ModelLoadError, RuntimeRunError, UsageError, first_line
from .evaluation import judge_chat, judge_prompt, thresholds_for
from .export import export_float_flatbuffer
from .loading import LanguageModelSource, load_tokenizer, prepare_model_directory
from .options import LanguageModelOptions
from .generation_config import GenerationDefaults, read_generation_config
from .packaging import PackageMetadata, build_litertlm, package_metadata
from .parity import ChatReference, ReferenceRun, reference_chat, reference_runs, runtime_chat_text, runtime_texts
from .recipes import AUTO_ORDER, quantize_language_model, weight_groups
from .report import LanguageModelSection, LlmChatParity, LlmMeasurements, LlmRecipeAttempt
from .signatures import SignatureDriver
from .speed import measure_speed, speed_prompts
from .task import TEXT_GENERATION, check_cache_length, check_causal_lm_config
from .tokenizer_check import chat_prompt_ids_bounded, check_tokenizer_bounded

__all__ = ["RecipeContext", "RecipeResult", "check_prompt_lengths", "recipes_to_try", "prepare", "reference_context", "check_recipe", "check_recipes", "export_and_check"]


@dataclass(frozen=True)
class RecipeContext:
    """What judging a recipe needs: the checked source, its tokenizer, the package metadata and
    transformers' reference runs (and its chat turn when the package has a chat template)."""

    src: LanguageModelSource
    tokenizer: Any
    template: str | None
    meta: PackageMetadata
    prompts: tuple[str, ...]
    refs: tuple[ReferenceRun, ...]
    options: LanguageModelOptions
    work: Path
    chat: ChatReference | None = None
    generation: GenerationDefaults | None = None


@dataclass(frozen=True)
class RecipeResult:
    attempt: LlmRecipeAttempt
    tflite: bytes
    litertlm: bytes
    kv_cache_bytes: int
    package: Path  # the .litertlm in the work folder (timed by speed.measure_speed when kept)


def check_prompt_lengths(tokenizer: Any, prompts: Sequence[str], options: LanguageModelOptions) -> None:
    """Every prompt plus ``--max-new-tokens`` must fit the cache (exit 2 before the export)."""
    for i, prompt in enumerate(prompts):
        n = len(tokenizer(prompt).input_ids)
        if n == 0:
            raise UsageError(f"Prompt {i + 1} tokenizes to nothing.", "Give every prompt some text.")
        if n + options.max_new_tokens > options.cache_length:
            raise UsageError(
                f"Prompt {i + 1} is {n} tokens; with --max-new-tokens {options.max_new_tokens} it needs "
                f"{n + options.max_new_tokens} cache positions, more than --cache-length {options.cache_length}.",
                "Shorten the prompt, lower --max-new-tokens or raise --cache-length.",
            )


def recipes_to_try(quantize: str) -> tuple[str, ...]:
    return AUTO_ORDER if quantize == "auto" else (quantize,)


def _reference_model(folder: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    try:
        return AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    except Exception as exc:  # boundary: transformers reading the user's directory
        raise ModelLoadError(f"transformers cannot load {folder}: {first_line(exc)}.", "Check config.json and the weights.") from exc


def check_llm_extra() -> None:
    """The LiteRT-LM runtime and builder are an optional extra: missing, it is exit 2 up front,
    not exit 3 after a minute of export; installed but failing to import (environment.py), exit 2
    naming the import error."""
    import importlib.util

    from .environment import require_llm_extra

    missing = [dist for module, dist in (("litert_lm", "litert-lm-api"), ("litert_lm_builder", "litert-lm-builder")) if importlib.util.find_spec(module) is None]
    if missing:
        raise UsageError(
            f"--task text-generation needs {' and '.join(missing)} (the .litertlm is built and run for parity), which is not installed.",
            "pip install 'edge-export[llm]'.",
        )
    for module in ("litert_lm", "litert_lm_builder"):
        require_llm_extra(module, "for --task text-generation (the .litertlm is built and run for parity)")


def prepare(source: str, work: Path, prompts: tuple[str, ...], options: LanguageModelOptions) -> tuple[LanguageModelSource, Any, str | None, PackageMetadata]:
    """Every check that needs no export: the extra, the directory, tokenizer, chat template and prompt lengths."""
    if Path(source).is_dir():  # a config litert-torch cannot export is refused before any library is imported
        check_causal_lm_config(Path(source))
    check_llm_extra()
    src = prepare_model_directory(source, work / "model", tokenizer=options.tokenizer, trust_pickle=options.trust_pickle)
    check_cache_length(src.config, options.cache_length)
    # first in a confined child with time and memory limits: the tokenizer files and template are the folder's code
    template = check_tokenizer_bounded(src.folder, lambda tok: check_prompt_lengths(tok, prompts, options),
                                       shown=Path(options.tokenizer or source))
    tokenizer = load_tokenizer(src.folder)  # the same files, now known to load within those limits
    generation = read_generation_config(src.folder)
    return src, tokenizer, template, package_metadata(tokenizer, src.config, options.cache_length, template, generation)


def reference_context(src: LanguageModelSource, tokenizer: Any, template: str | None, meta: PackageMetadata,
                      prompts: tuple[str, ...], options: LanguageModelOptions, work: Path) -> RecipeContext:
    model = _reference_model(src.folder)
    refs = reference_runs(model, tokenizer, prompts, options.max_new_tokens, meta.stop_token_ids)
    chat = _chat_reference(model, tokenizer, src, prompts[0], options, meta) if template else None
    return RecipeContext(src, tokenizer, template, meta, prompts, tuple(refs), options, work, chat, read_generation_config(src.folder))


def _chat_reference(model: Any, tokenizer: Any, src: LanguageModelSource, message: str, options: LanguageModelOptions, meta: PackageMetadata) -> ChatReference:
    """transformers' reply to the first prompt as a user turn (its template rendered in the bounded child)."""
    ids = chat_prompt_ids_bounded(src.folder, message, shown=Path(options.tokenizer or src.source))
    if len(ids) + options.max_new_tokens > options.cache_length:
        raise UsageError(
            f"The chat template turns the first prompt into {len(ids)} tokens; with --max-new-tokens {options.max_new_tokens} "
            f"the chat check needs more than --cache-length {options.cache_length}.",
            "Raise --cache-length (the phone's chat needs that room too) or shorten the first prompt.",
        )
    return reference_chat(model, tokenizer, message, ids, options.max_new_tokens, meta.stop_token_ids)


def _vocab(config: dict) -> int:
    text = config.get("text_config") or config
    return int(text.get("vocab_size") or 0)


def _attempt(recipe: str, tflite: bytes, judged: tuple, t, config: dict, chat: LlmChatParity | None) -> LlmRecipeAttempt:
    steps = [p.steps for p in judged]
    total = max(sum(steps), 1)
    return LlmRecipeAttempt(
        recipe=recipe, model_bytes=len(tflite), weights=weight_groups(tflite, _vocab(config)), thresholds=t,
        max_abs_logit_diff=max(p.max_abs_logit_diff for p in judged),
        mean_kl=sum(p.mean_kl * n for p, n in zip(judged, steps)) / total,
        token_agreement=sum(p.token_agreement * n for p, n in zip(judged, steps)) / total,
        identical_texts=sum(p.text_divergence_step is None for p in judged), prompts=judged,
        passed=all(p.passed for p in judged) and (chat is None or chat.passed), chat=chat,
    )


def _worst_logits(driver: SignatureDriver, ref: ReferenceRun) -> Any:
    """The teacher-forced logits through each prefill signature; the run farthest from
    transformers' is the one judged (a prompt of one token uses no prefill: one run)."""
    import numpy as np

    lengths = driver.prefill_lengths if len(ref.prompt_ids) > 1 else driver.prefill_lengths[-1:]
    runs = [driver.teacher_forced_logits(ref.prompt_ids, ref.generated_ids, n) for n in lengths]
    return max(runs, key=lambda logits: float(np.nan_to_num(np.max(np.abs(logits - ref.logits), initial=0.0), nan=np.inf)))


def _logit_scale(refs: Sequence[ReferenceRun]) -> float:
    """The largest finite |logit| transformers gave (the float32 threshold scales with it)."""
    import numpy as np

    finite = [np.abs(r.logits[np.isfinite(r.logits)]) for r in refs if r.logits.size]
    return max((float(a.max()) for a in finite if a.size), default=0.0)


def check_recipe(recipe: str, float_tflite: bytes, ctx: RecipeContext) -> RecipeResult:
    """One recipe: its flatbuffer and package, judged on every prompt."""
    tflite = quantize_language_model(float_tflite, recipe, ctx.options.block_size)
    litertlm = build_litertlm(tflite, ctx.src.folder / "tokenizer.json", ctx.meta, ctx.template, ctx.generation)
    ctx.work.mkdir(parents=True, exist_ok=True)
    package = ctx.work / f"{recipe}.litertlm"
    package.write_bytes(litertlm)
    driver = SignatureDriver(tflite, ctx.tokenizer.pad_token_id or 0)
    texts = runtime_texts(str(package), ctx.prompts, ctx.options.max_new_tokens)
    t = thresholds_for(recipe, ctx.options.atol, ctx.options.min_token_agreement, _logit_scale(ctx.refs))
    judged = tuple(
        judge_prompt(ref, _worst_logits(driver, ref), text, t, ctx.tokenizer, ctx.meta.stop_token_ids)
        for ref, text in zip(ctx.refs, texts)
    )
    chat = _judge_chat(ctx, package, t)
    return RecipeResult(_attempt(recipe, tflite, judged, t, ctx.src.config, chat), tflite, litertlm, driver.kv_cache_bytes, package)


def _judge_chat(ctx: RecipeContext, package: Path, t) -> LlmChatParity | None:
    """The chat turn through the runtime's Conversation API; a template the runtime cannot render
    fails the check (exit 1, the report says why), since the package's chat would fail on the phone too."""
    if ctx.chat is None:
        return None
    try:
        text, error = runtime_chat_text(str(package), ctx.chat.message, ctx.options.max_new_tokens), None
    except RuntimeRunError as exc:
        text, error = None, exc.message
    return judge_chat(ctx.chat, text, error, t, ctx.tokenizer, ctx.meta.stop_token_ids, ctx.meta.start_token_id)


def check_recipes(float_tflite: bytes, ctx: RecipeContext, quantize: str, stages=None) -> tuple[list[LlmRecipeAttempt], RecipeResult]:
    """The attempts in order and the one kept: ``auto`` stops at the first (smallest) recipe that
    passes, and falls back to float32 (last in ``AUTO_ORDER``) when none does."""
    attempts, chosen = [], None
    for recipe in recipes_to_try(quantize):
        if stages is not None:
            with stages.run(f"check_{recipe}", f"Checking {recipe}: teacher-forced logits and LiteRT-LM text"):
                chosen = check_recipe(recipe, float_tflite, ctx)
        else:
            chosen = check_recipe(recipe, float_tflite, ctx)
        attempts.append(chosen.attempt)
        if chosen.attempt.passed and quantize == "auto":
            break
    return attempts, chosen


def export_and_check(source: str, work: Path, paths: dict, prompts: tuple[str, ...], options: LanguageModelOptions, stages, sizing=None) -> Any:
    with stages.run("load", "Checking the model directory, tokenizer and prompts"):
        src, tokenizer, template, meta = prepare(source, work, prompts, options)
    with stages.run("export", "Exporting prefill and decode signatures (litert-torch)"):
        float_export = export_float_flatbuffer(src.folder, options.prefill_lengths, options.cache_length)
    with stages.run("reference", "Generating with transformers (float32)"):
        ctx = reference_context(src, tokenizer, template, meta, prompts, options, work)
    attempts, chosen = check_recipes(float_export.data, ctx, options.quantize, stages)
    with stages.run("speed", "Timing prefill and decode in LiteRT-LM (CPU, 1 thread)"):
        target = min(max(options.prefill_lengths), options.cache_length - options.max_new_tokens - 2)
        speed = measure_speed(str(chosen.package), speed_prompts(tokenizer, prompts, target), options.max_new_tokens)
    from .measure import peak_rss_bytes

    section = LanguageModelSection(
        task=TEXT_GENERATION, weights_format=src.weights_format, prefill_lengths=tuple(options.prefill_lengths),
        cache_length=options.cache_length, max_new_tokens=options.max_new_tokens, quantize=options.quantize,
        block_size=options.block_size if options.quantize in ("int4", "auto") else None, package=meta,
        litertlm=str(paths["litertlm"]), chosen=chosen.attempt.recipe, attempts=tuple(attempts),
        measurements=LlmMeasurements(len(chosen.tflite), len(chosen.litertlm), chosen.kv_cache_bytes, peak_rss_bytes(),
                                     speed.prefill_tokens_per_second, speed.decode_tokens_per_second, speed),
        sizing=sizing,
    )
    from .writing import write_language_model

    return write_language_model(source, src.class_name, paths, chosen.tflite, chosen.litertlm, section, stages, options)
