"""A tiny decoder per family exported to .tflite + .litertlm, proved against transformers:
float32 greedy text identical through the LiteRT-LM runtime, logits within 1e-4 through the
flatbuffer's own signatures; dynamic-int8 and int4 measured on the same float flatbuffer; a
perturbed weight fails with the step named."""

from __future__ import annotations

import math

import jsonschema
import numpy as np
import pytest

from llm_settings import NEW_TOKENS, PROMPTS
from testing_language_models import FAMILIES

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("family", FAMILIES)
def test_float_export_matches_transformers_token_for_token(llm_exports, report_schema, family):
    run = llm_exports(family)
    assert run.exit_code == 0
    assert run.tflite.stat().st_size > 0 and run.litertlm.stat().st_size > 0
    jsonschema.validate(run.report, report_schema)
    assert run.report["verdict"] == "passed"
    lm = run.report["language_model"]
    assert lm["prefill_lengths"] == ([16, 32] if family == "llama" else [32])  # llama: two prefill signatures, both driven
    from edge_export.llm.signatures import SignatureDriver

    assert SignatureDriver(run.tflite.read_bytes()).prefill_lengths == tuple(lm["prefill_lengths"])
    (attempt,) = lm["attempts"]
    assert attempt["recipe"] == lm["chosen"] == "none"
    assert len(attempt["prompts"]) == len(PROMPTS)
    for prompt in attempt["prompts"]:
        assert prompt["steps"] == NEW_TOKENS
        assert prompt["max_abs_logit_diff"] <= 1e-4
        assert prompt["token_agreement"] == 1.0
        assert prompt["runtime_text"] == prompt["reference_text"] and prompt["text_divergence_step"] is None
    chat = attempt["chat"]  # one user turn through LiteRT-LM's Conversation API and the packaged template
    assert chat["passed"] and chat["runtime_text"] == chat["reference_text"] != "", chat
    m = lm["measurements"]
    assert m["kv_cache_bytes"] == 2 * 2 * 2 * 128 * 16 * 4  # layers x (K, V) x KV heads x cache x head dim x float32
    assert m["tflite_bytes"] == run.tflite.stat().st_size and m["litertlm_bytes"] == run.litertlm.stat().st_size
    assert m["decode_tokens_per_second"] > 0 and m["peak_rss_bytes"] > 0


@pytest.mark.parametrize("family", FAMILIES)
def test_litertlm_greedy_text_equals_transformers_generate(llm_exports, family):
    """Checked here without edge-export's comparison code: the written .litertlm in the LiteRT-LM
    runtime against transformers' generate() on the saved weights."""
    import litert_lm
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run = llm_exports(family)
    tokenizer = AutoTokenizer.from_pretrained(run.folder)
    model = AutoModelForCausalLM.from_pretrained(run.folder, dtype=torch.float32).eval()
    with litert_lm.Engine(str(run.litertlm), backend=litert_lm.Backend.CPU(thread_count=1)) as engine:
        for prompt in PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=tokenizer.pad_token_id)
            generated = out[0, ids.shape[1]:].tolist()
            if generated and generated[-1] == tokenizer.eos_token_id:
                generated = generated[:-1]
            session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=NEW_TOKENS)
            session.run_prefill([prompt])
            assert session.run_decode().texts[0] == tokenizer.decode(generated)
            session.close()


@pytest.mark.parametrize("family", FAMILIES)
def test_dynamic_int8_and_int4_are_measured_on_the_float_flatbuffer(llm_exports, family):
    from edge_export.llm.run import check_recipe

    run, ctx = llm_exports(family), llm_exports.context(family)
    float_bytes = run.tflite.read_bytes()
    sizes = {}
    for recipe, dtype in (("dynamic-int8", "INT8"), ("int4", "INT4")):
        attempt = check_recipe(recipe, float_bytes, ctx).attempt
        assert math.isfinite(attempt.mean_kl) and attempt.mean_kl > 0
        assert 0.0 <= attempt.token_agreement <= 1.0
        assert attempt.max_abs_logit_diff > 1e-4  # quantization does change the logits
        assert attempt.identical_texts is not None and len(attempt.prompts) == len(PROMPTS)
        groups = {w.group: w for w in attempt.weights}
        assert {"embedding", "attention", "mlp", "lm_head"} <= set(groups)
        assert dtype in groups["attention"].dtypes and dtype in groups["mlp"].dtypes
        sizes[recipe] = attempt.model_bytes
    assert sizes["int4"] < sizes["dynamic-int8"] < len(float_bytes)


def _perturbed(tflite: bytes) -> bytes:
    """The flatbuffer with one MLP weight matrix shifted (a bad kernel or a corrupted file)."""
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(tflite))
    for tensor in model.subgraphs[0].tensors:
        data = model.buffers[tensor.buffer].data
        if data is not None and b"mlp" in tensor.name and len(data) > 4096:
            weights = np.frombuffer(bytes(data), np.float32).copy()
            weights[: weights.size // 4] += 0.5
            model.buffers[tensor.buffer].data = np.frombuffer(weights.tobytes(), np.uint8)
            return bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    raise AssertionError("no MLP weight found")


@pytest.mark.parametrize("family", FAMILIES)
def test_a_perturbed_weight_fails_parity_at_the_named_step(llm_exports, family):
    from edge_export.llm.run import check_recipe

    run, ctx = llm_exports(family), llm_exports.context(family)
    attempt = check_recipe("none", _perturbed(run.tflite.read_bytes()), ctx).attempt
    assert not attempt.passed
    first = attempt.prompts[0]
    assert not first.passed and first.first_failing_step == 0
    position = first.prompt_tokens - 1  # the prompt's last token goes through decode first
    assert f"decode at position {position}: max |Δlogit|" in first.failing_reason
    assert first.max_abs_logit_diff > 1e-4


def test_auto_keeps_the_smallest_recipe_that_passes_and_reports_every_attempt(llm_exports):
    from edge_export.llm.recipes import AUTO_ORDER
    from edge_export.llm.run import check_recipes

    run, ctx = llm_exports("llama"), llm_exports.context("llama")
    attempts, chosen = check_recipes(run.tflite.read_bytes(), ctx, "auto")
    assert [a.recipe for a in attempts] == list(AUTO_ORDER[: len(attempts)])
    assert chosen.attempt is attempts[-1] and chosen.attempt.passed
    assert not any(a.passed for a in attempts[:-1])
    sizes = [a.model_bytes for a in attempts]
    assert sizes == sorted(sizes)


def test_a_failed_language_model_is_exit_1_with_the_step_in_every_rendering(llm_exports, report_schema, tmp_path):
    """The perturbed model's attempt through the report: verdict failed (exit 1, as classifier
    parity), a JUnit case per prompt with the failing step, the Markdown escaping the model's text."""
    import xml.etree.ElementTree as ET

    from edge_export.llm.report import LanguageModelSection, LlmMeasurements
    from edge_export.llm.run import check_recipe
    from edge_export.llm.writing import build_run_report
    from edge_export.reports.junit import render_junit
    from edge_export.reports.markdown import render_markdown
    from edge_export.output.serialize import to_json_value

    run, ctx = llm_exports("qwen3"), llm_exports.context("qwen3")
    result = check_recipe("none", _perturbed(run.tflite.read_bytes()), ctx)
    section = LanguageModelSection(
        task="text-generation", weights_format="safetensors", prefill_lengths=(32,), cache_length=128, max_new_tokens=NEW_TOKENS,
        quantize="none", block_size=None, package=ctx.meta, litertlm=str(tmp_path / "m.litertlm"), chosen="none",
        attempts=(result.attempt,), measurements=LlmMeasurements(len(result.tflite), len(result.litertlm), result.kv_cache_bytes, 1, None, None),
    )

    class _Stages:
        times = ()

    paths = {k: tmp_path / f"m.{k}" for k in ("tflite", "litertlm", "json", "md")}
    report = build_run_report(str(run.folder), "Qwen3ForCausalLM", paths, result.tflite, section, _Stages(), str(tmp_path / "j.xml"))
    assert report.verdict == "failed" and report.exit_code == 1
    data = to_json_value(report)
    jsonschema.validate(data, report_schema)
    assert data["language_model"]["passed"] is False
    cases = ET.fromstring(render_junit(report)).findall(".//testcase")
    assert [c.get("name") for c in cases] == [f"prompt {i}" for i in range(len(PROMPTS))] + ["chat turn"]  # the Conversation API turn
    failure = cases[0].find("failure")
    assert failure is not None and "step 0: decode at position" in failure.get("message", failure.text or "")
    markdown = render_markdown(report)
    assert "## Language model" in markdown and "❌ FAILED" in markdown
    assert "\x1d" not in markdown and "<bos>" not in markdown  # model text escaped


def test_a_one_token_prompt_and_a_prompt_longer_than_the_prefill_length(llm_exports):
    """No prefill call at all (the one token goes through decode), and a prompt prefilled in two
    chunks of 32: both still exact against transformers, logits and LiteRT-LM text."""
    from edge_export.llm.run import check_recipe
    from llm_settings import PREFILL

    run = llm_exports("llama")
    tokenizer = llm_exports.context("llama").tokenizer
    one = next(w for w in ("the", "a", "one", "hello") if len(tokenizer(w).input_ids) == 1)
    long = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)
    assert len(tokenizer(long).input_ids) > PREFILL
    attempt = check_recipe("none", run.tflite.read_bytes(), llm_exports.context("llama", (one, long))).attempt
    assert [p.prompt_tokens for p in attempt.prompts][0] == 1
    assert attempt.passed, [p.failing_reason for p in attempt.prompts]
    assert all(p.max_abs_logit_diff <= 1e-4 and p.text_divergence_step is None for p in attempt.prompts)


def test_a_tokenizer_that_prepends_bos_gets_a_start_token_and_no_second_bos(llm_exports, tmp_path):
    """The runtime adds the package's start token itself: with a tokenizer that prepends <bos>
    the package names it, and the LiteRT-LM text still equals transformers' (one <bos>, not two).
    The flatbuffer does not depend on the tokenizer, so Llama's float export is reused."""
    import shutil

    from edge_export.llm.run import check_recipe
    from testing_language_models import CHAT_TEMPLATE, train_tokenizer

    run = llm_exports("llama")
    folder = tmp_path / "llama-bos"
    shutil.copytree(run.folder, folder)
    # a template printing {{ bos_token }}: transformers' chat prompt then starts with the BOS the runtime prepends
    tokenizer = train_tokenizer(prepend_bos=True, chat_template="{{ bos_token }}" + CHAT_TEMPLATE)
    tokenizer.save_pretrained(folder)
    assert tokenizer("hello").input_ids[0] == tokenizer.bos_token_id
    ctx = _context_for(llm_exports, folder, tmp_path)
    assert ctx.meta.start_token_id == tokenizer.bos_token_id
    assert all(ref.prompt_ids[0] == tokenizer.bos_token_id and ref.prompt_ids[1] != tokenizer.bos_token_id for ref in ctx.refs)
    attempt = check_recipe("none", run.tflite.read_bytes(), ctx).attempt
    assert attempt.passed and attempt.identical_texts == len(PROMPTS), [(p.reference_text, p.runtime_text) for p in attempt.prompts]
    assert attempt.chat.passed, attempt.chat


def _context_for(llm_exports, folder, work):
    from edge_export.llm.options import LanguageModelOptions
    from edge_export.llm.run import prepare, reference_context
    from llm_settings import CACHE, PREFILL

    options = LanguageModelOptions(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS, prompts=PROMPTS)
    src, tokenizer, template, meta = prepare(str(folder), work / "work", PROMPTS, options)
    return reference_context(src, tokenizer, template, meta, PROMPTS, options, work)
