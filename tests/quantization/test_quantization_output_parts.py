"""An output joined from parts of very different ranges keeps one scale per part at int8 (issue #39,
point 3): a small detector whose head concatenates boxes in pixels (0-320) with sigmoid class scores
keeps its scores after int8 and for the Edge TPU, measured here by running the written .tflite
apart from the tool's verdict; with --no-part-scales the scores collapse as before."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

import edge_export
from cli_harness import validate_report
from model_zoo import Detector
from edge_export.flatbuffer import read_flatbuffer
from edge_export.quantization.output_joins import joined_outputs
from edge_export.validators.metrics import sqnr_db

pytestmark = pytest.mark.slow  # three int8 exports, ~10-20 s each on a loaded 2-core machine


def _run_tflite(path, images: np.ndarray) -> np.ndarray:
    """The written model on each image, inputs quantized and outputs dequantized by its own params."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    (inp,), (out,) = interpreter.get_input_details(), interpreter.get_output_details()
    results = []
    nhwc = tuple(inp["shape"][1:]) == images.shape[2:] + images.shape[1:2]  # the Edge TPU's layout
    for image in images:
        x = image.transpose(1, 2, 0)[None] if nhwc else image[None]
        if inp["dtype"] != np.float32:
            scale, zero = inp["quantization"]
            x = np.clip(np.round(x / scale) + zero, np.iinfo(inp["dtype"]).min, np.iinfo(inp["dtype"]).max).astype(inp["dtype"])
        interpreter.set_tensor(inp["index"], x)
        interpreter.invoke()
        y = interpreter.get_tensor(out["index"])
        if out["dtype"] != np.float32:
            scale, zero = out["quantization"]
            y = (y.astype(np.float32) - zero) * scale
        results.append(y[0])
    return np.stack(results)


@pytest.fixture(scope="module")
def detector():
    torch.manual_seed(0)
    model = Detector().eval()
    held_out = torch.randn(16, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        reference = model(held_out).numpy()
    return model, held_out.numpy(), reference


def _export(model: nn.Module, path, **options) -> dict:
    torch.manual_seed(0)
    edge_export.export(model, example_inputs=(torch.randn(1, 3, 16, 16),), output=path, quantize="int8", quant_backend="flatbuffer", **options)
    return validate_report(json.loads(path.with_suffix(".report.json").read_text()))


def _part_sqnrs(reference: np.ndarray, exported: np.ndarray) -> tuple[float, float]:
    return sqnr_db(reference[:, :4], exported[:, :4]), sqnr_db(reference[:, 4:], exported[:, 4:])


def test_int8_keeps_the_scores_part_that_one_scale_collapses(detector, tmp_path):
    model, images, reference = detector
    kept = _export(model, tmp_path / "kept.tflite")
    # without the default search, which raises the collapsed part's operators to int16
    one_scale = _export(model, tmp_path / "one_scale.tflite", part_scales=False, mixed_precision="off")

    boxes, scores = _part_sqnrs(reference, _run_tflite(tmp_path / "kept.tflite", images))
    _, collapsed = _part_sqnrs(reference, _run_tflite(tmp_path / "one_scale.tflite", images))
    assert boxes >= 25 and scores >= 20, (boxes, scores)
    assert collapsed < 10, collapsed  # one int8 scale of ~1.3 px: the scores round to a few steps
    # the tool's verdict agrees, part by part
    assert kept["verdict"] == "passed" and one_scale["verdict"] == "failed"
    assert [p["passed"] for p in kept["validation"]["outputs"][0]["parts"]] == [True, True]
    # the output kept its name, shape and float type; the report names its parts' scales
    quantization = kept["quantization"]
    (output,) = [io for io in quantization["io"] if io["kind"] == "output"]
    assert (output["name"], output["shape"], output["dtype"]) == ("output_0", [1, 10, 64], "float32")
    (joined,) = quantization["output_parts"]
    assert joined["output"] == "output_0" and len(joined["parts"]) == 2
    box_scale, score_scale = (p["scale"] for p in joined["parts"])
    assert box_scale > 50 * score_scale
    assert quantization["fully_integer"] is True
    assert one_scale["quantization"]["output_parts"] == []


def test_edgetpu_keeps_the_scores_and_maps_every_operator(detector, tmp_path):
    model, images, reference = detector
    report = _export(model, tmp_path / "tpu.tflite", target="edgetpu")
    boxes, scores = _part_sqnrs(reference, _run_tflite(tmp_path / "tpu.tflite", images))
    assert boxes >= 25 and scores >= 20, (boxes, scores)
    io = {item["kind"]: item for item in report["quantization"]["io"]}
    assert (io["input"]["dtype"], io["output"]["dtype"]) == ("uint8", "float32")  # the joined output stays float
    tpu = report["target"]["edgetpu"]
    assert tpu["fully_mapped"] is True and tpu["num_segments"] == 1, tpu["summary"]
    assert report["quantization"]["output_parts"][0]["output"] == "output_0"


def test_an_ordinary_int8_model_has_no_output_join(built_artifacts):
    model = read_flatbuffer(built_artifacts.int8.read_bytes())
    assert model.output_join_ops == frozenset() and joined_outputs(model) == ()
