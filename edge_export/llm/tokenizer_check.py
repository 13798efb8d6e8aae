"""The tokenizer files and the chat template of a model folder are someone else's code: loaded and
rendered first in a confined child process with a time and a memory limit.

A chat template is Jinja. transformers renders it in jinja2's ``ImmutableSandboxedEnvironment``,
which stops attribute-access escapes but not a template that loops ``range(100000)`` twice (one core
at 100% for ever) or builds a string of many gigabytes; ``tokenizer.json`` is parsed by native code.
So the first load of the tokenizer, the one rendering of the template and the tokenizing of the
prompts happen in a child of ``sandbox.run_confined`` (Landlock: it may write only its private
folder; no network), which is killed at ``EDGE_EXPORT_TOKENIZER_TIME_LIMIT`` seconds (default 15)
and may map at most ``EDGE_EXPORT_TOKENIZER_MEMORY_LIMIT`` MiB (default 2048) beyond what it
inherited. Either limit hit is exit 2 naming the file and the step. The parent then loads the
tokenizer again (the same files, known to load within the limits) and never renders the template.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import EdgeExportError, ModelLoadError, UsageError, first_line

__all__ = ["TIME_LIMIT_ENV", "MEMORY_LIMIT_ENV", "TokenizerLimits", "tokenizer_limits", "check_tokenizer_bounded", "chat_prompt_ids_bounded"]

TIME_LIMIT_ENV = "EDGE_EXPORT_TOKENIZER_TIME_LIMIT"  # seconds
MEMORY_LIMIT_ENV = "EDGE_EXPORT_TOKENIZER_MEMORY_LIMIT"  # MiB
# Measured: a 262k-token BPE tokenizer.json (28 MB, Gemma 3's size) loads in 7 s on 2 cores at
# load 6.5 (child peak RSS 705 MiB), the tiny test tokenizer in 0.2 s; a template renders in
# milliseconds. 15 s leaves twice that and still ends a looping template's run within 30 s.
_DEFAULT_SECONDS, _DEFAULT_MIB = 15.0, 2048
# The steps the child reports, in order: the last one reached is the one a limit stopped.
_LOADING, _RENDERING, _TOKENIZING = "loading the tokenizer", "rendering the chat template", "tokenizing the prompts"


@dataclass(frozen=True)
class TokenizerLimits:
    seconds: float  # wall clock
    mib: int  # address space beyond what the child inherits


def _number(name: str, default: float, low: float, high: float) -> float:
    text = os.environ.get(name)
    if text is None or not text.strip():
        return default
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not low <= value <= high:  # also NaN
        raise UsageError(f"{name}={text!r} is not a number from {low:g} to {high:g}.", f"Unset it (default {default:g}) or give a number in that range.")
    return value


def tokenizer_limits() -> TokenizerLimits:
    """The limits of the bounded check, from the environment (exit 2 for a bad value)."""
    return TokenizerLimits(_number(TIME_LIMIT_ENV, _DEFAULT_SECONDS, 1, 3600), int(_number(MEMORY_LIMIT_ENV, _DEFAULT_MIB, 64, 1 << 20)))


def _checked_in_child(folder: Path, shown: Path, check_prompts: Callable[[Any], None] | None, channel: Any) -> str | None:
    """Runs in the confined child: every step that reads the tokenizer files or runs the template."""
    from .loading import check_chat_template, load_tokenizer

    os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is fetched for a folder (and the child has no network)
    step = _LOADING
    try:
        channel.stage(step)
        tokenizer = load_tokenizer(folder)
        step = _RENDERING
        channel.stage(step)
        template = check_chat_template(tokenizer)
        step = _TOKENIZING
        channel.stage(step)
        if check_prompts is not None:
            check_prompts(tokenizer)
        return template
    except (EdgeExportError, MemoryError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # boundary: any failure (a Rust panic is a BaseException) of someone else's files
        raise ModelLoadError(
            f"The tokenizer in {shown} failed while {step}: {first_line(exc, with_type=True)}.",
            "Check tokenizer.json and tokenizer_config.json, or save the tokenizer again with save_pretrained().",
        ) from None


# What a tokenizer load imports (transformers' tokenizer classes import torch); imported here once,
# the child inherits it instead of spending its time limit on it (and the parent's load reuses it).
_PRELOAD = ("torch", "transformers.modeling_utils", "jinja2.sandbox", "transformers.tokenization_utils_tokenizers",
            "transformers.utils.chat_template_utils", "transformers.models.auto.tokenization_auto", "transformers.video_utils")


def _preload() -> None:
    import importlib

    for name in _PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # the child reports it the way the load does


def check_tokenizer_bounded(folder: Path, check_prompts: Callable[[Any], None] | None = None, *, shown: Path | None = None) -> str | None:
    """Load the tokenizer in ``folder``, check its chat template renders and run ``check_prompts`` on
    it, in a confined child within the limits; the template (None without one). Exit 2 for a bad
    tokenizer or template, and for either limit hit. ``shown``: the folder the user named, for the
    messages (``folder`` may be a private work copy)."""
    limits = tokenizer_limits()
    shown = shown or folder
    if not hasattr(os, "fork"):  # Windows: no child to bound; the checks run here as before
        from .loading import check_chat_template, load_tokenizer

        tokenizer = load_tokenizer(folder)
        template = check_chat_template(tokenizer)
        if check_prompts is not None:
            check_prompts(tokenizer)
        return template
    from ..processes.sandbox import LimitExceeded, python_reads, run_confined

    _preload()
    steps: list[str] = []
    try:
        # reads too are confined: Python's own files and the folder, nothing else of the user's
        template, _ = run_confined(_checked_in_child, folder, shown, check_prompts, on_stage=steps.append,
                                   time_limit=limits.seconds, memory_limit=limits.mib << 20,
                                   reads=(*python_reads(), str(folder)))
    except LimitExceeded as exc:
        step = steps[-1] if steps and steps[-1] in (_LOADING, _RENDERING, _TOKENIZING) else _LOADING
        raise _limit_error(shown, step, exc, limits) from None
    except EdgeExportError:
        raise
    except RuntimeError as exc:  # the child ended some other way (its text, never an object, came back)
        raise ModelLoadError(f"The tokenizer check of {shown} failed: {first_line(exc)}.", "Check tokenizer.json and tokenizer_config.json.") from None
    if template is not None and not isinstance(template, str):
        raise ModelLoadError(f"The tokenizer check of {shown} returned a {type(template).__name__}.", "Report this with the folder.")
    return template


def _chat_ids(folder: Path, message: str, channel: Any = None) -> tuple[int, ...]:
    """transformers' chat prompt for one user message, as ``apply_chat_template`` tokenizes it
    (add_generation_prompt, no special tokens added beyond the template's)."""
    from .loading import load_tokenizer

    os.environ["HF_HUB_OFFLINE"] = "1"
    if channel is not None:
        channel.stage(_RENDERING)
    tokenizer = load_tokenizer(folder)
    text = tokenizer.apply_chat_template([{"role": "user", "content": message}], tokenize=False, add_generation_prompt=True)
    return tuple(int(i) for i in tokenizer(text, add_special_tokens=False).input_ids)


def chat_prompt_ids_bounded(folder: Path, message: str, *, shown: Path | None = None) -> tuple[int, ...]:
    """The chat-template prompt ids of one user ``message`` (the chat parity's reference), rendered
    in a confined child within the same limits: the parent never renders the template."""
    limits, shown = tokenizer_limits(), shown or folder
    if not hasattr(os, "fork"):
        return _chat_ids(folder, message)
    from ..processes.sandbox import LimitExceeded, run_confined

    try:
        ids, _ = run_confined(_chat_ids, folder, message, time_limit=limits.seconds, memory_limit=limits.mib << 20)
    except LimitExceeded as exc:
        raise _limit_error(shown, _RENDERING, exc, limits) from None
    except EdgeExportError:
        raise
    except RuntimeError as exc:
        raise ModelLoadError(f"The chat template of {shown} failed on a user message: {first_line(exc)}.", "Fix the chat template.") from None
    if not (isinstance(ids, tuple) and all(isinstance(i, int) for i in ids)):
        raise ModelLoadError(f"The chat-template check of {shown} returned a {type(ids).__name__}.", "Report this with the folder.")
    return ids


def _named_file(folder: Path, step: str) -> str:
    if step == _RENDERING:
        jinja = folder / "chat_template.jinja"
        return f"the chat template {jinja}" if jinja.is_file() else f"the chat template in {folder / 'tokenizer_config.json'}"
    return f"the tokenizer files in {folder} (tokenizer.json, tokenizer_config.json)"


def _limit_error(folder: Path, step: str, exc: Any, limits: TokenizerLimits) -> UsageError:
    what = _named_file(folder, step)
    if exc.kind == "time":
        happened = f"did not finish within {limits.seconds:g} s (edge-export was {step})"
        fix = f"raise the limit with {TIME_LIMIT_ENV}=<seconds> if the files are genuine and only slow"
    else:
        how = "" if exc.detail == "MemoryError" else f"; it ended by {exc.detail.removeprefix('ended by ')}, as native code does when an allocation fails"
        happened = f"needed more than its {limits.mib} MiB memory limit (edge-export was {step}{how})"
        fix = f"raise the limit with {MEMORY_LIMIT_ENV}=<MiB> if the files are genuine and only large"
    remedy = "remove or fix the template (a loop over a large range, or a huge string, never ends well on a phone either)" \
        if step == _RENDERING else "save the tokenizer again with save_pretrained()"
    return ModelLoadError(
        f"{what[0].upper()}{what[1:]} {happened}; edge-export stopped it (the tokenizer and its template are loaded in a "
        "confined child process with a time and a memory limit, since they are code from the model folder).",
        f"{remedy[0].upper()}{remedy[1:]}; {fix}.",
    )
