"""Issue #35's open points on the tiny decoders (the pretrained decoder is in
benchmarks/pretrained_decoder.py):

- the default prefill and cache come from the config and the weights' size, and the report says so;
- the float .tflite is written beside the .litertlm only with --write-tflite;
- tokens/s are timed by edge-export over several prompts and lengths (median, with the load and
  threads), close to an independent wall-clock timing;
- per-group recipes: int4-mlp keeps attention and the vocabulary tables at int8, int8 is
  weight-only (float compute), and the report lists each group's storage and bytes.
"""

from __future__ import annotations

import json
import statistics
import time

import pytest

from llm_settings import CACHE, NEW_TOKENS, PREFILL, PROMPTS


# ---- sizing (no export) ------------------------------------------------------------------------

def test_default_lengths_follow_the_weights_and_the_config():
    from edge_export.llm.sizing import CACHE_RANGE, default_lengths, kv_bytes_per_token

    smollm2 = {"num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3, "hidden_size": 576, "head_dim": 64}
    per_token = kv_bytes_per_token(smollm2)
    assert per_token == 2 * 30 * 3 * 64 * 4
    prefill, cache = default_lengths(538_090_408, per_token, 8192)
    assert cache * per_token <= 538_090_408 // 32 < 2 * cache * per_token  # the largest power of two within 1/32
    assert prefill == (cache // 8,)
    # a model 16x larger gets a longer cache, capped at 4096 and at max_position_embeddings
    assert default_lengths(16 * 538_090_408, per_token, 8192)[1] == 16 * cache
    assert default_lengths(10**15, per_token, 8192)[1] == CACHE_RANGE[1]
    assert default_lengths(10**15, per_token, 1000) == ((128,), 1000)
    # a tiny model: the floor; nothing to size from: the fallback
    assert default_lengths(1000, per_token, None) == ((16,), CACHE_RANGE[0])
    assert default_lengths(None, None, None) == ((32,), 256)
    assert kv_bytes_per_token({"num_hidden_layers": 2}) is None


def test_given_lengths_are_kept_and_a_given_prefill_fits_the_default_cache(tmp_path):
    from edge_export.llm.options import LanguageModelOptions
    from edge_export.llm.sizing import resolve_lengths

    config = {"num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 64, "max_position_embeddings": 256}
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 4096)
    options, sizing = resolve_lengths(tmp_path, config, LanguageModelOptions(prefill_lengths=(32,), cache_length=64))
    assert (options.prefill_lengths, options.cache_length, sizing.source) == ((32,), 64, "given")
    assert sizing.reason == "prefill 32, cache 64 as given"
    options, sizing = resolve_lengths(tmp_path, config, LanguageModelOptions(prefill_lengths=(200,)))
    assert options.cache_length == 200 and sizing.source == "default"
    options, sizing = resolve_lengths(tmp_path, config, LanguageModelOptions())
    assert (options.prefill_lengths, options.cache_length) == ((16,), 128) and sizing.float_weights_bytes == 4096
    assert sizing.estimated_export_peak_bytes == 8 * 4096 and "1/32" in sizing.reason


# ---- the whole chain with defaults, the export replaced by the session's flatbuffer ------------

@pytest.fixture(scope="module")
def default_export(llm_exports, tmp_path_factory):
    """The tiny Llama folder through the CLI with no --prefill-lengths/--cache-length and no
    --write-tflite; litert-torch's export is replaced by the session's float flatbuffer (which has
    the default lengths' cache, 128), so only the chain around it runs."""
    from edge_export.cli import main
    from edge_export.llm import run
    from edge_export.llm.export import FloatExport

    folder = llm_exports.model_folder("llama")
    float_bytes = llm_exports("llama").tflite.read_bytes()
    lengths = []
    out = tmp_path_factory.mktemp("defaults") / "m.tflite"
    prompts = out.parent / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")

    def export(f, prefill, cache):
        lengths.append((tuple(prefill), cache))
        return FloatExport(float_bytes, tuple(prefill), cache)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run, "export_float_flatbuffer", export)
        try:
            main([str(folder), "-o", str(out), "--max-new-tokens", str(NEW_TOKENS), "--prompts", str(prompts), "--quiet"])
            code = 0
        except SystemExit as exc:
            code = exc.code
    return out, code, lengths


@pytest.mark.slow
def test_defaults_are_sized_from_the_config_and_the_tflite_is_not_duplicated(default_export, report_schema):
    import jsonschema

    out, code, lengths = default_export
    report = json.loads(out.with_suffix(".report.json").read_text())
    jsonschema.validate(report, report_schema)
    assert code == 0, report["language_model"]["attempts"][0]["prompts"]
    lm = report["language_model"]
    assert lengths == [((16,), CACHE)] and lm["prefill_lengths"] == [16] and lm["cache_length"] == CACHE
    assert lm["sizing"]["source"] == "default" and "1/32" in lm["sizing"]["reason"]
    from edge_export.output.text_safety import escape_markdown

    assert escape_markdown(lm["sizing"]["reason"]) in out.with_suffix(".report.md").read_text()
    assert not out.exists() and out.with_suffix(".litertlm").is_file()  # no second copy of the model
    assert report["artifacts"]["tflite"] == str(out.with_suffix(".litertlm"))


@pytest.mark.slow
def test_the_reported_tokens_per_second_are_timed_over_several_prompts_and_lengths(default_export):
    out, _, _ = default_export
    speed = json.loads(out.with_suffix(".report.json").read_text())["language_model"]["measurements"]["speed"]
    assert speed["runs"] == 6 and speed["threads"] == 1 and speed["host_cpus"] >= 1
    assert speed["host_load_average"] is not None
    assert len(set(speed["prompt_tokens"])) >= 4 and max(speed["prompt_tokens"]) >= 2 * min(speed["prompt_tokens"])
    assert speed["prefill_tokens_per_second"] > 0 and speed["decode_tokens_per_second"] > 0
    m = json.loads(out.with_suffix(".report.json").read_text())["language_model"]["measurements"]
    assert (m["prefill_tokens_per_second"], m["decode_tokens_per_second"]) == (speed["prefill_tokens_per_second"], speed["decode_tokens_per_second"])


@pytest.mark.slow
def test_measured_speed_predicts_a_wall_clock_timing_of_whole_generations(llm_exports):
    """The tool's median prefill and decode tokens/s against whole generations timed here (one
    perf_counter around prefill + decode, the runtime's token counts): the time the two rates
    predict is within a factor of 2 of the time measured (the factor allows for the load of a
    shared test host, where back-to-back timings move by up to 2x)."""
    import litert_lm
    from transformers import AutoTokenizer

    from edge_export.llm.speed import measure_speed, speed_prompts

    run = llm_exports("llama")
    prompts = speed_prompts(AutoTokenizer.from_pretrained(run.folder), PROMPTS, PREFILL)
    tool = measure_speed(str(run.litertlm), prompts, NEW_TOKENS)
    predicted, measured = [], []
    with litert_lm.Engine(str(run.litertlm), backend=litert_lm.Backend.CPU(thread_count=1), enable_benchmark=True) as engine:
        for i, prompt in enumerate((prompts[0], *prompts)):
            session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=NEW_TOKENS)
            start = time.perf_counter()
            session.run_prefill([prompt])
            session.run_decode()
            seconds = time.perf_counter() - start
            info = session.get_benchmark_info()
            session.close()
            if i:  # the first is a warm-up, as in the tool
                measured.append(seconds)
                predicted.append(info.last_prefill_token_count / tool.prefill_tokens_per_second + info.last_decode_token_count / tool.decode_tokens_per_second)
    ratio = statistics.median(predicted) / statistics.median(measured)
    assert 0.5 <= ratio <= 2, (tool, predicted, measured)


# ---- per-group recipes -------------------------------------------------------------------------

@pytest.mark.slow
def test_int4_mlp_keeps_attention_and_the_vocabulary_tables_at_int8(llm_exports):
    from edge_export.llm.run import check_recipe

    run, ctx = llm_exports("llama"), llm_exports.context("llama")
    float_bytes = run.tflite.read_bytes()
    found = {}
    for recipe in ("int4-mlp", "int8", "int4"):
        attempt = check_recipe(recipe, float_bytes, ctx).attempt
        found[recipe] = attempt
        groups = {w.group: w.dtypes for w in attempt.weights}
        assert {"embedding", "attention", "mlp", "lm_head"} <= set(groups), groups
    g = {w.group: w.dtypes for w in found["int4-mlp"].weights}
    assert g["mlp"] == ("INT4",) and g["attention"] == ("INT8",) and g["embedding"] == ("INT8",) and g["lm_head"] == ("INT8",)
    assert all(w.dtypes == ("INT8",) for w in found["int8"].weights if w.group != "other")
    assert found["int4"].model_bytes < found["int4-mlp"].model_bytes < found["int8"].model_bytes < len(float_bytes)
    # weight-only int8 computes in float: closer to float32 than int4 everywhere
    assert found["int8"].mean_kl < found["int4"].mean_kl


def test_auto_tries_the_recipes_smallest_first():
    from edge_export.llm.recipes import AUTO_ORDER, GROUP_RECIPES, LLM_RECIPES

    assert set(AUTO_ORDER) == set(LLM_RECIPES) == set(GROUP_RECIPES)
    bits = {"int4-dyn": 4, "int8": 8, "int8-dyn": 8, "fp16": 16, "float32": 32}
    # the MLP holds most weights, then attention: order by (mlp, attention, tables) bits
    keys = [tuple(bits[GROUP_RECIPES[r][i]] for i in (2, 1, 0, 3)) for r in AUTO_ORDER]
    assert keys == sorted(keys)


def test_a_recipe_auto_did_not_keep_says_what_it_measured():
    from edge_export.llm.evaluation import thresholds_for
    from edge_export.llm.report import LlmRecipeAttempt, attempt_shortfall

    t = thresholds_for("int4", None, None)
    failed = LlmRecipeAttempt("int4", 1000, (), t, 3.5, 0.31, 0.6, 1, (), False)
    assert attempt_shortfall(failed) == "token agreement 0.600 < 0.9, mean KL 0.31 > 0.05"
    nan = LlmRecipeAttempt("int4", 1000, (), t, float("nan"), float("nan"), float("nan"), 0, (), False)
    assert "token agreement nan < 0.9" in attempt_shortfall(nan) and "mean KL nan > 0.05" in attempt_shortfall(nan)


def test_bench_on_a_package_points_to_generate_and_to_write_tflite(run_cli, tmp_path):
    """The .tflite is no longer beside the .litertlm by default: bench's refusal says how to get one."""
    package = tmp_path / "m.litertlm"
    package.write_bytes(b"LITERTLM")
    result = run_cli("bench", str(package))
    text = " ".join((result.stdout + result.stderr).split())
    assert result.exit_code == 2 and "edge-export generate" in text and "--write-tflite" in text, text
    assert "Traceback" not in text
