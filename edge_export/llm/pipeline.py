"""``run_text_generation``: the chain for ``--task text-generation``.

    check options, size the prefill and cache (sizing.py) and read the prompts -> prepare the model directory (safetensors, tokenizer, chat template)
    -> export the float flatbuffer once (export.py) -> transformers' reference (parity.py)
    -> for each recipe (one, or auto's smallest first): quantize (recipes.py), package
       (packaging.py), judge (evaluation.py) -> measure -> write every artifact together

Artifacts (``<stem>.tflite``, ``<stem>.litertlm``, ``<stem>.report.json``/``.md``, ``--junit``) are
committed together at the end (atomic_files.ArtifactSet): a failed run writes nothing.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable

from ..errors import UsageError
from ..stages.clock import StageClock
from .options import LanguageModelOptions, check_options, read_prompts
from .result import LanguageModelResult

__all__ = ["LanguageModelResult", "run_text_generation"]


def output_paths(source: str, output: str | Path | None) -> dict[str, Path]:
    """``<stem>.tflite`` (default: beside the model folder, named after it), ``.litertlm`` and the reports."""
    if output is None:
        from ..loading.sources import is_module_reference

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
    from ..stages.run_shell import run_shell

    options = options or LanguageModelOptions()
    check_options(options)
    options, sizing = _sized(source, options)
    check_options(options)
    prompts = read_prompts(options)
    paths = output_paths(source, output)
    with run_shell(*_outputs_and_inputs(source, paths, options)) as shell:
        shell.make_folders(paths["tflite"], *([options.junit] if options.junit else []))
        with tempfile.TemporaryDirectory(prefix="edge-export-llm-") as work:
            from .run import export_and_check

            return export_and_check(source, Path(work), paths, prompts, options, StageClock(on_stage), sizing)


def _sized(source: str, options: LanguageModelOptions):
    """``options`` with the lengths left out sized from the folder's config and weights (sizing.py)."""
    from ..errors import ModelLoadError
    from .sizing import resolve_lengths
    from .task import read_config

    folder = Path(source)
    try:
        config = read_config(folder) if folder.is_dir() else None
    except ModelLoadError:
        config = None  # prepare() refuses the folder with the reason
    return resolve_lengths(folder if config is not None else None, config, options)


def _outputs_and_inputs(source: str, paths: dict[str, Path], options: LanguageModelOptions) -> tuple[list, list]:
    """No artifact may replace what the run reads: the model folder's files, the tokenizer, the prompts."""
    from ..loading.sources import is_module_reference

    outputs = [("the .tflite (-o/--output)", paths["tflite"]), ("the .litertlm (named after -o)", paths["litertlm"]),
               ("the JSON report (named after -o)", paths["json"]), ("the Markdown report (named after -o)", paths["md"])]
    if options.junit:
        outputs.append(("--junit", Path(options.junit)))
    inputs = [] if is_module_reference(source) else [("the model folder", Path(source))]
    inputs += [(label, Path(value)) for label, value in (("--tokenizer", options.tokenizer), ("--prompts", options.prompts_file)) if value]
    return outputs, inputs
