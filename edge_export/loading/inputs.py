"""Input specs and the sample inputs that tracing and parity run on."""

from __future__ import annotations

import math
import re
from typing import Any, Sequence

import numpy as np

from ..config import InputSpec
from ..errors import InputSpecError, first_line

__all__ = ["specs_from_options", "specs_from_tensors", "example_tensors", "make_samples", "check_model_accepts"]


def specs_from_options(shapes: Sequence[tuple[int, ...]], dtypes: Sequence[str]) -> list[InputSpec]:
    if dtypes and len(dtypes) not in (1, len(shapes)):
        raise InputSpecError(
            f"{len(dtypes)} --input-dtype values were given for {len(shapes)} --input-shape values.",
            "Give one --input-dtype per --input-shape (in the same order), or a single one for all.",
        )
    if not dtypes:
        dtypes = ["float32"] * len(shapes)
    elif len(dtypes) == 1:
        dtypes = list(dtypes) * len(shapes)
    return [InputSpec(tuple(s), d) for s, d in zip(shapes, dtypes)]


def specs_from_tensors(tensors: Sequence[Any]) -> list[InputSpec]:
    return [InputSpec(tuple(int(d) for d in t.shape), str(t.dtype).replace("torch.", "")) for t in tensors]


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


# Peak bytes per element while one random sample is made: numpy's float64 draw plus its copy.
_SAMPLE_BYTES_PER_ELEMENT = 16


def _ensure_memory_for_samples(specs: Sequence[InputSpec], count: int) -> None:
    from ..processes.memory import ensure_memory_for

    elements = sum(math.prod(spec.shape) for spec in specs)
    ensure_memory_for(
        elements * _SAMPLE_BYTES_PER_ELEMENT * max(count, 1),
        f"{count} input sample(s) of shape " + " and ".join(f"({spec.shape_text})" for spec in specs),
        "Check --input-shape (and --samples): the shape is what one forward() call takes, e.g. 1,3,224,224.",
        InputSpecError,
    )


# The range of synthetic integer inputs when no example gives one (token ids, class indices).
_INT_LOW, _INT_HIGH = 0, 10


def example_tensors(specs: Sequence[InputSpec], seed: int = 0) -> tuple:
    """Deterministic example inputs for tracing (the first parity sample)."""
    _ensure_memory_for_samples(specs, 1)
    return tuple(_random_tensor(spec, np.random.default_rng(seed + 7919 * i), None) for i, spec in enumerate(specs))


def _random_tensor(spec: InputSpec, rng: np.random.Generator, like: Any):
    import torch

    dtype = _torch_dtype(spec.dtype)
    if dtype.is_floating_point:
        arr = rng.standard_normal(spec.shape).astype(np.float32)
        if like is not None and like.numel() > 1:
            ref = like.detach().float()
            arr = arr * float(ref.std()) + float(ref.mean())
        return torch.from_numpy(arr).to(dtype)
    if dtype == torch.bool:
        return torch.from_numpy(rng.integers(0, 2, spec.shape).astype(bool))
    low, high = _INT_LOW, _INT_HIGH
    if like is not None and like.numel() > 0:
        low, high = int(like.min()), int(like.max()) + 1
    # both ends included: an example holding its type's largest value must not overflow the bound
    return torch.from_numpy(rng.integers(low, max(high - 1, low), spec.shape, endpoint=True)).to(dtype)


def make_samples(specs: Sequence[InputSpec], count: int, seed: int, example: tuple | None) -> list[tuple]:
    """``count`` input tuples: the example inputs first, then seeded random ones shaped like them."""
    _ensure_memory_for_samples(specs, count)
    samples: list[tuple] = []
    if example is not None:
        samples.append(tuple(example))
    rng = np.random.default_rng(seed)
    while len(samples) < count:
        like = example if example is not None else (None,) * len(specs)
        samples.append(tuple(_random_tensor(s, rng, l) for s, l in zip(specs, like)))
    return samples[:count]


def check_model_accepts(module: Any, example: tuple, specs: Sequence[InputSpec]) -> Any:
    """Run the model eagerly once; a shape it rejects becomes a one-line InputSpecError."""
    import torch

    try:
        with torch.no_grad():
            return module(*example)
    except (Exception, SystemExit) as exc:  # the model's own errors are the user's, sys.exit included
        shapes = " and ".join(f"({s.shape_text}) {s.dtype}" for s in specs)
        first = first_line(exc)
        _raise_if_out_of_memory(exc, shapes)
        if isinstance(exc, SystemExit):
            first = f"forward() called {first}"
        hint = "Pass --input-shape once per forward() argument, in order, with the shape the model expects."
        if any(not _torch_dtype(s.dtype).is_floating_point and _torch_dtype(s.dtype) != torch.bool for s in specs):
            hint += (
                f" Integer inputs without an example are drawn from [{_INT_LOW}, {_INT_HIGH}) (a one_hot or embedding "
                "with fewer classes rejects them): save the model as a .pt2 with in-range example inputs "
                "(torch.export.save), and the samples are drawn in the examples' range."
            )
        raise InputSpecError(f"The model rejects input {shapes}: PyTorch says: {first[:300]}", hint) from exc


_ALLOCATION = re.compile(r"(?:tried to allocate|allocate) (\d+) bytes")


def _raise_if_out_of_memory(exc: BaseException, shapes: str) -> None:
    """A forward() that allocates more than the machine has is the model's demand, not a wrong
    input shape: say how much it asked for (a hostile .pt2 can create a 64 GiB tensor)."""
    text = str(exc)
    if not isinstance(exc, MemoryError) and "can't allocate memory" not in text and "Cannot allocate memory" not in text:
        return
    found = _ALLOCATION.search(text)
    asked = f" {int(found.group(1)) / 2**30:.1f} GiB in one tensor" if found else " more memory than is free"
    raise InputSpecError(
        f"Running the model once on input {shapes} failed: its forward() asked for{asked}, more than this "
        "machine can give (the inputs themselves are small).",
        "The model creates that tensor itself: check the sizes in its forward() (or the file's origin), or run "
        "on a machine with enough memory.",
    ) from exc
