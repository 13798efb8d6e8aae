"""The Markdown renderer's quantization section, on a hand-built report section.

Regression (issue 9): the renderer read ``module_path`` where the quantization stage writes
``module``, so every float tensor of a non-fully-integer model was listed "from module `None`".
"""

from __future__ import annotations

from edge_export.reports.markdown import _quant_section


def _quantization(float_tensors: list[dict], inner_ops: list[dict]) -> dict:
    return {
        "mode": "int8",
        "backend": "pt2e",
        "recipe": "x",
        "observer": "minmax",
        "reason": "kept the better parity",
        "calibration": {"samples": 8, "real_data": False, "source": "synthetic"},
        "fully_integer": False,
        "integer_check": {"float_tensors": float_tensors, "inner_quantize_ops": inner_ops},
        "warnings": [],
        "io": [],
    }


def test_float_tensors_and_inner_ops_name_their_module():
    section = "\n".join(
        _quant_section(
            _quantization(
                [{"index": 7, "name": "t7", "dtype": "float32", "module": "features.3"}],
                [{"index": 2, "opcode": "DEQUANTIZE", "tensor": 7, "module": "head"}],
            )
        )
    )
    # names are shown as escaped <code> (issue 13: no backtick span a name could end)
    assert "float tensor <code>t7</code> (float32) from module <code>features\\.3</code>" in section
    assert "DEQUANTIZE #2 inside the graph, from module <code>head</code>" in section
    assert "None" not in section
