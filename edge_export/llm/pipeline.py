"""``run_text_generation``: the chain for ``--task text-generation``.

    check options and prompts -> prepare the model directory (safetensors, tokenizer, chat template)
    -> export the float flatbuffer once (export.py) -> transformers' reference (parity.py)
    -> for each recipe (one, or auto's smallest first): quantize (recipes.py), package
       (packaging.py), judge (evaluation.py) -> measure -> write every artifact together

Artifacts (``<stem>.tflite``, ``<stem>.litertlm``, ``<stem>.report.json``/``.md``, ``--junit``) are
committed together at the end (atomic_files.ArtifactSet): a failed run writes nothing.
"""

from __future__ import annotations

import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import UsageError
from ..reports.model import StageTiming
from .options import LanguageModelOptions, check_options, read_prompts

__all__ = ["LanguageModelResult", "run_text_generation"]


@dataclass(frozen=True)
class LanguageModelResult:
    tflite_path: Path
    litertlm_path: Path
    report_json_path: Path
    report_md_path: Path
    run_report: Any = field(repr=False)  # reports.model.RunReport

    @property
    def report(self) -> dict:
        from ..reports.serialize import to_json_value

        return to_json_value(self.run_report)

    @property
    def verdict(self) -> str:
        return self.run_report.verdict

    @property
    def exit_code(self) -> int:
        return self.run_report.exit_code


class _Stages:
    def __init__(self, on_stage: Callable[[str], None] | None) -> None:
        self.times: list[StageTiming] = []
        self._on_stage = on_stage

    @contextmanager
    def run(self, name: str, label: str) -> Iterator[None]:
        if self._on_stage:
            self._on_stage(label)
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times.append(StageTiming(name, round(time.perf_counter() - start, 4)))


def output_paths(source: str, output: str | Path | None) -> dict[str, Path]:
    """``<stem>.tflite`` (default: beside the model folder, named after it), ``.litertlm`` and the reports."""
    if output is None:
        from ..loading import is_module_reference

        if is_module_reference(source):
            tflite = Path.cwd() / f"{source.split(':')[-1].split('.')[-1]}.tflite"
        else:
            tflite = Path(f"{Path(source).resolve()}.tflite")  # not with_suffix: "Qwen2.5-0.5B" has dots
    else:
        tflite = Path(output)
        if tflite.suffix != ".tflite":
            raise UsageError(f"-o {output}: the language model's output must end in .tflite.", "The .litertlm is written beside it.")
    stem = tflite.with_suffix("")
    return {"tflite": tflite, "litertlm": Path(f"{stem}.litertlm"), "json": Path(f"{stem}.report.json"), "md": Path(f"{stem}.report.md")}


def run_text_generation(
    source: str, output: str | Path | None = None, options: LanguageModelOptions | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> LanguageModelResult:
    """Export the causal LM ``source`` to .tflite + .litertlm, prove it against transformers and
    write the reports. Bad input raises an EdgeExportError (exit 2 or 3) with nothing written."""
    from ..atomic_files import check_writable_folder, remove_created_folders

    options = options or LanguageModelOptions()
    check_options(options)
    prompts = read_prompts(options)
    paths = output_paths(source, output)
    created: list[Path] = []
    check_writable_folder(paths["tflite"], created)
    if options.junit:
        check_writable_folder(Path(options.junit), created)
    try:
        with tempfile.TemporaryDirectory(prefix="edge-export-llm-") as work:
            from .run import export_and_check

            return export_and_check(source, Path(work), paths, prompts, options, _Stages(on_stage))
    except BaseException:
        remove_created_folders(created)
        raise
