"""The samples the stages share: calibration sets, held-out parity inputs, and both moved to the
layout the converted model takes (NHWC for --channels-last inputs)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..config import InputSpec
from ..errors import UsageError
from ..options import ExportOptions


# The search's own seeded inputs: apart from parity's (seed) and the synthetic calibration's (seed + 1_000_003).
SELECTION_SEED_OFFSET = 2_000_003


def to_layout(arrays: Sequence[np.ndarray], indices: Sequence[int], nhwc: bool) -> list[np.ndarray]:
    out = list(arrays)
    for i in indices:
        out[i] = np.transpose(out[i], (0, 2, 3, 1) if nhwc else (0, 3, 1, 2))
    return out


def parity_samples(specs: list[InputSpec], options: ExportOptions, example: tuple) -> list[tuple]:
    """The inputs parity runs on when no real held-out data was given (as check_parity makes them)."""
    from ..loading.inputs import make_samples

    return make_samples(specs, options.parity.samples, options.parity.seed, example)


def selection_samples(specs: list[InputSpec], options: ExportOptions, example: tuple, calibration: Any,
                      heldout: list[tuple] | None) -> list[tuple]:
    """--samples inputs the mixed-precision search chooses its model on: never those parity's
    verdict then reads (every held-out sample, or parity_samples), so that the verdict checks the
    choice instead of repeating the measure it was made by. Without real data: seeded random inputs
    drawn as parity's are, from a seed of their own and without the example input (parity's first).
    With real data: calibration samples spread evenly over those the sensitivity ranking does not
    read, then those (the held-out ones are all the verdict's: a labelled split's accuracy reads every
    one). Spread, since data comes in order (by class, by time): the Silero VAD's chunks 8-15, the
    start of its first clip, read 16.5 dB at int16 where chunks spread over the set read 18.6 dB.
    As many as parity reads: twice as many cost the random-weight YOLO11n's budget-bound search 74 of
    its 88 weight splits and moved EfficientNet-Lite0's held-out top-1 not at all (docs/BENCHMARKS.md 44)."""
    import torch

    from ..loading.inputs import make_samples
    from ..quantization.mixed_precision import SENSITIVITY_SAMPLES

    count = options.parity.samples
    if heldout is None:
        return make_samples(specs, count + 1, options.parity.seed + SELECTION_SEED_OFFSET, example)[1:]
    unranked, ranked = calibration.samples[SENSITIVITY_SAMPLES:], calibration.samples[:SENSITIVITY_SAMPLES]
    spread = [unranked[i] for i in evenly_spaced(len(unranked), count)]
    chosen = [*spread, *ranked[: count - len(spread)]]
    return [tuple(torch.from_numpy(np_array_copy(a)) for a in sample) for sample in chosen]


def evenly_spaced(available: int, count: int) -> list[int]:
    """min(count, available) distinct indices spread from the first to the last of ``available``."""
    if available <= 0 or count <= 0:
        return []
    if count >= available:
        return list(range(available))
    return [round(i * (available - 1) / (count - 1)) if count > 1 else 0 for i in range(count)]


def calibration_sets(options: ExportOptions, specs: list[InputSpec], example: tuple) -> tuple[Any, list[tuple] | None]:
    """Calibration samples, and held-out real samples for parity (None: parity uses seeded random
    inputs, which are never the calibration inputs). Synthetic samples are drawn like ``example``
    (PyTorch's layout), as parity's random inputs are."""
    calibration, parity, _ = labelled_calibration_sets(options, specs, example)
    return calibration, parity


def labelled_calibration_sets(options: ExportOptions, specs: list[InputSpec], example: tuple) -> tuple[Any, list[tuple] | None, Any]:
    """calibration_sets, and the held-out samples' labels (a HeldOutLabels) when the data carries
    labels: then --holdout-fraction of every class is held out (quantization/calibration_labels.py)."""
    import torch

    from ..quantization import DEFAULT_CALIBRATION_SAMPLES, load_calibration_data, synthetic_calibration

    if options.quantization.calibration_data:
        # --calibration-samples N reads the files of N samples and of the held-out ones, no more: a
        # folder is bounded by what it decodes to (quantization/calibration_bounds.py), and N is
        # the way under that bound
        wanted = options.quantization.calibration_samples + options.parity.samples if options.quantization.calibration_samples else None
        data = load_calibration_data(
            options.quantization.calibration_data,
            specs,
            image_size=options.quantization.image_size,
            mean=options.quantization.mean,
            std=options.quantization.std,
            layout=options.quantization.image_layout,
            max_samples=wanted,
        )
        if len(data) < 2:
            raise UsageError(
                f"The calibration data {options.quantization.calibration_data} holds {len(data)} sample; at least 2 are needed "
                "(some are held out to check parity on inputs the model was not calibrated on).",
                "Add more samples.",
            )
        labels = None
        if data.labels is not None:
            from ..quantization.calibration_labels import split_labelled

            calibration, holdout, labels = split_labelled(data, options.quantization.holdout_fraction)
        else:
            calibration, holdout = data.split(holdout_count(len(data), options))
        calibration = calibration.limit(options.quantization.calibration_samples)
        if labels is not None:
            from dataclasses import replace

            labels = replace(labels, calibration_samples=len(calibration))
        parity = [tuple(torch.from_numpy(np_array_copy(a)) for a in sample) for sample in holdout.samples]
        return calibration, parity, labels
    n = options.quantization.calibration_samples or DEFAULT_CALIBRATION_SAMPLES
    # a seed apart from the parity inputs' seed, so parity never runs on calibration inputs
    calibration = synthetic_calibration(specs, n, seed=options.parity.seed + 1_000_003, like=example, layout=options.quantization.image_layout)
    return calibration, None, None


def holdout_count(available: int, options: ExportOptions) -> int:
    """How many of the real samples parity checks instead of calibrating on: --samples of them, but
    at most a quarter of the data, or, with --calibration-samples, what is left after those."""
    left = available - options.quantization.calibration_samples if options.quantization.calibration_samples else available // 4
    return min(options.parity.samples, max(1, left))


def np_array_copy(a: Any) -> Any:
    return np.ascontiguousarray(np.array(a, copy=True))


def calibration_in_layout(calibration: Any, nhwc_inputs: Sequence[int]) -> Any:
    """The wrapped module takes NHWC for the channels-last inputs: move the samples there too."""
    if not nhwc_inputs:
        return calibration
    from ..quantization import CalibrationSet

    moved = tuple(tuple(to_layout(list(sample), nhwc_inputs, nhwc=True)) for sample in calibration.samples)
    moved = tuple(tuple(np.ascontiguousarray(a) for a in sample) for sample in moved)
    return CalibrationSet(moved, calibration.source, calibration.real_data)


def heldout_in_layout(samples: Sequence[tuple], nhwc_inputs: Sequence[int]) -> list[tuple]:
    """Held-out torch samples as contiguous numpy arrays in the converted model's layout."""
    return [tuple(np.ascontiguousarray(a) for a in to_layout([t.numpy() for t in sample], nhwc_inputs, nhwc=True)) for sample in samples]
