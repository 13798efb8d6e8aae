"""expose_tensors_pass: inner tensors read as extra outputs of a normal run (XNNPACK, memory reuse
on) hold what a run keeping every tensor holds; the signature apps see is unchanged, and inputs,
constants and names the model lacks add nothing."""

from __future__ import annotations

from functools import partial

import numpy as np

from edge_export.flatbuffer import read_flatbuffer
from edge_export.passes.flatbuffer import expose_tensors_pass, run_flatbuffer_passes
from edge_export.runtime.interpreter import Resolver, TFLiteRunner


def _inner_tensors(model) -> list[int]:
    """Tensors an operator computes that are not outputs: what a run normally reuses."""
    computed = [i for op in model.operators for i in op.outputs]
    return [i for i in computed if i not in model.outputs and model.tensors[i].is_float]


def test_exposed_tensors_read_what_a_run_keeping_every_tensor_reads(converted):
    model = read_flatbuffer(converted.fp32)
    inner = _inner_tensors(model)
    assert len(inner) >= 3
    names = [model.tensors[i].name for i in inner[:3]]
    exposed = run_flatbuffer_passes(model, [partial(expose_tensors_pass, names=names)]).model
    assert exposed.outputs[: len(model.outputs)] == model.outputs
    assert [exposed.tensors[i].name for i in exposed.outputs[len(model.outputs):]] == names
    # the signature's outputs keep their names and places; the extra ones are named after their tensors
    assert exposed.output_names == (*model.output_names, *names) and exposed.input_names == model.input_names

    sample = [x.numpy() for x in converted.example]
    fast = TFLiteRunner(exposed)  # XNNPACK, tensors reused
    outputs = fast.run(sample)
    keeping = TFLiteRunner(model, resolver=Resolver.BUILTIN, preserve_all_tensors=True)
    expected = keeping.run(sample)
    assert len(outputs) == len(expected) + len(names)
    for out, ref in zip(outputs, expected):
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)
    for index in exposed.outputs[len(model.outputs):]:
        np.testing.assert_allclose(fast.tensor(index), keeping.tensor(index), rtol=1e-4, atol=1e-5)


def test_inputs_constants_outputs_and_unknown_names_add_nothing(converted):
    model = read_flatbuffer(converted.fp32)
    constant = next(t.name for t in model.tensors if t.is_constant)
    names = [model.tensors[model.inputs[0]].name, model.tensors[model.outputs[0]].name, constant, "no such tensor"]
    result = run_flatbuffer_passes(model, [partial(expose_tensors_pass, names=names)])
    assert result.modified_by == ()
    assert result.model.outputs == model.outputs
