"""What ``run_text_generation`` returns: an export's result (files, typed report, verdict, exit
code) with the ``.litertlm`` beside the ``.tflite``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..stages.write import ExportResult

__all__ = ["LanguageModelResult"]


@dataclass(frozen=True)
class LanguageModelResult(ExportResult):
    litertlm_path: Path | None = None
