"""A package an app can ship, checked in the LiteRT-LM runtime itself (issue #35):

- a tokenizer whose post-processor adds the BOS with ``bos_token`` null (Qwen2's folders) exports
  with exit 0, and the runtime's text equals transformers' (one BOS, not none or two); the
  generation config's EOS list and sampler reach the package;
- a chat turn through the runtime's Conversation API equals transformers' chat-template generation,
  for a Qwen-style ChatML template and SmolLM2's template (which concatenates message['content']);
- ``edge-export generate`` streams the package's text in a terminal and through a pipe, and refuses
  a damaged package before the runtime opens it; ``inspect`` describes a .litertlm.

The flatbuffer does not depend on the tokenizer or template, so every package here reuses the
session's float Llama export (conftest.py); only the packaging, reference and runtime runs are new.
"""

from __future__ import annotations

import io
import json
import shutil
import struct

import pytest

from llm_settings import CACHE, NEW_TOKENS, PREFILL, PROMPTS
from test_llm_refusals_and_package_metadata import LLAMA_BOS_TEMPLATE, QWEN_CHATML_TEMPLATE, SMOLLM2_TEMPLATE

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")]


def _folder_with_tokenizer(llm_exports, tmp_path, name, *, template, bos=False, bos_named=True):
    from testing_language_models import train_tokenizer

    folder = tmp_path / name
    shutil.copytree(llm_exports("llama").folder, folder)
    (folder / "chat_template.jinja").unlink(missing_ok=True)  # the copied tokenizer's: this one's is saved below, or none
    tokenizer = train_tokenizer(chat_template=template, prepend_bos=bos)
    if not bos_named:
        tokenizer.bos_token = None  # as in Qwen2's tokenizer_config.json: bos_token null, the post-processor adds it anyway
    tokenizer.save_pretrained(folder)
    return folder


def _context(folder, work, prompts=PROMPTS):
    from edge_export.llm.options import LanguageModelOptions
    from edge_export.llm.run import prepare, reference_context

    options = LanguageModelOptions(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS, prompts=prompts)
    src, tokenizer, template, meta = prepare(str(folder), work, prompts, options)
    return reference_context(src, tokenizer, template, meta, prompts, options, work)


def _transformers_chat(folder, message):
    """transformers' own chat generation, without edge-export's code: apply_chat_template + generate, greedy."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    text = tokenizer.apply_chat_template([{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=tokenizer.pad_token_id)
    generated = out[0, ids.shape[1]:].tolist()
    if generated and generated[-1] == tokenizer.eos_token_id:
        generated = generated[:-1]
    return tokenizer.decode(generated)


def _conversation_reply(litertlm, message):
    """The runtime's Conversation API, without edge-export's code."""
    import litert_lm

    with litert_lm.Engine(str(litertlm), backend=litert_lm.Backend.CPU(thread_count=1)) as engine:
        conv = engine.create_conversation(sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=NEW_TOKENS)
        reply = str(conv.send_message({"role": "user", "content": message}))
        conv.close()
    return reply


@pytest.fixture(scope="module")
def bos_export(llm_exports, tmp_path_factory):
    """A Qwen2-like folder (post-processor BOS, bos_token null, no chat template: with bos_token null
    transformers' chat prompt has no BOS while the runtime's has its start token, see
    test_a_chat_reply_the_runtime_cannot_match...; generation_config.json with two EOS ids) exported
    through the CLI, the float flatbuffer reused."""
    from edge_export.cli import main
    from edge_export.llm import run
    from edge_export.llm.export import FloatExport

    root = tmp_path_factory.mktemp("bos-export")
    folder = _folder_with_tokenizer(llm_exports, root, "qwen2-like", template=None, bos=True, bos_named=False)
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0], "do_sample": False}))
    float_bytes = llm_exports("llama").tflite.read_bytes()
    out = root / "out" / "m.tflite"
    prompts = root / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(run, "export_float_flatbuffer", lambda f, lengths, cache: FloatExport(float_bytes, tuple(lengths), cache))
        try:
            main([str(folder), "-o", str(out), "--prefill-lengths", f"{PREFILL // 2},{PREFILL}", "--cache-length", str(CACHE),
                  "--max-new-tokens", str(NEW_TOKENS), "--prompts", str(prompts), "--quiet"])
            code = 0
        except SystemExit as exc:
            code = exc.code
    return folder, out, code


def test_a_post_processor_bos_with_bos_token_null_exports_with_exit_0_and_one_bos(bos_export):
    import litert_lm
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, out, code = bos_export
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert code == 0 and report["verdict"] == "passed", report["language_model"]["attempts"][0]["prompts"]
    package = report["language_model"]["package"]
    assert package["start_token_id"] == 1 and package["stop_token_ids"] == [2, 0] and package["sampler"] == "greedy"
    attempt = report["language_model"]["attempts"][0]
    assert attempt["identical_texts"] == len(PROMPTS) and attempt["chat"] is None
    # independently: the runtime's text against transformers' generate() with the tokenizer's one BOS
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    with litert_lm.Engine(str(out.with_suffix(".litertlm")), backend=litert_lm.Backend.CPU(thread_count=1)) as engine:
        assert engine.bos_token_id == 1
        for prompt in PROMPTS:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
            assert ids[0, 0] == 1 and ids[0, 1] != 1
            generated = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=NEW_TOKENS, pad_token_id=0)[0, ids.shape[1]:].tolist()
            while generated and generated[-1] in (0, 2):
                generated = generated[:-1]
            session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=NEW_TOKENS)
            session.run_prefill([prompt])
            assert session.run_decode().texts[0] == tokenizer.decode(generated)
            session.close()


@pytest.mark.parametrize("name, template, bos", [("qwen-chatml", QWEN_CHATML_TEMPLATE, False), ("smollm2", SMOLLM2_TEMPLATE, False),
                                                 ("bos-in-template", LLAMA_BOS_TEMPLATE, True)])
def test_a_chat_turn_through_the_conversation_api_equals_transformers_chat_generation(llm_exports, tmp_path, name, template, bos):
    """bos-in-template: the tokenizer prepends <bos> (the package's start token) and the template
    prints {{ bos_token }}: one BOS in the runtime's chat prompt, as in transformers'."""
    from edge_export.llm.run import check_recipe

    folder = _folder_with_tokenizer(llm_exports, tmp_path, name, template=template, bos=bos)
    ctx = _context(folder, tmp_path / "work", PROMPTS[:1])
    result = check_recipe("none", llm_exports("llama").tflite.read_bytes(), ctx)
    chat = result.attempt.chat
    assert chat is not None and chat.passed, chat
    assert result.attempt.passed and ctx.meta.start_token_id == (1 if bos else None)
    packaged = tmp_path / "work" / "none.litertlm"
    reference = _transformers_chat(folder, PROMPTS[0])
    assert chat.reference_text == chat.runtime_text == reference != ""
    assert _conversation_reply(packaged, PROMPTS[0]) == reference  # the runtime, without edge-export's comparison


def test_a_template_without_the_prelude_is_what_the_runtime_got_wrong(llm_exports, tmp_path, monkeypatch):
    """The failure the prelude fixes, kept visible: SmolLM2's template packaged as it is fails in the
    Conversation API (its '+' on a list of parts)."""
    from edge_export.errors import RuntimeRunError
    from edge_export.llm import packaging
    from edge_export.llm.parity import runtime_chat_text

    folder = _folder_with_tokenizer(llm_exports, tmp_path, "raw", template=SMOLLM2_TEMPLATE)
    monkeypatch.setattr(packaging, "runtime_chat_template", lambda template, start_token_declared: template)
    meta = packaging.PackageMetadata(None, (2,), CACHE, True)
    raw = packaging.build_litertlm(llm_exports("llama").tflite.read_bytes(), folder / "tokenizer.json", meta, SMOLLM2_TEMPLATE)
    (tmp_path / "raw.litertlm").write_bytes(raw)
    with pytest.raises(RuntimeRunError, match="Conversation API"):
        runtime_chat_text(str(tmp_path / "raw.litertlm"), PROMPTS[0], NEW_TOKENS)


def test_a_chat_reply_the_runtime_cannot_match_fails_the_check_with_the_reason(llm_exports, tmp_path):
    """A tokenizer that prepends BOS with a template that does not print it: the runtime prepends
    the start token to the chat prompt too, transformers does not. Exit 1 naming the fix."""
    from edge_export.llm.run import check_recipe

    folder = _folder_with_tokenizer(llm_exports, tmp_path, "bos-no-template-bos", template=SMOLLM2_TEMPLATE, bos=True)
    attempt = check_recipe("none", llm_exports("llama").tflite.read_bytes(), _context(folder, tmp_path / "work", PROMPTS[:1])).attempt
    assert all(p.passed for p in attempt.prompts)
    assert not attempt.chat.passed and not attempt.passed
    assert "{{ bos_token }}" in attempt.chat.failing_reason


# ---- edge-export generate and inspect -------------------------------------------------------

def test_generate_through_a_pipe_prints_the_exported_models_text_and_tokens_per_second(llm_exports):
    from cli_harness import run_cli_subprocess

    run = llm_exports("llama")
    expected = run.report["language_model"]["attempts"][0]["prompts"][0]["reference_text"]
    result = run_cli_subprocess("generate", str(run.litertlm), PROMPTS[0], "--max-tokens", str(NEW_TOKENS))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == expected + "\n"  # stdout is the text alone
    assert "tokens/s" in result.stderr and "decode" in result.stderr


def test_generate_chat_is_one_turn_through_the_conversation_api(llm_exports):
    from cli_harness import run_cli_subprocess

    run = llm_exports("llama")
    expected = _transformers_chat(run.folder, PROMPTS[1])
    result = run_cli_subprocess("generate", str(run.litertlm), PROMPTS[1], "--chat", "--max-tokens", str(NEW_TOKENS))
    assert result.exit_code == 0, result.stderr
    assert result.stdout == expected + "\n"


def test_generate_streams_in_a_terminal(llm_exports):
    from cli_harness import run_cli_in_pty

    run = llm_exports("llama")
    expected = run.report["language_model"]["attempts"][0]["prompts"][0]["reference_text"]
    result = run_cli_in_pty("generate", str(run.litertlm), PROMPTS[0], "--max-tokens", str(NEW_TOKENS))
    assert result.exit_code == 0, result.output
    text = result.output.replace("\r\n", "\n")
    assert expected + "\n" in text and "tokens/s" in text and "Traceback" not in text


def test_generate_writes_and_flushes_each_piece_as_the_runtime_decodes_it(llm_exports):
    from edge_export.llm.generate import generate_text

    class Recorder:
        def __init__(self):
            self.events = []

        def write(self, text):
            self.events.append(("write", text))

        def flush(self):
            self.events.append(("flush", None))

    run, out = llm_exports("llama"), Recorder()
    result = generate_text(run.litertlm, PROMPTS[0], out, max_tokens=NEW_TOKENS)
    writes = [e for e in out.events if e[0] == "write"]
    assert len(writes) == result.pieces > 1
    assert out.events == [e for w in writes for e in (w, ("flush", None))]  # every piece flushed at once
    assert "".join(t for _, t in writes) == result.text
    assert result.decode_tokens_per_second and result.decode_tokens_per_second > 0


def _mutations(data: bytes) -> dict[str, bytes]:
    header_end = struct.unpack("<Q", data[24:32])[0]
    tflite_at = data.index(b"TFL3") - 4  # the TFLite model section starts 4 bytes before its identifier
    return {
        "empty": b"",
        "magic": b"NOTALITE" + data[8:],
        "version": data[:8] + struct.pack("<I", 9) + data[12:],
        "header end past the file": data[:24] + struct.pack("<Q", len(data) + 1) + data[32:],
        "truncated": data[: len(data) // 2],
        "header bytes": data[:32] + bytes(header_end - 32) + data[header_end:],
        "tflite bytes": data[:tflite_at] + b"\xff" * 64 + data[tflite_at + 64:],
    }


def test_generate_refuses_a_damaged_package_before_the_runtime_opens_it(llm_exports, tmp_path, monkeypatch):
    from edge_export.errors import EdgeExportError
    from edge_export.llm import parity
    from edge_export.llm.generate import generate_text

    def no_runtime():
        raise AssertionError("the runtime was reached")

    package = llm_exports("llama").litertlm  # exported (and run) before the runtime is taken away
    data = package.read_bytes()
    monkeypatch.setattr(parity, "import_runtime", no_runtime)
    for name, mutated in _mutations(data).items():
        path = tmp_path / f"{name.replace(' ', '-')}.litertlm"
        path.write_bytes(mutated)
        with pytest.raises(EdgeExportError) as info:
            generate_text(path, "hello", io.StringIO())
        assert info.value.exit_code == 2, (name, info.value)
        assert str(path) in str(info.value), name
    with pytest.raises(EdgeExportError, match="does not exist"):
        generate_text(tmp_path / "absent.litertlm", "hello", io.StringIO())
    with pytest.raises(EdgeExportError, match="--max-tokens 0") as info:  # usage, checked before the runtime too
        generate_text(package, "hello", io.StringIO(), max_tokens=0)
    assert info.value.exit_code == 2
    with pytest.raises(EdgeExportError, match="prompt is empty"):
        generate_text(package, "", io.StringIO())
    with pytest.raises(EdgeExportError, match="not a regular file"):
        generate_text(tmp_path, "hello", io.StringIO())


def test_generate_cli_errors_are_one_paragraph_with_exit_2(llm_exports, tmp_path):
    from cli_harness import run_cli_subprocess

    missing = run_cli_subprocess("generate", str(tmp_path / "absent.litertlm"), "hello")
    assert missing.exit_code == 2 and "does not exist" in missing.stderr and "Traceback" not in missing.stderr and missing.stdout == ""
    (tmp_path / "bad.litertlm").write_bytes(b"LITERTLM" + bytes(40))
    bad = run_cli_subprocess("generate", str(tmp_path / "bad.litertlm"), "hello")
    assert bad.exit_code == 2 and "not a valid .litertlm" in bad.stderr and bad.stdout == ""


def test_inspect_describes_a_litertlm(llm_exports):
    from cli_harness import run_cli_subprocess

    run = llm_exports("llama")
    result = run_cli_subprocess("inspect", str(run.litertlm), "--json")
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert [s["kind"] for s in info["sections"]] == ["LlmMetadataProto", "HF_Tokenizer_Zlib", "TFLiteModel"]
    assert info["stop_token_ids"] == [[2]] and info["max_num_tokens"] == CACHE and info["size"] == run.litertlm.stat().st_size
    assert info["chat_template"].startswith("{#- edge-export")  # the adapted template is what the package holds
    assert {s[0] for s in info["signatures"]} == {"prefill_16", "prefill_32", "decode"}
    assert info["tokenizer"].startswith("Hugging Face tokenizer.json (BPE")
    table = run_cli_subprocess("inspect", str(run.litertlm))
    assert table.exit_code == 0 and "TFLiteModel" in table.stdout and "start token: none" in table.stdout
