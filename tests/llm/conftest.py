"""Tiny decoder language models for the llm tests, built and exported once per test session.

Each family (testing_language_models.FAMILIES: Llama, Qwen3, Gemma 3; 2 layers, hidden 64, a BPE
tokenizer trained here) is saved with save_pretrained and exported once through the product's own
chain at float32 (prefill 32, cache 128): Llama through the CLI (with a second prefill signature
of 16, both checked), the others through ``edge_export.llm.export_language_model``. Recipe tests quantize that one float flatbuffer.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # llm_settings
from llm_settings import CACHE, NEW_TOKENS, PREFILL, PROMPTS  # noqa: E402


@dataclass
class ExportedFamily:
    family: str
    folder: Path  # the saved model (config.json, model.safetensors, tokenizer files)
    tflite: Path
    litertlm: Path
    report_json: Path
    report: dict
    exit_code: int


class _Exports:
    """Exports each family the first time a test asks for it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._done: dict[str, ExportedFamily] = {}
        self._contexts: dict[str, Any] = {}

    def model_folder(self, family: str) -> Path:
        from testing_language_models import build_decoder

        folder = self.root / "models" / family
        if not (folder / "config.json").exists():
            build_decoder(family, folder)
        return folder

    def __call__(self, family: str) -> ExportedFamily:
        if family not in self._done:
            self._done[family] = self._export(family)
        return self._done[family]

    def _export(self, family: str) -> ExportedFamily:
        folder = self.model_folder(family)
        out = self.root / "out" / family / f"{family}.tflite"
        prompts = self.root / "prompts.txt"
        prompts.write_text("\n".join(PROMPTS) + "\n", encoding="utf-8")
        common = dict(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS)
        if family == "llama":  # one family through the real CLI
            from edge_export.cli import main

            try:
                main([str(folder), "-o", str(out), "--prefill-lengths", f"{PREFILL // 2},{PREFILL}", "--cache-length", str(CACHE),
                      "--max-new-tokens", str(NEW_TOKENS), "--prompts", str(prompts), "--junit", str(out.with_suffix(".junit.xml")), "--write-tflite", "--quiet"])
                code = 0
            except SystemExit as exc:
                code = exc.code
        else:
            from edge_export.llm import export_language_model

            code = export_language_model(str(folder), out, prompts=PROMPTS, write_tflite=True, **common).exit_code
        report_json = out.with_suffix(".report.json")
        report = json.loads(report_json.read_text()) if report_json.exists() else {}
        return ExportedFamily(family, folder, out, out.with_suffix(".litertlm"), report_json, report, code)

    def context(self, family: str, prompts: tuple[str, ...] = PROMPTS):
        """transformers' reference runs and the checked source, for judging recipes directly."""
        key = (family, prompts)
        if key not in self._contexts:
            from edge_export.llm.options import LanguageModelOptions
            from edge_export.llm.run import prepare, reference_context

            options = LanguageModelOptions(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS, prompts=prompts)
            work = self.root / "work" / family / str(len(self._contexts))
            work.mkdir(parents=True, exist_ok=True)
            src, tokenizer, template, meta = prepare(str(self.model_folder(family)), work, prompts, options)
            self._contexts[key] = reference_context(src, tokenizer, template, meta, prompts, options, work)
        return self._contexts[key]


@pytest.fixture(scope="session")
def llm_exports(tmp_path_factory) -> _Exports:
    return _Exports(tmp_path_factory.mktemp("llm"))


@pytest.fixture(scope="session")
def report_schema() -> dict:
    return json.loads((Path(__file__).resolve().parents[2] / "edge_export" / "reports" / "report.schema.json").read_text())
