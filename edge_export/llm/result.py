"""What ``run_text_generation`` returns: the written files and the typed report."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LanguageModelResult"]


@dataclass(frozen=True)
class LanguageModelResult:
    tflite_path: Path
    litertlm_path: Path
    report_json_path: Path
    report_md_path: Path
    run_report: Any = field(repr=False)  # reports.model.RunReport

    @property
    def report(self) -> dict:
        from ..serialize import to_json_value

        return to_json_value(self.run_report)

    @property
    def verdict(self) -> str:
        return self.run_report.verdict

    @property
    def exit_code(self) -> int:
        return self.run_report.exit_code
