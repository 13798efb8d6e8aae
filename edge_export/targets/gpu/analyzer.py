"""ai-edge-litert's GPU compatibility analyzer, run beside the prediction (``run_gpu_analyzer``).

The cross-check
---------------
ai-edge-litert ships a private analyzer (``_pywrap_analyzer_wrapper.ModelAnalyzer(path, True, True)``,
what ``tf.lite.experimental.Analyzer`` calls with ``gpu_compatibility=True``). It is called
defensively in the isolation child: when it is missing, raises or crashes, the report says so. Its
verdict (whole model "looks compatible", or per-operator "GPU COMPATIBILITY WARNING" lines) is
compared with the prediction and every difference is listed in ``GpuReport.disagreements``. Measured
on ai-edge-litert 2.3.0 here: the build prints no per-operator warnings and calls even a CUMSUM
model compatible, so on it the cross-check mostly reports that it disagrees with the table.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from .report import AnalyzerCrossCheck

if TYPE_CHECKING:
    from ...flatbuffer import FlatbufferModel

__all__ = ["parse_analyzer_output", "run_gpu_analyzer"]

_WARNING = re.compile(r"GPU COMPATIBILITY WARNING", re.IGNORECASE)
_OP_LINE = re.compile(r"^\s*Op#(\d+)\s")


def parse_analyzer_output(text: str) -> AnalyzerCrossCheck:
    """The analyzer's text as a verdict: per-operator warnings follow the ``Op#N`` line they concern."""
    flagged, current = [], None
    for line in text.splitlines():
        m = _OP_LINE.match(line)
        if m:
            current = int(m.group(1))
        elif _WARNING.search(line) and current is not None:
            flagged.append(current)
    if flagged or _WARNING.search(text):
        return AnalyzerCrossCheck(True, "incompatible", tuple(dict.fromkeys(flagged)))
    if "looks compatible with GPU delegate" in text:
        return AnalyzerCrossCheck(True, "compatible")
    return AnalyzerCrossCheck(True, None, note="the analyzer printed no GPU verdict")


def _analyze_in_child(data: bytes) -> str:
    from ai_edge_litert import _pywrap_analyzer_wrapper  # private: may move or change

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.tflite"
        path.write_bytes(data)
        return str(_pywrap_analyzer_wrapper.ModelAnalyzer(str(path), True, True))


def run_gpu_analyzer(model: FlatbufferModel) -> AnalyzerCrossCheck:
    """Run the analyzer in the isolation child; any failure is reported, never raised."""
    from ...errors import EdgeExportError
    from ...processes.isolation import run_isolated

    try:
        text = run_isolated(_analyze_in_child, model.data, stage="GPU analyzer cross-check", backend="ai-edge-litert's model analyzer")
    except (ImportError, AttributeError) as exc:
        return AnalyzerCrossCheck(False, None, note=f"the analyzer could not be loaded: {type(exc).__name__}: {exc}")
    except EdgeExportError as exc:  # a crash or error in the child
        return AnalyzerCrossCheck(False, None, note=f"the analyzer failed: {exc.message}")
    except Exception as exc:  # private API: any failure is a note, not a failed export
        return AnalyzerCrossCheck(False, None, note=f"the analyzer failed: {type(exc).__name__}: {exc}")
    return parse_analyzer_output(text)
