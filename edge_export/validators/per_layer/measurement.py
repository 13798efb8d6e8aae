"""Measurement: SQNR and cosine per matched layer over the samples, the first jump, the gate.

Each row's flatbuffer tensor is brought to the PyTorch layout (``choose_layouts``) and compared
with the owning module's output; metrics are the mean over the samples of each sample's SQNR (dB)
and cosine. Samples are measured one at a time, so that memory holds one sample's activations.

The jump (the likely culprit)
-----------------------------
Layers are walked in flatbuffer execution order. A layer is the *first jump* when its SQNR is below
``jump_floor_db`` (default 30 dB, the level PyTorch's own int8 tests ask for) **and** it is either
the first compared layer or its SQNR is more than ``jump_drop_db`` (default 10 dB, i.e. 10x the
noise power) below the previous compared layer's. Both conditions are needed: a float model's
layers sit at 100+ dB and may drop by tens of dB between layers without meaning anything, and an
int8 model's SQNR declines slowly through the network without any one layer being at fault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...flatbuffer import TensorInfo
from ..metrics import cosine_similarity, sqnr_db
from .capture import CapturedCall, CapturedSample, ModuleKey
from .layout import apply_layout, layout_candidates
from .matching import LayerMatch
from .results import JUMP_DROP_DB, JUMP_FLOOR_DB, LayerParity, LayerParityReport

__all__ = ["choose_layouts", "first_jump_index", "measure_layers"]

# A less likely layout wins only when its cosine is better by more than this.
_LAYOUT_TIE_COSINE = 0.05
# Unmatched tensor names listed in the report, beyond which only the count is given.
_MAX_LISTED = 50


def choose_layouts(
    tensors: Sequence[TensorInfo],
    calls: Mapping[ModuleKey, CapturedCall],
    rows: Mapping[int, Sequence[ModuleKey]],
    values: Mapping[int, np.ndarray],
) -> dict[int, tuple[str, Any]]:
    """Pick one layout per row's tensor; shapes decide where they can, values only break real ties.

    A tie (C == H, or H == W in a square image) is settled first by the permutation that the
    model's unambiguous tensors of the same rank needed (the converter uses one layout throughout),
    then by cosine on the first sample (``values``), preferring the more likely candidate unless
    another is clearly better: a damaged layer must not be "explained" by a permutation the
    converter never makes.
    """
    cands_of: dict[int, list[tuple[str, Any]]] = {}
    votes: dict[int, dict[str, int]] = {}
    for t, keys in rows.items():
        c = calls[keys[0]]
        cands = layout_candidates(tensors[t].shape, tuple(int(d) for d in c.output.shape))
        cands_of[t] = cands
        if len(cands) == 1:
            rank_votes = votes.setdefault(len(tensors[t].shape), {})
            rank_votes[cands[0][0]] = rank_votes.get(cands[0][0], 0) + 1
    chosen: dict[int, tuple[str, Any]] = {}
    for t, keys in rows.items():
        cands = cands_of[t]
        if len(cands) == 1:
            chosen[t] = cands[0]
            continue
        rank_votes = votes.get(len(tensors[t].shape), {})
        if rank_votes:
            favourite = max(rank_votes, key=rank_votes.get)
            match = [lh for lh in cands if lh[0] == favourite]
            if match:
                chosen[t] = match[0]
                continue
        c = calls[keys[0]]
        torch_shape = tuple(int(d) for d in c.output.shape)
        ref0, out0 = c.output.float().cpu().numpy(), values[t]
        scores = [cosine_similarity(ref0, apply_layout(out0, how, torch_shape)) for _, how in cands]
        best = max(scores)
        chosen[t] = next(lh for lh, sc in zip(cands, scores) if sc >= best - _LAYOUT_TIE_COSINE)
    return chosen


def first_jump_index(
    sqnrs: Sequence[float], *, drop_db: float = JUMP_DROP_DB, floor_db: float = JUMP_FLOOR_DB
) -> int | None:
    """Index of the first layer below ``floor_db`` that is the first layer or dropped more than
    ``drop_db`` below the layer before it (see the module docstring); None when there is none."""
    for i, value in enumerate(sqnrs):
        if value >= floor_db:
            continue
        if i == 0 or sqnrs[i - 1] - value > drop_db:
            return i
    return None


def _accumulate(
    match: LayerMatch,
    reference: Mapping[ModuleKey, CapturedCall],
    layouts: Mapping[int, tuple[str, Any]],
    sample: CapturedSample,
    sq: dict[int, list[float]],
    cs: dict[int, list[float]],
) -> None:
    """Add one sample's SQNR and cosine to each row's lists."""
    for t, keys in match.rows.items():
        c = sample.calls.get(keys[0])
        if c is None or c.output is None or t not in sample.tensors:
            continue  # the module did not run on this sample (data-dependent control flow)
        ref = c.output.float().cpu().numpy()
        torch_shape = tuple(ref.shape)
        if torch_shape != tuple(int(d) for d in reference[keys[0]].output.shape):
            continue
        got = apply_layout(sample.tensors[t], layouts[t][1], torch_shape)
        sq[t].append(sqnr_db(ref, got))
        cs[t].append(cosine_similarity(ref, got))


def measure_layers(
    tensors: Sequence[TensorInfo],
    match: LayerMatch,
    first: CapturedSample,
    later: Iterable[CapturedSample],
    *,
    n_samples: int,
    jump_drop_db: float = JUMP_DROP_DB,
    jump_floor_db: float = JUMP_FLOOR_DB,
    min_sqnr_db: float | None = None,
) -> LayerParityReport:
    """Measure every row over the first (matched) sample and the later ones, and build the report."""
    calls = first.calls
    layouts = choose_layouts(tensors, calls, match.rows, first.tensors)
    sq: dict[int, list[float]] = {t: [] for t in match.rows}
    cs: dict[int, list[float]] = {t: [] for t in match.rows}
    _accumulate(match, calls, layouts, first, sq, cs)
    for sample in later:
        _accumulate(match, calls, layouts, sample, sq, cs)

    notes: list[str] = []
    rows: list[LayerParity] = []
    for t, keys in match.rows.items():
        c = calls[keys[0]]
        info = tensors[t]
        if c.calls > 1:
            notes.append(f"{c.path or '<model>'} runs {c.calls} times; its last call was compared.")
        rows.append(
            LayerParity(
                position=len(rows),
                module_path=c.path,
                module_type=c.module_type,
                tflite_tensor=info.name,
                tflite_index=t,
                opcode=match.graph.producer[t].opcode,
                shape=tuple(info.shape),
                dtype=info.dtype,
                torch_shape=tuple(int(d) for d in c.output.shape),
                layout=layouts[t][0],
                sqnr_db=float(np.mean(sq[t])),
                cosine=float(np.mean(cs[t])),
                also_outputs_of=tuple(calls[k].path or "<model>" for k in keys[1:]),
                fused_modules=tuple(match.fused_into.get(t, ())),
                passed=None if min_sqnr_db is None else bool(np.mean(sq[t]) >= min_sqnr_db),
            )
        )

    jump_at = first_jump_index([r.sqnr_db for r in rows], drop_db=jump_drop_db, floor_db=jump_floor_db)
    worst = min(rows, key=lambda r: r.sqnr_db) if rows else None

    order, named = match.graph.order, match.graph.named
    internal = [t for t in order if t not in match.rows and named[t]]
    unmatched_t = [t for t in order if t not in match.rows and not named[t]]
    return LayerParityReport(
        layers=tuple(rows),
        first_jump=rows[jump_at] if jump_at is not None else None,
        worst=worst,
        unmatched_modules=match.unmatched_modules,
        modules_total=sum(1 for c in calls.values() if c.output is not None),
        tensors_total=len(order),
        tensors_matched=len(match.rows),
        tensors_internal=len(internal),
        unmatched_tensors=tuple(tensors[t].name for t in unmatched_t[:_MAX_LISTED]),
        tensors_unmatched=len(unmatched_t),
        samples=n_samples,
        jump_drop_db=jump_drop_db,
        jump_floor_db=jump_floor_db,
        min_sqnr_db=min_sqnr_db,
        notes=tuple(notes),
    )
