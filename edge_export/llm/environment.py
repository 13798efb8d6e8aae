"""The optional ``[llm]`` extra's libraries, imported where needed: missing or failing to import
(a wheel for another platform, a shared library that does not load) is the environment's
problem, said as such (exit 2, "install edge-export[llm]"), never "a bug in edge-export"."""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import UsageError, first_line

__all__ = ["LLM_EXTRA", "require_llm_extra"]

# module -> the distribution that provides it
LLM_EXTRA = {"litert_lm": "litert-lm-api", "litert_lm_builder": "litert-lm-builder", "litert_torch": "litert-torch"}


def require_llm_extra(module: str, purpose: str) -> Any:
    """``module`` imported; exit 2 naming it and the extra when it cannot be."""
    try:
        return importlib.import_module(module)
    except (ImportError, OSError) as exc:  # OSError: a native library that does not load
        dist = LLM_EXTRA.get(module.split(".")[0], module)
        raise UsageError(
            f"{dist} is needed {purpose}, but importing {module} failed: {first_line(exc, with_type=True)}.",
            "pip install 'edge-export[llm]' (in the environment edge-export runs in).",
        ) from exc
