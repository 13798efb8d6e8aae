"""The zoo benchmark's model builders (benchmarks/zoo_models.py) still construct and run, on tiny
configs of three kinds of architecture, so that the developers' sweep (benchmarks/zoo.py) does not rot
between runs. The exports themselves are the sweep's job, not CI's."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import zoo  # noqa: E402
import zoo_models  # noqa: E402

# slow: the first test pays for importing transformers' models (about 10 s of CPU here; the file
# takes 20 CPU s in all); CI still runs it
pytestmark = pytest.mark.slow

TINY_CASES = ("mobilenet_v2", "vit_4l", "bert_4l_256")


@pytest.fixture(scope="module", params=TINY_CASES)
def built(request):
    return request.param, *zoo_models.build(request.param, tiny=True)


def _outputs(model, example):
    import torch

    with torch.no_grad():
        out = model(*example)
    return out if isinstance(out, tuple) else (out,)


def test_tiny_builder_runs_forward_with_signal(built):
    name, model, example = built
    assert not model.training
    outputs = _outputs(model, example)
    for out in outputs:
        assert out.shape[0] == example[0].shape[0]
        assert out.isfinite().all(), name
        assert out.float().std() > 0, f"{name}: a constant output carries no signal to compare"


def test_builders_are_deterministic(built):
    name, model, example = built
    again, example_again = zoo_models.build(name, tiny=True)
    for a, b in zip(example, example_again):
        assert a.equal(b)
    for a, b in zip(_outputs(model, example), _outputs(again, example)):
        assert a.equal(b), name


def test_batch_norm_statistics_are_measured_not_placeholders():
    import torch

    model, _ = zoo_models.build("mobilenet_v2", tiny=True)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    assert norms
    for m in norms:
        assert int(m.num_batches_tracked) == zoo_models.BATCH_NORM_PASSES
        assert not torch.allclose(m.running_var, torch.ones_like(m.running_var))
        assert m.momentum is not None  # restored after the cumulative measurement


def test_zoo_covers_the_kinds_the_issue_asks_for():
    kinds = {m.kind for m in zoo_models.MODELS.values()}
    assert {"image", "text", "audio", "detection"} <= kinds
    assert len(zoo_models.MODELS) >= 30


def test_failure_lines_escape_model_text():
    crafted = "module [x](http://e.x) | op <b>"
    jobs = {"int8": {"status": "error", "exit_code": 3, "error_type": "ConversionError", "error": crafted}}
    table = zoo.markdown_table({"vit_4l": jobs}, ["vit_4l"])
    assert "ConversionError" in table
    assert "<b>" not in table and "](" not in table and " | op" not in table


def test_init_choice_changes_the_weights_not_the_architecture():
    pytorch_model, example = zoo_models.build("resnet18", tiny=True)
    hf_model, _ = zoo_models.build("resnet18", tiny=True, init="transformers")
    pytorch_params = dict(pytorch_model.named_parameters())
    hf_params = dict(hf_model.named_parameters())
    assert pytorch_params.keys() == hf_params.keys()
    assert any(not pytorch_params[k].equal(hf_params[k]) for k in pytorch_params)
    for out in _outputs(hf_model, example):
        assert out.isfinite().all()


def test_unknown_init_is_refused():
    with pytest.raises(ValueError, match="init"):
        zoo_models.build("resnet18", tiny=True, init="xavier")
