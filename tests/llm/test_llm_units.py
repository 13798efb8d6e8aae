"""The language-model chain's pure parts, without an export: task detection, options, metrics,
the per-prompt judgement and its report renderings."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from edge_export.errors import ModelLoadError, UsageError
from edge_export.llm.evaluation import judge_prompt, thresholds_for
from edge_export.llm.options import LanguageModelOptions, check_options, parse_lengths
from edge_export.llm.parity import ReferenceRun, logit_metrics
from edge_export.llm.task import check_causal_lm_config, is_causal_lm_directory


def _folder(tmp_path, config: dict):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("config", [
    {"architectures": ["LlamaForCausalLM"], "model_type": "llama"},
    {"model_type": "qwen3"},  # saved from a config built in code: no architectures
])
def test_a_causal_lm_directory_is_recognised(tmp_path, config):
    assert is_causal_lm_directory(str(_folder(tmp_path, config)))
    assert check_causal_lm_config(tmp_path)["model_type"] == config["model_type"]


@pytest.mark.parametrize("config, words", [
    ({"architectures": ["BertModel"], "model_type": "bert"}, "BertModel"),
    ({"model_type": "bert"}, "encoder-only"),
    ({"architectures": ["ViTForImageClassification"], "model_type": "vit"}, "vision model"),
    ({"architectures": ["LlavaForConditionalGeneration"], "vision_config": {}, "model_type": "llava"}, "vision model"),
])
def test_encoder_and_vision_models_are_refused_naming_what_they_are(tmp_path, config, words):
    assert not is_causal_lm_directory(str(_folder(tmp_path, config)))
    with pytest.raises(ModelLoadError, match=words) as info:
        check_causal_lm_config(tmp_path)
    assert info.value.exit_code == 2


def test_a_folder_without_config_is_not_a_causal_lm(tmp_path):
    assert not is_causal_lm_directory(str(tmp_path))
    assert not is_causal_lm_directory("package.module:attr")


def test_options_are_checked():
    assert parse_lengths("32, 128", "--prefill-lengths") == (32, 128)
    for text in ("", "0", "a,b", "-4"):
        with pytest.raises(UsageError):
            parse_lengths(text, "--prefill-lengths")
    for bad in (dict(quantize="int16x8"), dict(block_size=48), dict(prefill_lengths=(256,), cache_length=128), dict(max_new_tokens=0)):
        with pytest.raises(UsageError):
            check_options(LanguageModelOptions(**bad))
    check_options(LanguageModelOptions(quantize="auto", block_size=64))


def test_logit_metrics_are_inf_not_nan_on_non_finite_logits():
    ref = np.array([[1.0, 2.0, 3.0], [0.0, 0.0, 1.0]])
    got = np.array([[1.0, 2.0, 3.0], [np.nan, 0.0, 1.0]])
    m = logit_metrics(ref, got)
    assert m.max_abs_logit_diff[0] == 0.0 and m.kl[0] == pytest.approx(0.0) and m.top1_agree[0]
    assert math.isinf(m.max_abs_logit_diff[1]) and math.isinf(m.kl[1]) and not m.top1_agree[1]


class _Tokenizer:
    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(97 + i) for i in ids)


def _reference(logits: np.ndarray) -> ReferenceRun:
    generated = tuple(int(i) for i in np.argmax(logits, axis=1))
    return ReferenceRun("p", (5, 6, 7), generated, _Tokenizer().decode(generated), logits)


def test_the_first_step_over_the_threshold_is_named_with_its_decode_position():
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(4, 8))
    got = ref.copy()
    got[2, 0] += 0.01
    p = judge_prompt(_reference(ref), got, _Tokenizer().decode(np.argmax(ref, axis=1)), thresholds_for("none", None, None), _Tokenizer(), ())
    assert not p.passed and p.first_failing_step == 2
    assert p.failing_reason.startswith("decode at position 4: max |Δlogit| 0.01 > 0.0001")


def test_a_quantized_recipe_is_judged_by_kl_and_agreement_not_by_text():
    rng = np.random.default_rng(1)
    ref = rng.normal(size=(10, 8)) * 4
    got = ref + rng.normal(size=ref.shape) * 0.01
    p = judge_prompt(_reference(ref), got, "different text", thresholds_for("int4", None, None), _Tokenizer(), ())
    assert p.passed and p.text_divergence_step == 0 and p.first_failing_step is None
    flipped = ref.copy()
    flipped[:, :] = ref[:, ::-1]  # every step's top-1 changes
    q = judge_prompt(_reference(ref), flipped, "x", thresholds_for("int4", None, None), _Tokenizer(), ())
    assert not q.passed and q.first_failing_step == 0 and "top-1 token" in q.failing_reason


def test_a_missing_llm_extra_is_exit_2_naming_the_install(monkeypatch):
    import importlib.util

    from edge_export.llm.run import check_llm_extra

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "litert_lm" else real(name, *a))
    with pytest.raises(UsageError, match="litert-lm-api") as info:
        check_llm_extra()
    assert "edge-export[llm]" in str(info.value) and info.value.exit_code == 2
    monkeypatch.undo()
    check_llm_extra()  # installed here (the dev extra)


def test_the_float32_logit_threshold_scales_with_the_logits_magnitude():
    """1e-4 for the test models' logits (up to ~6), 1.25e-5 of the largest |logit| beyond 8; --atol wins."""
    from edge_export.llm.evaluation import default_float_atol

    assert thresholds_for("none", None, None, 6.4).max_abs_logit_diff == 1e-4
    assert thresholds_for("none", None, None, 40.0).max_abs_logit_diff == pytest.approx(5e-4)
    assert thresholds_for("none", 2e-3, None, 40.0).max_abs_logit_diff == 2e-3
    assert default_float_atol(float("inf")) == 1e-4
    assert thresholds_for("int4", None, None, 40.0).max_abs_logit_diff is None
