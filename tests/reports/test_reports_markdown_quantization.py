"""The Markdown renderer's quantization section, on a hand-built ``QuantizationResult``.

Regression (issue 9): the renderer read ``module_path`` where the quantization stage writes
``module``, so every float tensor of a non-fully-integer model was listed "from module `None`".
The renderer now reads the typed entries (``FloatTensorEntry.module``, ``QuantOpEntry.module``).
"""

from __future__ import annotations

import dataclasses

from report_fixtures import quantization

from edge_export.quantization.selection import FloatTensorEntry, IntegerCheck, QuantOpEntry
from edge_export.reports.markdown_quantization import quant_section as _quant_section


def test_float_tensors_and_inner_ops_name_their_module():
    check = IntegerCheck(
        False,
        (FloatTensorEntry(7, "t7", "float32", (1, 8), "features.3", "DEQUANTIZE"),),
        (QuantOpEntry(2, "DEQUANTIZE", "t7", "head"),),
    )
    quant = dataclasses.replace(quantization(), observer="minmax", integer_check=check, io=(), attempts=(), warnings=())
    section = "\n".join(_quant_section(quant))
    assert "float tensor <code>t7</code> (float32) from module <code>features\\.3</code>" in section
    assert "DEQUANTIZE #2 inside the graph, from module <code>head</code>" in section
    assert "None" not in section
