"""The body of ``pipeline.run_text_generation``, in a private work folder."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Sequence

from ..errors import ModelLoadError, UsageError, first_line
from .evaluation import thresholds_for, judge_prompt
from .export import export_float_flatbuffer
from .loading import check_chat_template, load_tokenizer, prepare_model_directory
from .options import LanguageModelOptions
from .packaging import build_litertlm, package_metadata
from .parity import reference_runs, runtime_texts
from .recipes import AUTO_ORDER, quantize_language_model, weight_groups
from .report import LanguageModelSection, LlmMeasurements, LlmRecipeAttempt
from .signatures import SignatureDriver
from .task import TEXT_GENERATION

__all__ = ["export_and_check", "check_prompt_lengths", "recipes_to_try"]


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


def _try_recipe(recipe, float_tflite, refs, prompts, src, tokenizer, meta, template, options, work):
    """One recipe: its flatbuffer and package, judged on every prompt."""
    tflite = quantize_language_model(float_tflite, recipe, options.block_size)
    litertlm = build_litertlm(tflite, src.folder / "tokenizer.json", meta, template)
    package = work / f"{recipe}.litertlm"
    package.write_bytes(litertlm)
    driver = SignatureDriver(tflite, tokenizer.pad_token_id or 0)
    texts, prefill_tps, decode_tps = runtime_texts(str(package), prompts, options.max_new_tokens)
    t = thresholds_for(recipe, options.atol, options.min_token_agreement)
    judged = tuple(
        judge_prompt(ref, driver.teacher_forced_logits(ref.prompt_ids, ref.generated_ids), text, t, tokenizer, meta.stop_token_ids)
        for ref, text in zip(refs, texts)
    )
    steps = [p.steps for p in judged]
    total = max(sum(steps), 1)
    attempt = LlmRecipeAttempt(
        recipe=recipe, model_bytes=len(tflite), weights=weight_groups(tflite, _vocab(src.config)), thresholds=t,
        max_abs_logit_diff=max(p.max_abs_logit_diff for p in judged),
        mean_kl=sum(p.mean_kl * n for p, n in zip(judged, steps)) / total,
        token_agreement=sum(p.token_agreement * n for p, n in zip(judged, steps)) / total,
        identical_texts=sum(p.text_divergence_step is None for p in judged), prompts=judged, passed=all(p.passed for p in judged),
    )
    return attempt, tflite, litertlm, (prefill_tps, decode_tps), driver.kv_cache_bytes


def _vocab(config: dict) -> int:
    text = config.get("text_config") or config
    return int(text.get("vocab_size") or 0)


def export_and_check(source: str, work: Path, paths: dict, prompts: tuple[str, ...], options: LanguageModelOptions, stages) -> Any:
    with stages.run("load", "Checking the model directory, tokenizer and prompts"):
        src = prepare_model_directory(source, work / "model", tokenizer=options.tokenizer, trust_pickle=options.trust_pickle)
        tokenizer = load_tokenizer(src.folder)
        template = check_chat_template(tokenizer)
        check_prompt_lengths(tokenizer, prompts, options)
        meta = package_metadata(tokenizer, src.config, options.cache_length, template)
    with stages.run("export", "Exporting prefill and decode signatures (litert-torch)"):
        float_export = export_float_flatbuffer(src.folder, options.prefill_lengths, options.cache_length)
    with stages.run("reference", "Generating with transformers (float32)"):
        refs = reference_runs(_reference_model(src.folder), tokenizer, prompts, options.max_new_tokens, meta.stop_token_ids)
    attempts, chosen = [], None
    for recipe in recipes_to_try(options.quantize):
        with stages.run(f"check_{recipe}", f"Checking {recipe}: teacher-forced logits and LiteRT-LM text"):
            result = _try_recipe(recipe, float_export.data, refs, prompts, src, tokenizer, meta, template, options, work)
        attempts.append(result[0])
        chosen = result
        if result[0].passed and options.quantize == "auto":
            break
    attempt, tflite, litertlm, (prefill_tps, decode_tps), kv_bytes = chosen
    from .measure import peak_rss_bytes

    section = LanguageModelSection(
        task=TEXT_GENERATION, weights_format=src.weights_format, prefill_lengths=tuple(options.prefill_lengths),
        cache_length=options.cache_length, max_new_tokens=options.max_new_tokens, quantize=options.quantize,
        block_size=options.block_size if options.quantize in ("int4", "auto") else None, package=meta,
        litertlm=str(paths["litertlm"]), chosen=attempt.recipe, attempts=tuple(attempts),
        measurements=LlmMeasurements(len(tflite), len(litertlm), kv_bytes, peak_rss_bytes(), prefill_tps, decode_tps),
    )
    from .writing import write_language_model

    return write_language_model(source, src.class_name, paths, tflite, litertlm, section, stages, options)
