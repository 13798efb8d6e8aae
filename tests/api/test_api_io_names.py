"""Signature names from the model (issue 10 item 1): forward()'s parameters name the inputs, the
returned dict's keys name the outputs, for every source kind that knows them; overrides; refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cli_harness import read_report
from model_zoo import NamedIO

EXAMPLE = (torch.randn(1, 8, generator=torch.Generator().manual_seed(0)), torch.ones(1, 8))
SHAPES = ("--input-shape", "1,8", "--input-shape", "1,8")
FAST = ("--samples", "2", "--calibration-samples", "8")


def _signature(path) -> dict:
    from ai_edge_litert.interpreter import Interpreter

    return Interpreter(model_content=path.read_bytes()).get_signature_list()


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    folder = tmp_path_factory.mktemp("named_io")
    model = NamedIO().eval()
    pt2, scripted = folder / "named.pt2", folder / "named.torchscript"
    torch.export.save(torch.export.export(model, EXAMPLE), pt2)
    torch.jit.save(torch.jit.trace(model, EXAMPLE, strict=False), scripted)
    return {"pt2": (str(pt2),), "reference": ("model_zoo:NamedIO", *SHAPES), "torchscript": (str(scripted), *SHAPES)}


@pytest.mark.parametrize("mode", ["none", "int8"])
@pytest.mark.parametrize("kind", ["pt2", "reference", "torchscript"])
def test_signature_is_named_after_the_model(tmp_path, run_cli, sources, kind, mode):
    out = tmp_path / f"{kind}.tflite"
    res = run_cli(*sources[kind], "--quantize", mode, *FAST, "-o", out)
    assert res.exit_code == 0, res.stderr
    assert _signature(out) == {
        "serving_default": {"inputs": ["attention_mask", "pixel_values"], "outputs": ["embedding", "logits"]}
    }
    from edge_export.flatbuffer import read_flatbuffer

    fb = read_flatbuffer(out.read_bytes())
    assert fb.input_names == ("pixel_values", "attention_mask")  # forward()'s order
    assert [t.name for t in fb.input_tensors] == ["serving_default_pixel_values", "serving_default_attention_mask"]
    report = read_report(out)
    outputs = {o["name"]: o for o in report["validation"]["outputs"]}
    assert set(outputs) == {"logits", "embedding"}
    # the real names decide the kinds: no "judged as regression" default for either output
    assert outputs["embedding"]["kind"] == "embedding"
    if mode == "int8":  # quantization's I/O table names what the written file names
        assert [x["name"] for x in report["quantization"]["io"]] == ["pixel_values", "attention_mask", "logits", "embedding"]


def test_overrides_name_the_signature(tmp_path, run_cli, sources):
    out = tmp_path / "renamed.tflite"
    res = run_cli(
        *sources["pt2"], "--input-names", "image,mask", "--output-names", "scores,features",
        "--signature-key", "run", *FAST, "-o", out,
    )
    assert res.exit_code == 0, res.stderr
    assert _signature(out) == {"run": {"inputs": ["image", "mask"], "outputs": ["features", "scores"]}}
    # The signature runner finds the inputs by the new names and computes what PyTorch does.
    from ai_edge_litert.interpreter import Interpreter

    from edge_export.runtime.interpreter import TFLiteRunner

    runner = Interpreter(model_content=out.read_bytes()).get_signature_runner("run")
    got = runner(image=EXAMPLE[0].numpy(), mask=EXAMPLE[1].numpy())
    want = NamedIO().eval()(*EXAMPLE)
    np.testing.assert_allclose(got["scores"], want["logits"].detach().numpy(), atol=1e-5)
    np.testing.assert_allclose(got["features"], want["embedding"].detach().numpy(), atol=1e-5)
    assert [o.name for o in TFLiteRunner(out.read_bytes()).outputs] == ["scores", "features"]
    from edge_export.inspection import inspect_flatbuffer

    assert inspect_flatbuffer(out).signatures[0]["key"] == "run"
    assert inspect_flatbuffer(out).signatures[0]["inputs"] == ["image", "mask"]


@pytest.mark.parametrize(
    "args, message",
    [
        (("--input-names", "image,2mask"), "'2mask' is not a valid name"),
        (("--input-names", "a,a"), "names a more than once"),
        (("--output-names", "x-y,z"), "'x-y' is not a valid name"),
        (("--signature-key", "my key"), "--signature-key 'my key' is not a valid"),
        (("--input-names", "only_one"), "--input-names gives 1 name(s), but the model has 2 input(s)"),
        (("--output-names", "a,b,c"), "--output-names gives 3 name(s), but the model has 2 output(s)"),
    ],
)
def test_bad_overrides_are_usage_errors(tmp_path, run_cli, sources, args, message):
    out = tmp_path / "bad.tflite"
    res = run_cli(*sources["pt2"], *args, "-o", out)
    assert res.exit_code == 2, res.stderr
    assert message in " ".join(res.stderr.split())
    assert "Traceback" not in res.stderr
    assert not list(tmp_path.iterdir())


def test_npz_calibration_is_keyed_by_forward_names(tmp_path, run_cli, sources):
    rng = np.random.default_rng(1)
    data = tmp_path / "calibration.npz"
    np.savez(
        data,
        attention_mask=np.ones((10, 8), np.float32),
        pixel_values=rng.standard_normal((10, 8)).astype(np.float32),
    )
    out = tmp_path / "calibrated.tflite"
    res = run_cli(*sources["reference"], "--quantize", "int8", "--calibration-data", data, *FAST, "-o", out)
    assert res.exit_code == 0, res.stderr
    assert read_report(out)["quantization"]["calibration"]["real_data"] is True


class _SwappedOutputs(NamedIO):
    """NamedIO's outputs returned in the other order: a flatbuffer whose outputs are (embedding, logits)."""

    def forward(self, pixel_values, attention_mask):
        out = super().forward(pixel_values, attention_mask)
        return {"embedding": out["embedding"], "logits": out["logits"]}


def test_validate_pairs_outputs_by_name(tmp_path):
    from edge_export import export, validate

    out = tmp_path / "swapped.tflite"
    exported = export(_SwappedOutputs().eval(), example_inputs=EXAMPLE, output=out, samples=2)
    assert exported.passed
    from edge_export.flatbuffer import read_flatbuffer

    assert read_flatbuffer(out.read_bytes()).output_names == ("embedding", "logits")
    # the reference returns logits first: paired by position, the shapes (4 vs 6) would not even match
    checked = validate(out, NamedIO().eval(), example_inputs=EXAMPLE, samples=2)
    assert checked.passed
    assert [o["name"] for o in checked.report["validation"]["outputs"]] == ["embedding", "logits"]
