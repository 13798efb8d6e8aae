"""edge-export: PyTorch to LiteRT with host-proven parity.

    import edge_export
    result = edge_export.export(model_or_path, example_inputs=(x,), quantize="int8")
    result = edge_export.validate("model.tflite", reference="model.pt2")

The API is imported on first use so that `edge-export --help` stays fast.
"""

from __future__ import annotations

from typing import Any

from .version import __version__

__all__ = ["__version__", "export", "validate", "ExportOptions", "ExportResult"]


def __getattr__(name: str) -> Any:
    if name in ("export", "validate", "ExportOptions", "ExportResult"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'edge_export' has no attribute {name!r}")
