"""The float prefill/decode flatbuffer, exported once by litert-torch's generative export.

``export_hf.export`` (imported through ``litert_torch_compat``) loads the directory with
transformers, swaps in its attention with an external KV cache and converts one ``prefill_<N>``
signature per prefill length plus ``decode``. Quantization is not done here (recipe ``none``):
every recipe is applied afterwards to this float flatbuffer by ai-edge-quantizer
(``recipes.py``), which is what export_hf's own ``quantization_recipe`` does internally
(``export_lib.maybe_quantize_model``), so the model is traced and converted once per run.
Packaging is ours too (``packaging.py``): export_hf's bundling is turned off.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConversionError, UsageError, first_line
from .litert_torch_compat import import_export_hf

__all__ = ["FloatExport", "export_float_flatbuffer"]


@dataclass(frozen=True)
class FloatExport:
    data: bytes  # the float32 .tflite
    prefill_lengths: tuple[int, ...]
    cache_length: int


def export_float_flatbuffer(folder: Path, prefill_lengths: tuple[int, ...], cache_length: int) -> FloatExport:
    """Export ``folder`` (a checked causal-LM directory) to a float flatbuffer with prefill and
    decode signatures over an external KV cache of ``cache_length`` positions."""
    try:
        export_hf = import_export_hf()
    except (ImportError, OSError) as exc:  # the environment (litert-torch, torch, ai-edge-litert), not the model
        raise UsageError(
            f"litert-torch's generative export cannot be imported: {first_line(exc, with_type=True)}.",
            "pip install 'edge-export[llm]' (litert-torch and ai-edge-litert at the versions edge-export constraints prints).",
        ) from exc
    with tempfile.TemporaryDirectory(prefix="edge-export-llm-") as out:
        try:
            export_hf.export(
                str(folder), out, prefill_lengths=list(prefill_lengths), cache_length=cache_length,
                quantization_recipe="none", bundle_litert_lm=False, keep_temporary_files=True,
            )
        except Exception as exc:  # boundary: litert-torch's whole export (transformers, torch.export, MLIR)
            raise ConversionError(
                f"litert-torch's generative export failed for {folder}: {first_line(exc, with_type=True)}.",
                "Run with --debug for the traceback; check that litert-torch supports this architecture "
                "(litert_torch/generative/export_hf).",
            ) from exc
        found = sorted(Path(out).rglob("model.tflite"))
        if not found:
            raise ConversionError(f"litert-torch's generative export of {folder} wrote no model.tflite.", "Run with --debug.")
        return FloatExport(found[0].read_bytes(), tuple(prefill_lengths), cache_length)
