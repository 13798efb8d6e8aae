"""Fast checks, no export: architectures litert-torch cannot export refused from config.json alone
(exit 2 in seconds, nothing written), the [llm] extra's import failures named as the environment's,
the package's start and stop tokens and sampler from the tokenizer's post-processor, the config and
generation_config.json, and the chat-template prelude rendering content parts as transformers
renders strings."""

from __future__ import annotations

import json
import sys
import time

import pytest

from edge_export.errors import ModelLoadError, RuntimeRunError, UsageError

CONFIGS = {
    "gpt2": ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 2}, ("GPT2LMHeadModel", "GPT-2", "export_hf")),
    "opt": ({"architectures": ["OPTForCausalLM"], "model_type": "opt"}, ("OPTForCausalLM", "OPT", "export_hf")),
    "mixtral": ({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_local_experts": 8}, ("MixtralForCausalLM", "8 experts", "aten.histc")),
    "qwen3_moe": ({"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "num_experts": 128}, ("Qwen3MoeForCausalLM", "128 experts", "aten.histc")),
    "longrope": ({"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", "rope_scaling": {"type": "longrope"}}, ("Phi3ForCausalLM", "longrope",)),
    "quantized": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "quantization_config": {"quant_method": "gptq"}}, ("LlamaForCausalLM", "quantized checkpoint")),
}


def _config_folder(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(CONFIGS[name][0]))
    return folder


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_an_architecture_litert_torch_cannot_export_is_exit_2_from_config_json_alone(tmp_path, name):
    """No weights or tokenizer in the folder: the refusal comes before anything reads them."""
    from edge_export.llm import export_language_model

    folder = _config_folder(tmp_path, name)
    out = tmp_path / "out"
    start = time.perf_counter()
    with pytest.raises(ModelLoadError) as info:
        export_language_model(str(folder), out / "m.tflite")
    assert time.perf_counter() - start < 5
    assert info.value.exit_code == 2
    for word in CONFIGS[name][1]:
        assert word in str(info.value)
    assert "not a decoder" not in str(info.value) and not out.exists()


def test_gpt2_without_task_is_named_as_gpt2_by_the_cli(tmp_path, capfd):
    """GPT-2's architecture is GPT2LMHeadModel (no *ForCausalLM): inferred as a language model and
    refused as GPT-2, not called "not a decoder"."""
    from edge_export.cli import main

    folder = _config_folder(tmp_path, "gpt2")
    with pytest.raises(SystemExit) as info:
        main([str(folder), "-o", str(tmp_path / "out" / "g.tflite")])
    assert info.value.code == 2
    err = capfd.readouterr().err
    assert "GPT-2" in err and "litert-torch" in err and "Traceback (most recent" not in err and "a bug in edge-export" not in err


def test_a_dense_decoder_is_not_refused():
    from edge_export.llm.task import unsupported_architecture

    assert unsupported_architecture({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_experts": 0}) is None
    assert unsupported_architecture({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "rope_scaling": {"rope_type": "linear"}}) is None


def test_a_missing_or_broken_llm_library_is_the_environment_not_a_bug(monkeypatch):
    from edge_export.llm import export as export_module
    from edge_export.llm.environment import require_llm_extra
    from edge_export.llm.parity import import_runtime
    from edge_export.llm.run import check_llm_extra

    monkeypatch.setitem(sys.modules, "litert_lm", None)  # import raises ImportError, as for a wheel that does not load
    with pytest.raises(UsageError) as info:
        check_llm_extra()
    assert info.value.exit_code == 2 and "edge-export[llm]" in str(info.value) and "litert-lm-api" in str(info.value)
    with pytest.raises(RuntimeRunError) as info:
        import_runtime()
    assert info.value.exit_code == 3 and "edge-export[llm]" in str(info.value)
    with pytest.raises(UsageError, match=r"edge-export\[llm\]"):
        require_llm_extra("litert_lm_builder.no_such_module", "to test")

    def broken():
        raise OSError("libtensorflowlite.so: cannot open shared object file")

    monkeypatch.setattr(export_module, "import_export_hf", broken)
    with pytest.raises(UsageError) as info:
        export_module.export_float_flatbuffer(None, (32,), 128)
    assert "cannot open shared object" in str(info.value) and "edge-export[llm]" in str(info.value)


def _tokenizer(**kwargs):
    from testing_language_models import train_tokenizer

    return train_tokenizer(**kwargs)


def test_the_start_token_is_what_the_post_processor_prepends_whatever_bos_token_says():
    """A Qwen2 folder's post-processor adds <s> with bos_token null: the start token is still that
    token (the runtime tokenizes without the post-processor and prepends the start token itself)."""
    from edge_export.llm.packaging import start_token

    named = _tokenizer(prepend_bos=True)
    unnamed = _tokenizer(prepend_bos=True)
    unnamed.bos_token = None
    assert unnamed.bos_token_id is None
    assert start_token(named) == start_token(unnamed) == named.convert_tokens_to_ids("<bos>")
    assert start_token(_tokenizer()) is None


@pytest.mark.parametrize("template, why", [("<bos> <eos> $A", r"adds 2 token\(s\) before"), ("$A <eos>", r"and 1 after")])
def test_a_post_processor_the_runtime_cannot_reproduce_is_exit_2(template, why):
    from tokenizers import processors

    from edge_export.llm.packaging import start_token

    tok = _tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in ("<bos>", "<eos>")}
    tok.backend_tokenizer.post_processor = processors.TemplateProcessing(single=template, special_tokens=list(ids.items()))
    with pytest.raises(UsageError, match=why) as info:
        start_token(tok)
    assert info.value.exit_code == 2


def test_stop_tokens_and_sampler_come_from_the_tokenizer_config_and_generation_config(tmp_path):
    from edge_export.llm.generation_config import read_generation_config
    from edge_export.llm.packaging import _metadata_proto, package_metadata
    from litert_lm_builder.runtime.proto import llm_metadata_pb2

    (tmp_path / "generation_config.json").write_text(json.dumps(
        {"eos_token_id": [2, 7, 9], "do_sample": True, "top_k": 20, "top_p": 0.8, "temperature": 0.7, "unrelated": {"x": 1}}))
    generation = read_generation_config(tmp_path)
    meta = package_metadata(_tokenizer(), {"eos_token_id": [2, 5]}, 128, None, generation)
    assert meta.stop_token_ids == (2, 5, 7, 9)
    assert meta.sampler == "sampling (top-k 20, top-p 0.8, temperature 0.7)"
    proto = llm_metadata_pb2.LlmMetadata.FromString(_metadata_proto(meta, None, generation))
    assert [list(t.token_ids.ids) for t in proto.stop_tokens] == [[2], [5], [7], [9]]
    p = proto.sampler_params
    assert (p.type, p.k, round(p.p, 4), round(p.temperature, 4)) == (p.TOP_P, 20, 0.8, 0.7)
    assert read_generation_config(tmp_path / "absent") is None
    (tmp_path / "generation_config.json").write_text(json.dumps({"top_k": "many"}))
    with pytest.raises(ModelLoadError, match="top_k"):
        read_generation_config(tmp_path)


SMOLLM2_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful AI assistant<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
QWEN_CHATML_TEMPLATE = (
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if message.role != 'system' %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
LLAMA_BOS_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|{{ message.role }}|>{{ message.content }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


@pytest.mark.parametrize("template", [SMOLLM2_TEMPLATE, QWEN_CHATML_TEMPLATE, LLAMA_BOS_TEMPLATE], ids=["smollm2", "qwen-chatml", "bos"])
def test_the_packaged_template_renders_content_parts_as_transformers_renders_strings(template):
    """In jinja2's sandbox (what transformers renders with); the runtime's own rendering is checked
    in test_llm_chat_and_generate.py."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from edge_export.llm.chat_template import runtime_chat_template

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    turns = [("system", "be brief"), ("user", "hello world"), ("assistant", "hi"), ("user", "again")]
    strings = [{"role": r, "content": c} for r, c in turns]
    parts = [{"role": r, "content": [{"type": "text", "text": c[:3]}, {"type": "image"}, {"type": "text", "text": c[3:]}]} for r, c in turns]
    expected = env.from_string(template).render(messages=strings, add_generation_prompt=True, bos_token="<bos>")
    for declared, bos in ((False, "<bos>"), (True, "")):
        adapted = env.from_string(runtime_chat_template(template, start_token_declared=declared))
        got = adapted.render(messages=parts, add_generation_prompt=True, bos_token="<bos>")
        assert got == expected.replace("<bos>", bos, 1 if "bos_token" in template else 0)
        assert adapted.render(messages=strings, add_generation_prompt=True, bos_token="<bos>") == got


def test_a_cache_longer_than_max_position_embeddings_is_exit_2():
    from edge_export.llm.task import check_cache_length

    check_cache_length({"max_position_embeddings": 256}, 256)
    check_cache_length({}, 1 << 20)  # no limit declared
    with pytest.raises(ModelLoadError, match=r"max_position_embeddings \(256\)") as info:
        check_cache_length({"text_config": {"max_position_embeddings": 256}}, 1024)
    assert info.value.exit_code == 2 and "--cache-length 256" in str(info.value)
