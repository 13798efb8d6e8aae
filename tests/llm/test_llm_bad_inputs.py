"""Bad input to `edge-export MODEL --task text-generation`: one paragraph naming the problem and
the fix, exit 2, nothing written. Each fails before the export starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.hostile]  # the first case pays for importing transformers


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> Path:
    from testing_language_models import build_decoder

    return build_decoder("llama", tmp_path_factory.mktemp("bad") / "llama")


def _copy(folder: Path, tmp_path: Path, name: str = "model") -> Path:
    copy = tmp_path / name
    shutil.copytree(folder, copy)
    return copy


def _assert_refused(result, out: Path, *words: str) -> None:
    assert result.exit_code == 2, result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    paragraph = result.stderr.split("error:", 1)[1].split("(run with --debug")[0]
    assert "\n\n" not in paragraph.strip()
    for word in words:
        assert word in " ".join(paragraph.split()), paragraph
    assert not out.exists() or not any(out.iterdir())  # nothing written


def test_a_directory_without_a_tokenizer(run_cli, llama_folder, tmp_path):
    model = _copy(llama_folder, tmp_path)
    (model / "tokenizer.json").unlink()
    out = tmp_path / "out"
    result = run_cli(model, "-o", out / "m.tflite", "--prefill-lengths", "32", "--cache-length", "128")
    _assert_refused(result, out, "tokenizer.json", "--tokenizer")


def test_an_encoder_only_model_with_task_text_generation(run_cli, tmp_path):
    from transformers import BertConfig, BertForMaskedLM

    model = tmp_path / "bert"
    BertForMaskedLM(BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)).save_pretrained(model)
    out = tmp_path / "out"
    result = run_cli(model, "--task", "text-generation", "-o", out / "m.tflite")
    _assert_refused(result, out, "BertForMaskedLM", "*ForCausalLM")


def test_a_prompt_longer_than_the_cache(run_cli, llama_folder, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello world\n" + "the quick brown fox jumps over the lazy dog " * 4 + "\n", encoding="utf-8")
    out = tmp_path / "out"
    result = run_cli(llama_folder, "-o", out / "m.tflite", "--prefill-lengths", "16", "--cache-length", "32", "--prompts", prompts, "--max-new-tokens", "16")
    _assert_refused(result, out, "Prompt 2", "--cache-length 32", "--max-new-tokens")


def test_a_chat_template_that_does_not_render(run_cli, llama_folder, tmp_path):
    model = _copy(llama_folder, tmp_path)
    (model / "chat_template.jinja").write_text("{% for m in messages %}{{ m['content'] | no_such_filter }}{% endfor %}", encoding="utf-8")
    out = tmp_path / "out"
    result = run_cli(model, "-o", out / "m.tflite", "--prefill-lengths", "32", "--cache-length", "128")
    _assert_refused(result, out, "chat template does not render", "chat_template.jinja")


def test_pickle_weights_without_trust_pickle(run_cli, llama_folder, tmp_path):
    import torch
    from safetensors.torch import load_file

    model = _copy(llama_folder, tmp_path)
    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    out = tmp_path / "out"
    result = run_cli(model, "-o", out / "m.tflite", "--prefill-lengths", "32", "--cache-length", "128")
    _assert_refused(result, out, "pickle", "pytorch_model.bin", "--trust-pickle", "safetensors")


def test_trust_pickle_converts_pickled_weights_to_safetensors_in_the_work_folder(llama_folder, tmp_path):
    import torch
    from safetensors.torch import load_file

    from edge_export.llm.loading import prepare_model_directory

    model = _copy(llama_folder, tmp_path)
    state = load_file(model / "model.safetensors")
    torch.save(state, model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()
    src = prepare_model_directory(str(model), tmp_path / "work", trust_pickle=True)
    assert src.weights_format == "pickle" and src.folder == tmp_path / "work"
    converted = load_file(src.folder / "model.safetensors")
    assert set(converted) <= set(state) and all(torch.equal(converted[k], state[k]) for k in converted)
    assert not (model / "model.safetensors").exists()  # the user's folder is left as it was


def test_a_module_reference_is_saved_as_safetensors_with_the_given_tokenizer(llama_folder, tmp_path, monkeypatch):
    """`package.module:attr` returning a causal LM, with --tokenizer: prepared into the work folder
    as a directory the export reads (no pickle involved)."""
    from edge_export.llm.loading import prepare_model_directory

    (tmp_path / "tiny_lm.py").write_text(
        "from transformers import AutoConfig, LlamaForCausalLM\n"
        f"def build():\n    return LlamaForCausalLM(AutoConfig.from_pretrained({str(llama_folder)!r}))\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    src = prepare_model_directory("tiny_lm:build", tmp_path / "work", tokenizer=str(llama_folder))
    assert src.class_name == "LlamaForCausalLM" and src.weights_format == "safetensors"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in src.folder.iterdir()}


def test_a_module_reference_needs_tokenizer(run_cli, tmp_path):
    out = tmp_path / "out"
    result = run_cli("tiny_lm:build", "--task", "text-generation", "-o", out / "m.tflite")
    _assert_refused(result, out, "--tokenizer")


def test_classifier_options_with_a_language_model_are_refused(run_cli, llama_folder, tmp_path):
    """An export option the language-model chain does not read is refused, not ignored."""
    out = tmp_path / "out"
    result = run_cli(llama_folder, "-o", out / "m.tflite", "--channels-last", "--calibration-data", tmp_path / "x.npz", "--max-flash", "1MiB")
    _assert_refused(result, out, "--calibration-data", "--channels-last", "--max-flash", "do not apply to --task text-generation")


def test_language_model_options_with_another_model_are_refused(run_cli, tmp_path):
    out = tmp_path / "out"
    result = run_cli("model_zoo:small_cnn", "--input-shape", "1,3,16,16", "--cache-length", "64", "--max-new-tokens", "4", "-o", out / "m.tflite")
    _assert_refused(result, out, "--cache-length, --max-new-tokens apply to --task text-generation only")
