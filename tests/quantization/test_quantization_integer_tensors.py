"""PT2E on models that carry integer tensors into the graph (issue 12, item 1).

Hugging Face vision transformers compute position ids in the graph (an integer ADD, CAT and gather
over an int64 buffer). The annotators match ADD and CAT by pattern, not dtype, so those integer
tensors got activation observers and the default histogram observer failed ("histogram_cpu" not
implemented for 'Long'): PT2E refused every such model and ``auto`` fell back.
"""

from __future__ import annotations

import numpy as np
import torch
from quantization_models import heldout, tflite_outputs, torch_outputs
from torch import nn

from edge_export.config import InputSpec, QuantizeMode
from edge_export.quantization import synthetic_calibration
from edge_export.passes.fx import restore_source_functions_pass
from edge_export.quantization.pt2e import drop_integer_annotations, make_pt2e_quantizer, quantize_pt2e
from edge_export.validators.metrics import sqnr_db

SPEC = InputSpec((1, 3, 16, 16), name="pixels")


class PositionIds(nn.Module):
    """Patch embedding plus position embeddings looked up through ids computed from an int64 buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Conv2d(3, 16, 4, stride=4)
        self.pos = nn.Embedding(17, 16)
        self.register_buffer("position_ids", torch.arange(16).unsqueeze(0), persistent=False)
        self.head = nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.patch(x).flatten(2).transpose(1, 2)
        ids = self.position_ids + 1  # an integer ADD
        ids = torch.cat([ids[:, :8], ids[:, 8:]], dim=1)  # an integer CAT
        return self.head(torch.relu(tokens + self.pos(ids)).mean(1))


def _model() -> PositionIds:
    torch.manual_seed(0)
    return PositionIds().eval()


def test_integer_tensors_get_no_observer():
    model = _model()
    example = (torch.randn(*SPEC.shape),)
    graph = torch.export.export(model, example, strict=False).module()
    restore_source_functions_pass(graph)
    quantizer = make_pt2e_quantizer(QuantizeMode.INT8)
    quantizer.annotate(graph)
    observed = [arg for node in graph.graph.nodes if (ann := node.meta.get("quantization_annotation")) for arg in ann.input_qspec_map]
    removed = drop_integer_annotations(graph)
    assert removed > 0, "the annotator no longer observes integer tensors: this test lost its subject"
    kept = [arg for node in graph.graph.nodes if (ann := node.meta.get("quantization_annotation")) for arg in ann.input_qspec_map]
    assert 0 < len(kept) < len(observed)  # float inputs stay observed
    assert "position_ids" not in " ".join(str(arg.target) for arg in kept)
    assert drop_integer_annotations(graph) == 0  # nothing integer is left observed


def test_pt2e_quantizes_a_model_with_position_ids():
    model = _model()
    data = quantize_pt2e(model, (torch.randn(*SPEC.shape),), QuantizeMode.INT8, synthetic_calibration([SPEC], n=16, seed=1))
    xs = heldout(SPEC, 8)
    score = sqnr_db(torch_outputs(model, xs), tflite_outputs(data, xs))
    assert np.isfinite(score) and score > 25.0, score
