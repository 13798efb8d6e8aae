"""A model folder is untrusted (issue #36, point 3): its chat template and tokenizer files are loaded
in a confined child with a time and a memory limit, its safetensors headers are checked before any
library reads them. Through the CLI: exit 2, one paragraph naming the file, nothing written, fast.
And a fuzzer of tokenizer files (benchmarks/tokenizer_fuzz.py runs more)."""

from __future__ import annotations

import random
import shutil
import struct
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llm_settings import CACHE, NEW_TOKENS, PREFILL, PROMPTS  # noqa: E402
from model_folder_mutations import TEMPLATE_MUTANTS, mutate_tokenizer_files, split_safetensors  # noqa: E402

from edge_export.errors import EdgeExportError, UsageError  # noqa: E402
from edge_export.llm.tokenizer_check import MEMORY_LIMIT_ENV, TIME_LIMIT_ENV, check_tokenizer_bounded, tokenizer_limits  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.hostile]  # the first case pays for importing transformers and building the model

_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


@pytest.fixture(scope="module")
def llama_folder(llm_exports) -> Path:
    """The session's tiny Llama folder (conftest.py), shared with the export tests; never modified here."""
    return llm_exports.model_folder("llama")


def _copy(folder: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    return copy


def _export(run_cli, model: Path, out: Path):
    started = time.monotonic()
    result = run_cli(model, "-o", out / "m.tflite", "--prefill-lengths", str(PREFILL), "--cache-length", str(CACHE))
    return result, time.monotonic() - started


def _paragraph(result, out: Path) -> str:
    assert result.exit_code == 2, result.stderr
    assert "error:" in result.stderr and "Traceback" not in result.stderr
    paragraph = result.stderr.split("error:", 1)[1].split("(run with --debug")[0]
    assert "\n\n" not in paragraph.strip()
    assert not out.exists() or not any(out.iterdir())  # nothing written
    return " ".join(paragraph.split())


def test_a_looping_chat_template_is_exit_2_within_its_time_limit(run_cli, llama_folder, tmp_path, monkeypatch):
    """The security test's template (range(100000) twice) ran for 100 s until killed; now the child
    rendering it is killed at the limit (2 s here, 15 s by default) and the run is exit 2."""
    model = _copy(llama_folder, tmp_path)
    (model / "chat_template.jinja").write_text(TEMPLATE_MUTANTS["loop"], encoding="utf-8")
    monkeypatch.setenv(TIME_LIMIT_ENV, "2")
    result, seconds = _export(run_cli, model, tmp_path / "out")
    paragraph = _paragraph(result, tmp_path / "out")
    assert f"The chat template {model / 'chat_template.jinja'} did not finish within 2 s" in paragraph
    assert "rendering the chat template" in paragraph and TIME_LIMIT_ENV in paragraph and "remove or fix the template" in paragraph.lower()
    assert seconds < 30


def test_with_tokenizer_the_message_names_the_users_folder_not_the_work_copy(run_cli, llama_folder, tmp_path, monkeypatch):
    """--tokenizer: the export reads a private copy of the files; the error names the user's folder."""
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for name in _TOKENIZER_FILES:
        shutil.copy2(llama_folder / name, tokenizer / name)
    (tokenizer / "chat_template.jinja").write_text(TEMPLATE_MUTANTS["loop"], encoding="utf-8")
    monkeypatch.setenv(TIME_LIMIT_ENV, "2")
    out = tmp_path / "out"
    result = run_cli(llama_folder, "-o", out / "m.tflite", "--tokenizer", tokenizer, "--prefill-lengths", str(PREFILL), "--cache-length", str(CACHE))
    assert f"The chat template {tokenizer / 'chat_template.jinja'} did not finish within 2 s" in _paragraph(result, out)


def test_the_default_limits_leave_a_looping_run_room_to_end_within_30_s(monkeypatch):
    """The time limit is what a looping template costs; CLI start-up and imports come on top."""
    monkeypatch.delenv(TIME_LIMIT_ENV, raising=False)
    monkeypatch.delenv(MEMORY_LIMIT_ENV, raising=False)
    limits = tokenizer_limits()
    assert 5 <= limits.seconds <= 25 and limits.mib >= 1024


def test_a_template_building_a_huge_string_is_exit_2_at_its_memory_limit(run_cli, llama_folder, tmp_path, monkeypatch):
    model = _copy(llama_folder, tmp_path)
    (model / "chat_template.jinja").write_text(TEMPLATE_MUTANTS["huge_string"], encoding="utf-8")
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "512")
    result, seconds = _export(run_cli, model, tmp_path / "out")
    paragraph = _paragraph(result, tmp_path / "out")
    assert f"The chat template {model / 'chat_template.jinja'} needed more than its 512 MiB memory limit" in paragraph
    assert MEMORY_LIMIT_ENV in paragraph and seconds < 30


def test_a_bad_limit_setting_is_exit_2(run_cli, llama_folder, tmp_path, monkeypatch):
    monkeypatch.setenv(TIME_LIMIT_ENV, "soon")
    result, _ = _export(run_cli, llama_folder, tmp_path / "out")
    assert f"{TIME_LIMIT_ENV}='soon' is not a number from 1 to 3600" in _paragraph(result, tmp_path / "out")


def test_a_safetensors_header_length_of_2_to_the_62_is_exit_2_within_5_s(run_cli, llama_folder, tmp_path):
    model = _copy(llama_folder, tmp_path)
    weights = model / "model.safetensors"
    weights.write_bytes(struct.pack("<Q", 2**62) + weights.read_bytes()[8:])
    result, seconds = _export(run_cli, model, tmp_path / "out")
    paragraph = _paragraph(result, tmp_path / "out")
    assert f"{weights} is not a valid safetensors file: its header length is {2**62} bytes" in paragraph
    assert "save_pretrained(folder, safe_serialization=True)" in paragraph and seconds < 5


def test_safetensors_offsets_past_the_end_are_exit_2_within_5_s(run_cli, llama_folder, tmp_path):
    from model_folder_mutations import join_safetensors

    model = _copy(llama_folder, tmp_path)
    weights = model / "model.safetensors"
    header, payload = split_safetensors(weights.read_bytes())
    name = sorted(k for k in header if k != "__metadata__")[0]
    begin, end = header[name]["data_offsets"]
    header[name]["data_offsets"] = [begin + len(payload), end + len(payload)]
    weights.write_bytes(join_safetensors(header, payload))
    result, seconds = _export(run_cli, model, tmp_path / "out")
    paragraph = _paragraph(result, tmp_path / "out")
    assert f"{weights} is not a valid safetensors file: tensor '{name}' ends at byte {end + len(payload)}" in paragraph
    assert seconds < 5


def test_a_clean_folder_passes_both_checks(llama_folder):
    from testing_language_models import CHAT_TEMPLATE

    from edge_export.llm.safetensors_header import check_weight_files

    (header,) = check_weight_files(llama_folder)
    assert header.path.name == "model.safetensors" and len(header.tensors) > 10
    started = time.monotonic()
    assert check_tokenizer_bounded(llama_folder) == CHAT_TEMPLATE
    assert time.monotonic() - started < 10


def _prompt_check():
    from edge_export.llm.options import LanguageModelOptions
    from edge_export.llm.run import check_prompt_lengths

    options = LanguageModelOptions(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS)
    return lambda tokenizer: check_prompt_lengths(tokenizer, PROMPTS, options)


def test_fuzzed_tokenizer_files_end_in_exit_2_or_success_within_the_bound(llama_folder, tmp_path, monkeypatch):
    """30 seeded mutants of tokenizer.json, tokenizer_config.json and the chat template (JSON fields
    retyped or removed, bytes cut or changed, broken and hostile templates): each bounded check
    returns the template or raises an exit-2 error, within its time limit; never another exception."""
    monkeypatch.setenv(TIME_LIMIT_ENV, "5")
    monkeypatch.setenv(MEMORY_LIMIT_ENV, "1024")
    originals = {name: (llama_folder / name).read_bytes() for name in _TOKENIZER_FILES}
    rng, check, outcomes = random.Random(36), _prompt_check(), {"accepted": 0, "refused": 0}
    for case in range(30):
        kind, files = mutate_tokenizer_files(originals, rng)
        folder = tmp_path / f"case{case}"
        folder.mkdir()
        shutil.copy2(llama_folder / "config.json", folder / "config.json")
        for name, data in files.items():
            (folder / name).write_bytes(data)
        started = time.monotonic()
        try:
            template = check_tokenizer_bounded(folder, check)
            assert template is None or isinstance(template, str), kind
            outcomes["accepted"] += 1
        except EdgeExportError as exc:
            assert exc.exit_code == 2 and exc.hint, (kind, exc)
            outcomes["refused"] += 1
        assert time.monotonic() - started < 5 + 5, kind  # the limit, plus a fork and a loaded machine
    assert outcomes["accepted"] >= 5 and outcomes["refused"] >= 5, outcomes


def test_an_attribute_escape_in_the_template_is_refused_by_jinjas_sandbox(llama_folder, tmp_path):
    folder = _copy(llama_folder, tmp_path)
    (folder / "chat_template.jinja").write_text(TEMPLATE_MUTANTS["attribute_escape"], encoding="utf-8")
    with pytest.raises(UsageError, match="chat template does not render a user message"):
        check_tokenizer_bounded(folder)
