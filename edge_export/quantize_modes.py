"""The quantization modes: one table every consumer reads (issue 37).

Each ``--quantize`` mode is one ``ModeSpec`` in ``MODES``, keyed by its name (``QuantizeMode``'s
value): what it is, the backends that make it (in ``auto``'s order), their recipes, its default
parity thresholds, whether it calibrates and promises integer kernels, why it can be slower than
float on the host, and how a flatbuffer at that precision is recognised. A new mode is one entry
here plus its tests; the code that used to compare against enum members asks ``mode_spec(mode)``.

This module imports nothing from the package (config.py reads it lazily for the thresholds, and
the CLI's path must stay light): the thresholds are kept as ``Thresholds`` keyword arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["MODES", "ModeSpec", "mode_spec", "slower_because"]

# fb: a FlatbufferModel; activations and constants: its tensors split by is_constant.
Detector = Callable[[Any, Sequence[Any], Sequence[Any]], bool]


@dataclass(frozen=True)
class ModeSpec:
    """One ``--quantize`` mode."""

    name: str  # the --quantize value (QuantizeMode's value)
    description: str
    thresholds: Mapping[str, float]  # config.Thresholds keyword arguments: the mode's default gates
    reads_as: Detector  # a flatbuffer at this precision (stages/precision.infer_precision)
    detect_rank: int  # the order reads_as is tried in (lowest first): the more specific precision first
    integer: bool = False  # integer weights (the report's io_dtype, --host-latency, the GPU target's refusal)
    calibrates: bool = False  # activation ranges come from calibration samples
    activations: str | None = None  # the integer activation dtype ("int8", "int16"); None: float at run time
    # Backends that make this mode, in auto's order (quantization.engine.backends_for); () for the
    # plain conversions (fp32, fp16), which quantize_model does not handle.
    backends: tuple[str, ...] = ()
    flatbuffer_recipe: str | None = None  # ai-edge-quantizer's recipe (flatbuffer_recipes.py)
    pt2e_recipe: str | None = None  # how the report names PT2E's config
    first_success: bool = False  # auto stops at the first backend that works instead of measuring all
    sole_backend_reason: str | None = None  # the report's reason when one backend is all there is
    integer_io: bool = False  # --io-dtype int8/uint8 applies (full-integer inputs and outputs)
    promises_full_integer: bool = False  # a float tensor left in the model is warned about
    fp16_weights: bool = False  # a plain conversion with float16 weights (the converter's fp16 config)
    slower_because: str | None = None  # why it can run slower than fp32 on a desktop CPU (latency note)

    @property
    def quantized(self) -> bool:
        """Made by quantize_model (a backend and its recipe), not by the plain conversion."""
        return bool(self.backends)

    @property
    def activation_bits(self) -> int | None:
        return {"int8": 8, "int16": 16}.get(self.activations or "")


def _any_quantized(tensors: Sequence[Any], *dtypes: str) -> bool:
    return any(t.dtype in dtypes and t.quant for t in tensors)


# Thresholds per precision (README's threshold table is this table). fp32 is strict (the converter
# reorders float math, so not bit-exact); fp16 weights lose ~3 decimal digits; int modes are judged by
# SQNR, cosine, top-k and neighbours since absolute error depends on the output range. int8's 20 dB
# floor is loose on purpose: parity runs on random inputs. Top-1/top-5 are not gated at fp32/fp16,
# where the error gates are far stricter. Neighbour agreement below 1 tolerates a flip between two
# samples that are almost equally near in PyTorch (7 of 8 is 0.875). Probabilities (softmax/sigmoid
# outputs) are judged by their decisions, gated at every precision: int8's 0.9 fails the pitch model
# whose argmax agreed on 72.7% of frames, and PyTorch's near-ties (within one int8 probability step,
# validators/probabilities.DECISION_TIE_MARGIN) count as agreement, so the gate sees real flips only;
# a gate that would demand every one of n decisions allows one (probabilities.decision_slack: 7 of 8).
# The probability error is one line, 0.05, at int8 and int16x8: it bounds how far a probability may
# move before decisions near a threshold flip, which no precision changes (int16x8's 0.01 failed
# models with every decision kept, CREPE 0.011 and MTCNN R-Net 0.021, while their int8 models passed;
# P-Net int8's 0.18 lost faces). fp32's atol grows to 2e-3 of the output's largest |value|
# (scaled_atol): YOLO11n's boxes reach 800 px and were off by 0.71-0.82 px (1e-3) with every IoU 1.000;
# 60 dB SQNR already allows an RMS error of 1e-3 of the RMS value, so on large outputs atol adds a
# bound on one outlying value of the same order, not a stricter one. int16x8's worst-sample cosine
# 0.9975 lies between MiniLM's 0.9984 (every neighbour kept on held-out sentences) and Resemblyzer's
# 0.9964 (neighbour agreement 0.92 over 60 utterances); classification's cosine is bounded by 30 dB.
# A classifier checked on real calibration data also has its expected top-1 agreement gated at 0.95
# (validators/expected_top1.py), the bound the trained-model benchmark holds a shipped classifier to:
# eight parity samples cannot see a flip rate of 10%, the error and PyTorch's margins on the real
# samples can (EfficientNet-Lite0 on the Edge TPU: 0.903 expected, 0.906 of 96 held-out crops).
# A sigmoid's detections on real data (validators/positive_agreement.py) are gated at an expected
# intersection over union of 0.9: the benchmark's bound for a detector (95% of PyTorch's detections
# kept, at most 5% added) is an intersection over union of at least 0.95 / 1.05 = 0.905.
_INT8_THRESHOLDS = dict(
    min_sqnr_db=20.0, min_cosine=0.99, min_top1=0.75, min_top5=0.85, min_neighbour_agreement=0.75,
    min_decision_agreement=0.9, max_probability_error=0.05, min_expected_top1=0.95, min_expected_positive_agreement=0.9,
)

_SPECS = (
    ModeSpec(
        name="none", description="float32: the converted model as is",
        thresholds=dict(
            atol=1e-4, atol_relative=2e-3, min_sqnr_db=60.0, min_cosine=0.99999, min_neighbour_agreement=0.85,
            min_decision_agreement=0.99, max_probability_error=1e-4,
        ),
        reads_as=lambda fb, activations, constants: True, detect_rank=99,
    ),
    ModeSpec(
        name="fp16", description="float16 weights, float32 computation where the runtime chooses",
        thresholds=dict(
            atol=5e-2, min_sqnr_db=35.0, min_cosine=0.999, min_neighbour_agreement=0.85,
            min_decision_agreement=0.99, max_probability_error=1e-2,
        ),
        reads_as=lambda fb, activations, constants: any(t.dtype == "float16" for t in constants), detect_rank=5,
        fp16_weights=True,
    ),
    ModeSpec(
        name="dynamic-int8", description="int8 weights, float activations quantized at every call",
        thresholds=_INT8_THRESHOLDS,
        reads_as=lambda fb, activations, constants: _any_quantized(constants, "int8"), detect_rank=4,
        integer=True,
        # Both backends emit the same dynamic-range kernels; parity differed by < 0.5 dB on the
        # models measured, and the flatbuffer recipe is 10-50x faster. PT2E is the fallback.
        backends=("flatbuffer", "pt2e"), flatbuffer_recipe="dynamic_wi8_afp32",
        pt2e_recipe="pt2e_dynamic_per_channel_symmetric", first_success=True,
        slower_because="dynamic-range kernels quantize activations at every call, and XNNPACK's int8 kernels on this CPU are slower than its float ones",
    ),
    ModeSpec(
        name="int8", description="full integer: int8 weights and activations, calibrated",
        thresholds=_INT8_THRESHOLDS,
        reads_as=lambda fb, activations, constants: fb.is_fully_integer or _any_quantized(activations, "int8", "uint8"),
        detect_rank=2, integer=True, calibrates=True, activations="int8",
        # The flatbuffer recipe first: on the benchmark models it takes a fraction of PT2E's time (PT2E
        # exports, calibrates in PyTorch and lowers again), so a result that already meets the target
        # costs only that.
        backends=("flatbuffer", "pt2e"), flatbuffer_recipe="static_wi8_ai8",
        pt2e_recipe="pt2e_static_per_channel_symmetric", integer_io=True, promises_full_integer=True,
        slower_because="on this CPU XNNPACK's int8 kernels are slower than its float ones for depthwise and narrow convolutions, and int8 operators XNNPACK does not take run on LiteRT's slower built-in kernels",
    ),
    ModeSpec(
        name="int16x8", description="int8 weights, int16 activations, calibrated",
        # int16x8's worst-sample cosine: see the comment above _INT8_THRESHOLDS.
        thresholds=dict(
            min_sqnr_db=30.0, min_cosine=0.9975, min_top1=0.85, min_top5=0.95, min_neighbour_agreement=0.85,
            min_decision_agreement=0.95, max_probability_error=0.05, min_expected_top1=0.95,
            min_expected_positive_agreement=0.9,
        ),
        reads_as=lambda fb, activations, constants: _any_quantized(activations, "int16"), detect_rank=1,
        integer=True, calibrates=True, activations="int16",
        backends=("flatbuffer",), flatbuffer_recipe="static_wi8_ai16",  # litert-torch's PT2E lowering is int8 only
        slower_because="XNNPACK has no int16x8 kernels: the model runs LiteRT's built-in ones, far slower than XNNPACK's float kernels",
    ),
    ModeSpec(
        name="int4", description="channelwise int4 weights, float activations quantized at run time (phones)",
        # int4 weights have 16 levels: each layer's weight error is ~24 dB worse than int8's, so a
        # random-weight small CNN or transformer reads 17-20 dB (docs/BENCHMARKS.md section 15).
        thresholds=dict(
            min_sqnr_db=15.0, min_cosine=0.97, min_top1=0.6, min_top5=0.75, min_neighbour_agreement=0.6,
            min_decision_agreement=0.8, max_probability_error=0.1,
        ),
        reads_as=lambda fb, activations, constants: _any_quantized(constants, "int4"), detect_rank=3,
        integer=True, backends=("flatbuffer",), flatbuffer_recipe="dynamic_wi4_afp32",
        sole_backend_reason="int4 weights come from ai-edge-quantizer only (the flatbuffer backend)",
        slower_because="int4 weights are unpacked by LiteRT's built-in kernels, which XNNPACK's float kernels outrun on this CPU",
    ),
)

# Keyed by the mode's name, in the order the CLI lists them. A plain dict, not a frozen mapping, so
# that a test can add a mode for the length of one test (monkeypatch.setitem).
MODES: dict[str, ModeSpec] = {spec.name: spec for spec in _SPECS}
del _SPECS


def mode_spec(mode: Any) -> ModeSpec:
    """The table's entry for ``mode`` (a QuantizeMode or its name). KeyError for a name not in it."""
    return MODES[str(getattr(mode, "value", mode))]


def slower_because(name: str | None) -> str | None:
    """Why kernels of mode ``name`` can be slower than float ones on this host; None when the table
    has no note (or no such mode)."""
    spec = MODES.get(name or "")
    return spec.slower_because if spec is not None else None
