"""The language model and its tokenizer, checked before any export work.

A model directory is read with safetensors weights only: ``pytorch_model.bin`` and other pickled
weights can run code when loaded, so they are refused unless ``--trust-pickle`` (then loaded by
transformers and saved again as safetensors in a private work folder, which is what the export
reads). The tokenizer must be a fast tokenizer (``tokenizer.json``, which the .litertlm carries
and the LiteRT-LM runtime tokenizes with); a chat template, when the tokenizer has one, must render.
A ``package.module:attr`` reference returns a transformers causal LM (its tokenizer comes from
``--tokenizer``); it is saved with ``save_pretrained`` into the work folder, like a directory.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ModelLoadError, UsageError, first_line
from .safetensors_header import check_weight_files
from .task import check_causal_lm_config

__all__ = ["LanguageModelSource", "PICKLE_WEIGHT_SUFFIXES", "prepare_model_directory", "load_tokenizer", "check_chat_template"]

PICKLE_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


@dataclass(frozen=True)
class LanguageModelSource:
    """A directory export_hf can read: config.json, *.safetensors, tokenizer files."""

    source: str  # what the user named (a folder or package.module:attr)
    folder: Path  # the directory exported (the user's, or a work copy)
    config: dict
    class_name: str
    weights_format: str  # "safetensors", or "pickle" (converted, --trust-pickle)


def _weight_files(folder: Path) -> tuple[list[Path], list[Path]]:
    files = [p for p in folder.iterdir() if p.is_file()]
    safe = [p for p in files if p.name.endswith(".safetensors")]
    pickled = [p for p in files if p.suffix in PICKLE_WEIGHT_SUFFIXES and "training_args" not in p.name]
    return safe, pickled


def _check_tokenizer_files(folder: Path, tokenizer: Path | None) -> Path:
    where = tokenizer or folder
    if not (where / "tokenizer.json").is_file():
        what = "tokenizer.model (SentencePiece) only" if (where / "tokenizer.model").is_file() else "no tokenizer.json"
        raise ModelLoadError(
            f"{where} has {what}: a language model export needs the Hugging Face fast tokenizer file "
            "tokenizer.json (the .litertlm carries it and the LiteRT-LM runtime tokenizes with it).",
            "Save the tokenizer beside the model with AutoTokenizer.from_pretrained(...).save_pretrained(folder), "
            "or pass its folder with --tokenizer.",
        )
    return where


def _convert_pickled(folder: Path, work: Path, class_name: str) -> None:
    """--trust-pickle: load the pickled weights with transformers and save them as safetensors."""
    from transformers import AutoModelForCausalLM

    try:
        model = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=False, dtype="float32")
        model.save_pretrained(work, safe_serialization=True)
    except Exception as exc:  # boundary: transformers reading a user's pickle
        raise ModelLoadError(f"Cannot load the pickled weights of {folder}: {first_line(exc)}.", "Check the files.") from exc


def prepare_model_directory(source: str, work: Path, *, tokenizer: str | None = None, trust_pickle: bool = False) -> LanguageModelSource:
    """Check ``source`` and return the directory to export (``work`` when a copy is needed)."""
    from ..loading.sources import is_module_reference

    if is_module_reference(source):
        return _from_reference(source, work, tokenizer)
    folder = Path(source)
    if not folder.is_dir():
        raise ModelLoadError(
            f"{source} is not a folder: --task text-generation exports a Hugging Face model directory "
            "(config.json, *.safetensors, tokenizer.json) or a package.module:attr returning a causal LM.",
            "Save the model with save_pretrained(folder) and its tokenizer beside it.",
        )
    check_weight_files(folder)  # before transformers or litert-torch opens a weight file
    config = check_causal_lm_config(folder)
    tok_folder = _check_tokenizer_files(folder, Path(tokenizer) if tokenizer else None)
    safe, pickled = _weight_files(folder)
    class_name = (config.get("architectures") or [config.get("model_type", "?")])[0]
    if safe:
        if tok_folder == folder:
            return LanguageModelSource(source, folder, config, class_name, "safetensors")
        _copy_model(folder, work, tok_folder)
        return LanguageModelSource(source, work, config, class_name, "safetensors")
    if not pickled:
        raise ModelLoadError(f"{folder} holds no weights (*.safetensors).", "Save the model with save_pretrained(folder).")
    if not trust_pickle:
        names = ", ".join(p.name for p in pickled[:3])
        raise ModelLoadError(
            f"{folder} has its weights only in pickle format ({names}); loading a pickle can run arbitrary code, "
            "so edge-export reads safetensors only.",
            "Save the model with save_pretrained(folder, safe_serialization=True), or pass --trust-pickle if you trust the files.",
        )
    _copy_model(folder, work, tok_folder, weights=False)
    _convert_pickled(folder, work, class_name)
    return LanguageModelSource(source, work, config, class_name, "pickle")


def _copy_model(folder: Path, work: Path, tok_folder: Path, *, weights: bool = True) -> None:
    work.mkdir(parents=True, exist_ok=True)
    for p in folder.iterdir():
        if p.is_file() and (weights or not (p.name.endswith(".safetensors") or p.suffix in PICKLE_WEIGHT_SUFFIXES)):
            shutil.copy2(p, work / p.name)
    _copy_tokenizer(tok_folder, work)


def _copy_tokenizer(tok_folder: Path, work: Path) -> None:
    for name in _TOKENIZER_FILES:
        if (tok_folder / name).is_file():
            shutil.copy2(tok_folder / name, work / name)


def _from_reference(source: str, work: Path, tokenizer: str | None) -> LanguageModelSource:
    from ..loading.sources import load_model

    if not tokenizer:
        raise UsageError(
            f"{source} is a module reference: its tokenizer cannot be found beside it.",
            "Pass the folder holding tokenizer.json with --tokenizer.",
        )
    tok_folder = _check_tokenizer_files(Path(tokenizer), None)
    module = load_model(source).module
    if not callable(getattr(module, "save_pretrained", None)) or not hasattr(module, "config"):
        raise ModelLoadError(
            f"{source} returned a {type(module).__name__}, not a transformers causal language model.",
            "Return a *ForCausalLM model (e.g. LlamaForCausalLM(config)).",
        )
    work.mkdir(parents=True, exist_ok=True)
    module.save_pretrained(work, safe_serialization=True)
    config = check_causal_lm_config(work)
    _copy_tokenizer(tok_folder, work)
    return LanguageModelSource(source, work, config, type(module).__name__, "safetensors")


def load_tokenizer(folder: Path) -> Any:
    """The fast tokenizer saved in ``folder``."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    except MemoryError:  # the bounded check's memory limit: reported as such, not as a bad file
        raise
    except Exception as exc:  # boundary: tokenizer files written by anyone
        raise ModelLoadError(f"Cannot load the tokenizer in {folder}: {first_line(exc)}.", "Save it again with save_pretrained().") from exc


def check_chat_template(tokenizer: Any) -> str | None:
    """The tokenizer's chat template (None when it has none), after checking that it renders a
    user turn; one that does not render is exit 2 (the runtime would fail on the phone)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return None
    if not isinstance(template, str):
        raise UsageError("The tokenizer has several named chat templates; edge-export packages one.", "Keep one template in chat_template.jinja.")
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hello"}], tokenize=False, add_generation_prompt=True)
    except MemoryError:  # the bounded check's memory limit: reported as such, not as a bad template
        raise
    except Exception as exc:  # boundary: the template is user-written Jinja
        raise UsageError(
            f"The tokenizer's chat template does not render a user message: {first_line(exc)}.",
            "Fix chat_template.jinja (or chat_template in tokenizer_config.json), or remove it to package none.",
        ) from exc
    if not isinstance(text, str) or "hello" not in text:
        raise UsageError("The tokenizer's chat template renders without the user's message.", "Fix chat_template.jinja so it prints message['content'].")
    return template
