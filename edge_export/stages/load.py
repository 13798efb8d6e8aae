"""The load stage: the model loaded (loading.py's safety rules), its inputs settled and named, and one
eager run whose outputs are the reference every later stage compares with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..config import InputSpec
from ..errors import InputSpecError
from ..options import InputOptions

if TYPE_CHECKING:
    from ..loading.sources import LoadedModel


def flatten_outputs(out: Any) -> list:
    import torch
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_leaves(out)
    bad = [type(x).__name__ for x in leaves if not isinstance(x, torch.Tensor)]
    if bad or not leaves:
        raise InputSpecError(
            f"The model's forward() returns {', '.join(bad) or 'no tensors'}; edge-export needs tensor outputs "
            "(a tensor, or a tuple/list/dict of tensors).",
            "Wrap the model so that forward() returns only tensors.",
        )
    return leaves


def resolve_inputs(loaded: Any, inputs: InputOptions, seed: int, example_inputs: tuple | None) -> tuple[list[InputSpec], tuple]:
    from ..loading.inputs import example_tensors, specs_from_options, specs_from_tensors

    if inputs.input_shapes:
        specs = specs_from_options(inputs.input_shapes, inputs.input_dtypes)
        if example_inputs is not None and len(example_inputs) == len(specs):
            example = tuple(example_inputs)
        else:
            example = example_tensors(specs, seed)
        return specs, example
    if example_inputs is not None:
        return specs_from_tensors(example_inputs), tuple(example_inputs)
    if loaded.example_inputs is not None:
        return specs_from_tensors(loaded.example_inputs), tuple(loaded.example_inputs)
    raise InputSpecError(
        f"The input shapes of {loaded.source} are unknown: a {loaded.kind.value.replace('_', ' ')} does not record them.",
        "Pass --input-shape once per forward() argument, in order, e.g. --input-shape 1,3,224,224.",
    )


def load_with_inputs(
    model: Any, inputs: InputOptions, seed: int, example_inputs: tuple | None
) -> tuple[Any, list[InputSpec], tuple, list, list[str | None]]:
    """Load the model, settle its input specs (named) and example, and run it once eagerly: its
    flattened outputs and the key each was returned under."""
    from ..loading.inputs import check_model_accepts
    from ..loading.sources import load_model

    loaded = load_model(
        model,
        example_inputs=example_for_loading(inputs, seed, example_inputs),
        weights=inputs.weights,
        trust_pickle=inputs.trust_pickle,
    )
    specs, example = resolve_inputs(loaded, inputs, seed, example_inputs)
    returned = check_model_accepts(loaded.module, example, specs)
    outputs = flatten_outputs(returned)
    specs = named_specs(loaded, specs, inputs)
    check_output_names(inputs, len(outputs))
    return loaded, specs, example, outputs, output_keys(returned)


def named_specs(loaded: Any, specs: list[InputSpec], inputs: InputOptions) -> list[InputSpec]:
    """The specs named after --input-names or forward()'s parameters: every file a user hands in
    (calibration archives) is keyed by the same names as the signature."""
    from dataclasses import replace

    from ..artifacts.io_names import check_count, forward_parameter_names, resolve_names

    check_count(inputs.input_names, len(specs), "--input-names", "input")
    from_model = list(loaded.input_names or ())[: len(specs)] or forward_parameter_names(loaded.module, len(specs))
    names = resolve_names(inputs.input_names, from_model, [f"args_{i}" for i in range(len(specs))])
    return [replace(spec, name=name) for spec, name in zip(specs, names)]


def check_output_names(inputs: InputOptions, count: int) -> None:
    from ..artifacts.io_names import check_count

    check_count(inputs.output_names, count, "--output-names", "output")


def example_for_loading(inputs: InputOptions, seed: int, example_inputs: tuple | None) -> tuple | None:
    """TorchScript conversion needs example inputs at load time."""
    if example_inputs is not None:
        return tuple(example_inputs)
    if inputs.input_shapes:
        from ..loading.inputs import example_tensors, specs_from_options

        return example_tensors(specs_from_options(inputs.input_shapes, inputs.input_dtypes), seed)
    return None


def output_keys(returned: Any) -> list[str | None]:
    """Per flattened output, the dict key or attribute PyTorch returned it under (None for a
    tuple/list position or a bare tensor): names such as ``logits`` or ``pooler_output``."""
    from torch.utils import _pytree as pytree

    keys: list[str | None] = []
    for path, _ in pytree.tree_flatten_with_path(returned)[0]:
        last = path[-1] if path else None
        key = getattr(last, "key", None)
        if key is None:
            key = getattr(last, "name", None)
        keys.append(key if isinstance(key, str) else None)
    return keys


@dataclass(frozen=True)
class LoadedRun:
    """The load stage's result: the model and what one eager run of it returned."""

    loaded: LoadedModel
    specs: list[InputSpec]  # named after --input-names or forward()'s parameters
    example: tuple  # the example inputs, in PyTorch's layout
    reference_out: list  # the eager run's flattened outputs
    returned_keys: list[str | None]  # the key each output was returned under

    @property
    def module(self) -> Any:
        return self.loaded.module


def load_stage(model: Any, inputs: InputOptions, seed: int, example_inputs: tuple | None, clock: Any) -> LoadedRun:
    """Load the model (``inputs``: what loading and tracing read; ``seed``: of the random example
    inputs made from --input-shape)."""
    with clock.run("load", "Loading the model"):
        return LoadedRun(*load_with_inputs(model, inputs, seed, example_inputs))
