"""Tiny decoder language models for the llm tests, built and exported once per test session.

Each family (testing_language_models.FAMILIES: Llama, Qwen3, Gemma 3; 2 layers, hidden 64, a BPE
tokenizer trained here) is saved with save_pretrained and exported once through the product's own
chain at float32 (prefill 32, cache 128): Llama through the CLI (with a second prefill signature
of 16, both checked), the others through ``edge_export.llm.export_language_model``. Recipe tests quantize that one float flatbuffer.
Under pytest-xdist the workers share one export of each family (the first to ask builds it, under a
file lock, in the run's shared temporary folder), as tests/conftest.py shares the small CNN's.
"""

from __future__ import annotations

import json
import os
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
    """Exports each family the first time a test asks for it: in ``root`` (shared by the xdist
    workers, each build under its own lock); ``work`` is this process's own folder."""

    def __init__(self, root: Path, work: Path) -> None:
        self.root, self.work = root, work
        self._done: dict[str, ExportedFamily] = {}
        self._contexts: dict[str, Any] = {}

    def _lock(self, name: str):
        from filelock import FileLock

        return FileLock(str(self.root / f"{name}.lock"))

    def model_folder(self, family: str) -> Path:
        from testing_language_models import build_decoder

        folder = self.root / "models" / family
        with self._lock(f"model-{family}"):
            if not (folder / "built").exists():  # config.json alone may be a half-built folder
                build_decoder(family, folder)
                (folder / "built").touch()
        return folder

    def __call__(self, family: str) -> ExportedFamily:
        if family not in self._done:
            self._done[family] = self._shared_export(family)
        return self._done[family]

    def _shared_export(self, family: str) -> ExportedFamily:
        """The family's export, made by whichever worker asked first; its exit code kept beside it."""
        exit_code_file = self.root / "out" / family / "exit_code"
        with self._lock(f"export-{family}"):
            if exit_code_file.exists():
                return self._exported(family, int(exit_code_file.read_text()))
            exported = self._export(family)
            exit_code_file.parent.mkdir(parents=True, exist_ok=True)
            exit_code_file.write_text(str(exported.exit_code))
            return exported

    def _exported(self, family: str, code: int) -> ExportedFamily:
        out = self.root / "out" / family / f"{family}.tflite"
        report_json = out.with_suffix(".report.json")
        report = json.loads(report_json.read_text()) if report_json.exists() else {}
        return ExportedFamily(family, self.model_folder(family), out, out.with_suffix(".litertlm"), report_json, report, code)

    def _export(self, family: str) -> ExportedFamily:
        folder = self.model_folder(family)
        out = self.root / "out" / family / f"{family}.tflite"
        prompts = self.root / f"prompts-{family}.txt"  # the family's own: workers may export side by side
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
        return self._exported(family, code)

    def context(self, family: str, prompts: tuple[str, ...] = PROMPTS):
        """transformers' reference runs and the checked source, for judging recipes directly."""
        key = (family, prompts)
        if key not in self._contexts:
            from edge_export.llm.options import LanguageModelOptions
            from edge_export.llm.run import prepare, reference_context

            options = LanguageModelOptions(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS, prompts=prompts)
            work = self.work / family / str(len(self._contexts))
            work.mkdir(parents=True, exist_ok=True)
            src, tokenizer, template, meta = prepare(str(self.model_folder(family)), work, prompts, options)
            self._contexts[key] = reference_context(src, tokenizer, template, meta, prompts, options, work)
        return self._contexts[key]


@pytest.fixture(scope="session")
def llm_exports(tmp_path_factory) -> _Exports:
    work = tmp_path_factory.mktemp("llm-work")
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _Exports(tmp_path_factory.mktemp("llm"), work)
    shared = tmp_path_factory.getbasetemp().parent / "llm"  # this run's folder, above every worker's own
    shared.mkdir(exist_ok=True)
    return _Exports(shared, work)


@pytest.fixture(scope="session")
def report_schema() -> dict:
    return json.loads((Path(__file__).resolve().parents[2] / "edge_export" / "reports" / "report.schema.json").read_text())
