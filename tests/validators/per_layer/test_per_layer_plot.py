"""The optional SQNR-per-layer PNG."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest

from edge_export.errors import UsageError
from edge_export.validators.layers import LayerParity, LayerParityReport

HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


def _report(sqnrs: list[float]) -> LayerParityReport:
    rows = tuple(
        LayerParity(
            position=i,
            module_path=f"features.{i}",
            module_type="Conv2d",
            tflite_tensor=f"t{i}",
            tflite_index=i,
            opcode="CONV_2D",
            shape=(1, 4, 4, 8),
            dtype="int8",
            torch_shape=(1, 8, 4, 4),
            layout="NHWC->NCHW",
            sqnr_db=v,
            cosine=0.99,
        )
        for i, v in enumerate(sqnrs)
    )
    return LayerParityReport(
        layers=rows,
        first_jump=rows[2],
        worst=rows[3],
        unmatched_modules=(),
        modules_total=len(rows),
        tensors_total=len(rows),
        tensors_matched=len(rows),
        tensors_internal=0,
        unmatched_tensors=(),
        tensors_unmatched=0,
        samples=1,
    )


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib (the plot extra) is not installed")
def test_plot_writes_a_png(tmp_path):
    from edge_export.validators.layer_plot import plot_layer_sqnr

    out = plot_layer_sqnr(_report([38.0, 36.0, 4.0, 2.0, 6.0]), tmp_path / "sqnr.png")

    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5_000


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib (the plot extra) is not installed")
def test_plot_with_sensitivity_adds_the_ranked_operators_below(tmp_path):
    from edge_export.quantization.sensitivity import LayerSensitivity, SensitivityReport
    from edge_export.validators.layer_plot import plot_layer_sqnr

    ranked = SensitivityReport(
        "only-quantized",
        (LayerSensitivity(1, 3, "CONV_2D", "t3", "features.$3", "Conv2d", None, 12.0),
         LayerSensitivity(2, 0, "ADD", "t0", None, None, None, 41.0)),
        10.0, 8, 1.0,
    )
    plain = plot_layer_sqnr(_report([38.0, 36.0, 4.0, 2.0]), tmp_path / "plain.png").read_bytes()
    both = plot_layer_sqnr(_report([38.0, 36.0, 4.0, 2.0]), tmp_path / "both.png", ranked).read_bytes()
    assert both[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(both) > len(plain) + 2_000  # a second chart, taller


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib (the plot extra) is not installed")
def test_plot_into_a_missing_directory_is_a_usage_error(tmp_path):
    from edge_export.validators.layer_plot import plot_layer_sqnr

    with pytest.raises(UsageError, match="Could not write the SQNR plot"):
        plot_layer_sqnr(_report([30.0, 20.0, 4.0, 2.0]), tmp_path / "no" / "such" / "dir" / "sqnr.png")


def test_without_matplotlib_the_error_names_the_extra(tmp_path):
    # A fresh interpreter in which importing matplotlib fails, as on an install without the extra.
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules["matplotlib"] = None
        sys.modules["matplotlib.figure"] = None
        sys.path.insert(0, {str(__file__.rsplit('/', 1)[0])!r})
        from test_per_layer_plot import _report
        from edge_export.errors import UsageError
        from edge_export.validators.layer_plot import plot_layer_sqnr
        try:
            plot_layer_sqnr(_report([1.0, 2.0, 3.0, 4.0]), {str(tmp_path / "x.png")!r})
        except UsageError as exc:
            print(exc)
            sys.exit(7)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 7, proc.stderr
    assert "pip install edge-export[plot]" in proc.stdout
    assert not (tmp_path / "x.png").exists()


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib (the plot extra) is not installed")
def test_plot_shows_dollar_signs_in_module_names_literally(tmp_path):
    """Module names come from the model; '$...$' in one is matplotlib mathtext, and a malformed one
    made plotting raise (an internal error) instead of drawing the name."""
    from dataclasses import replace

    from edge_export.validators.layer_plot import plot_layer_sqnr

    report = _report([38.0, 36.0, 4.0, 2.0, 6.0])
    rows = tuple(replace(r, module_path=f"block$\\frac{{{i}$") for i, r in enumerate(report.layers))
    report = replace(report, layers=rows, first_jump=rows[2], worst=rows[3])
    out = plot_layer_sqnr(report, tmp_path / "sqnr.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
