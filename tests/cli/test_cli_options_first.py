"""Options are checked before the model is loaded; shape and weights errors are the user's (exit 2)
and say what is wrong in plain text; a module reference does not leave the current folder on
sys.path."""

from __future__ import annotations

import textwrap

import pytest
import torch

from cli_harness import run_cli_subprocess
from edge_export.config import parse_shape
from edge_export.errors import UsageError
from model_zoo import small_cnn

X = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def _usage(res, *needles):
    assert res.exit_code == 2, (res.exit_code, res.stdout, res.stderr)
    text = " ".join(res.stderr.split())
    for needle in needles:
        assert needle in text, text
    assert "Traceback" not in res.stderr and "\x1b" not in res.stderr


@pytest.mark.parametrize("text", ["1,3,x", "1,3,,4", "1x3x", "x", "1,3,0", "1,-3", "1,3.5"])
def test_shape_with_a_part_that_is_not_a_number_is_refused(text):
    with pytest.raises(UsageError, match="Cannot read the input shape"):
        parse_shape(text)


@pytest.mark.parametrize("text,shape", [("1,3,224,224", (1, 3, 224, 224)), ("1x3x8x8", (1, 3, 8, 8)), ("(2, 4)", (2, 4))])
def test_shapes_that_parse(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--input-shape", "1,3,x"], "Cannot read the input shape '1,3,x'"),
        (["--quantize", "int8", "--mean", "nan"], "--mean nan"),
        (["--quantize", "int8", "--std", "0,1,1"], "--std"),
        (["--min-cosine", "2"], "--min-cosine 2.0 is above 1"),
        (["--atol", "-1"], "atol=-1.0"),
        (["--min-sqnr", "nan"], "min_sqnr_db=nan"),
    ],
)
def test_bad_option_is_refused_before_the_model_is_loaded(tmp_path, run_cli, args, needle):
    # the model does not exist: an option error first shows the options are checked first
    res = run_cli(tmp_path / "missing.pt2", *args, "-o", tmp_path / "out.tflite")
    _usage(res, needle)
    assert "No such model file" not in res.stderr


@pytest.fixture(scope="module")
def cnn_tflite(built_artifacts):
    return built_artifacts.fp32  # the session's fp32 export of model_zoo.small_cnn (tests/conftest.py)


@pytest.mark.parametrize("shape", ["1,3,32,32", "2,3,16,16"])
def test_validate_with_shapes_the_flatbuffer_cannot_take_is_exit_2(cnn_tflite, tmp_path, run_cli, shape):
    res = run_cli("validate", cnn_tflite, "-r", "model_zoo:small_cnn", "--input-shape", shape, "--report", tmp_path / "v")
    _usage(res, "has shape 1,3,16,16", f"given {shape}")
    assert list(tmp_path.iterdir()) == []


def test_weights_errors_keep_the_detail_and_drop_escape_codes(tmp_path, run_cli):
    state = small_cnn().state_dict()
    state.pop("head.bias")
    state["extra.weight"] = torch.zeros(1)
    torch.save(state, tmp_path / "wrong.pt")
    res = run_cli("model_zoo:small_cnn", "--weights", tmp_path / "wrong.pt", "--input-shape", "1,3,16,16", "-o", tmp_path / "o.tflite")
    _usage(res, 'Missing key(s) in state_dict: "head.bias"', 'Unexpected key(s) in state_dict: "extra.weight"')
    torch.save({"state": small_cnn().state_dict(), "hook": print}, tmp_path / "checkpoint.pt")
    res = run_cli("model_zoo:small_cnn", "--weights", tmp_path / "checkpoint.pt", "--input-shape", "1,3,16,16", "-o", tmp_path / "o.tflite")
    _usage(res, "Unsupported global: GLOBAL print")
    assert "you have two options" not in res.stderr


def test_stray_module_in_the_current_folder_does_not_shadow_a_library(tmp_path):
    (tmp_path / "tiny_model.py").write_text(
        textwrap.dedent(
            """
            import torch

            class Tiny(torch.nn.Module):
                def forward(self, x):
                    return torch.relu(x) * 2
            """
        )
    )
    (tmp_path / "litert_torch.py").write_text("raise ImportError('the stray litert_torch.py was imported')\n")
    res = run_cli_subprocess("tiny_model:Tiny", "--input-shape", "1,8", "-o", "tiny.tflite", cwd=tmp_path)
    assert res.exit_code == 0, res.stderr
    assert "stray" not in res.stderr
    assert (tmp_path / "tiny.tflite").is_file()
