"""Full-integer int8 for models with LiteRT's fused UNIDIRECTIONAL_SEQUENCE_LSTM, through TFLite's
own calibrator and quantizer (ai-edge-litert's ``_pywrap_tensorflow_lite_calibration_wrapper``).

ai-edge-quantizer has no recipe for the fused LSTM (its algorithm manager names no LSTM operator),
and PT2E does not see inside it (edge-export's ``edge_export::sequence_lstm`` operator). TFLite's
quantizer implements LiteRT's integer LSTM: int8 weights and activations, an int16 cell state, and
the five gate intermediates it adds and calibrates itself (``AddIntermediateTensors``). It reads an
LSTM state as a variable tensor that nothing writes, so the FILLs that reset the states
(``reset_lstm_states_pass``) are removed for it and put back on its result. It has no 16x8 LSTM
("Quantization to 16x8-bit not yet supported for op: 'UNIDIRECTIONAL_SEQUENCE_LSTM'"), so int16x8
is refused here rather than left half float.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..errors import QuantizationError, UsageError, map_exceptions

__all__ = ["float_lstm_warnings", "has_sequence_lstm", "takes_sequence_lstm_model", "quantize_sequence_lstm_model"]

# The operators TFLite's quantizer is trusted with beside the LSTM: an allow-list, since some of its
# int8 kernels are wrong without saying so (an L2 norm's SUM and SQRT came out at 1.3 dB SQNR,
# where ai-edge-quantizer, leaving the LSTM float, gave 38.6 dB). A model with any other operator
# goes to ai-edge-quantizer as before (its LSTM stays float).
_TRUSTED = frozenset({
    "UNIDIRECTIONAL_SEQUENCE_LSTM", "FILL", "FULLY_CONNECTED", "CONV_2D", "DEPTHWISE_CONV_2D", "ADD", "SUB", "MUL",
    "CONCATENATION", "RESHAPE", "SLICE", "STRIDED_SLICE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "REVERSE_V2",
    "PACK", "UNPACK", "SPLIT", "SPLIT_V", "GATHER", "PAD", "MEAN", "AVERAGE_POOL_2D", "MAX_POOL_2D",
    "LOGISTIC", "TANH", "RELU", "RELU6", "SOFTMAX", "QUANTIZE", "DEQUANTIZE",
})


def has_sequence_lstm(model_bytes: bytes) -> bool:
    from ..flatbuffer import has_builtin_operator

    return has_builtin_operator(model_bytes, "UNIDIRECTIONAL_SEQUENCE_LSTM")


def takes_sequence_lstm_model(model_bytes: bytes) -> bool:
    """True when the model has a fused LSTM and TFLite's quantizer is trusted with every operator."""
    from ..flatbuffer import read_flatbuffer

    if not has_sequence_lstm(model_bytes):
        return False
    return set(read_flatbuffer(model_bytes, origin="the float model").op_counts) <= _TRUSTED


def float_lstm_warnings(check: object, mode: str, backend: str, opcodes: Sequence[str]) -> tuple[str, ...]:
    """Why a fused LSTM left float by a quantized export is float, and what makes it integer
    (``check``: the model's IntegerCheck; ``opcodes``: every operator of the model). LiteRT's
    UNIDIRECTIONAL_SEQUENCE_LSTM computes in integers only with int8 activations and an int16
    cell state: its Prepare takes the integer path when the input is int8, and an int16 input with
    int8 weights has no kernel (tflite/kernels/unidirectional_sequence_lstm.cc)."""
    modules = [e.module for e in check.float_operators if e.opcode == "UNIDIRECTIONAL_SEQUENCE_LSTM"]  # type: ignore[attr-defined]
    if not modules or mode not in ("int8", "int16x8"):  # dynamic-int8 keeps float activations by design
        return ()
    named = [m or "the top-level forward()" for m in modules if m is not None]  # None: no tensor name says
    where = f", in {', '.join(dict.fromkeys(named))}" if named else ""
    flags = f"--quantize {mode}" + (" --quant-backend pt2e" if backend == "pt2e" and mode == "int8" else "")
    lead = f"The fused LSTM (UNIDIRECTIONAL_SEQUENCE_LSTM{where}) stays float under {flags}"
    others = sorted(set(opcodes) - _TRUSTED)
    untrusted = (f"TFLite's quantizer, the one that writes LiteRT's integer LSTM, is not trusted with {', '.join(others)} "
                 "(some of its int8 kernels are wrong without saying so)")
    if mode == "int16x8":
        why = ("LiteRT has no kernel for an LSTM with 16-bit activations (its integer LSTM takes int8 "
               "activations with an int16 cell state), and neither quantizer writes one. "
               + (f"--quantize int8 would not make it integer here either: {untrusted}" if others
                  else "--quantize int8 makes it fully integer"))
    elif backend == "pt2e":
        why = ("PT2E does not quantize inside the fused operator; --quant-backend flatbuffer or auto "
               "quantizes it fully integer through TFLite's quantizer (int8 activations, an int16 cell state)"
               + (f", except that {untrusted}" if others else ""))
    else:
        why = f"ai-edge-quantizer has no LSTM recipe, and {untrusted}; computing those outside the model makes it fully integer"
    return (f"{lead}: {why}.",)


def _without_state_resets(model_bytes: bytes) -> bytes:
    from ..flatbuffer import pack_model, read_model
    from ..passes.flatbuffer.reset_lstm_states_pass import drop_lstm_state_resets

    model = read_model(model_bytes)
    return pack_model(model, source=model_bytes) if drop_lstm_state_resets(model) else model_bytes


def quantize_sequence_lstm_model(float_model: bytes, samples: Sequence[Sequence[np.ndarray]], activations: str = "int8") -> bytes:
    """The float model (as ``conversion.convert_module`` wrote it) quantized to int8 with float32
    I/O, calibrated on ``samples`` (each one array per model input, in input order). Fully integer
    when TFLite's quantizer has an int8 kernel for every operator; otherwise the operators it has
    none for (a DIV by a computed norm) stay float between a DEQUANTIZE and a QUANTIZE, which the
    export's integer check reports, as it does for ai-edge-quantizer's float leftovers."""
    if activations != "int8":
        raise UsageError(
            f"{activations} activations are not available for a model with a fused LSTM: TFLite's "
            "quantizer, the one that implements LiteRT's integer LSTM, has no 16x8 LSTM.",
            "Use --quantize int8 (int8 weights and activations, an int16 cell state), or keep the model float.",
        )
    if not samples:
        raise UsageError("Quantizing a fused LSTM needs calibration samples; none were given.",
                         "Pass calibration data, or let edge-export draw synthetic samples.")
    from ai_edge_litert import _pywrap_tensorflow_lite_calibration_wrapper as calibration

    from ..conversion.litert import reset_lstm_states

    # Kept in a name until the end: the wrapper reads the model from these bytes without copying
    # them (a temporary here was freed under it: SIGSEGV on the first FeedTensor).
    model = calibration.AddIntermediateTensors(_without_state_resets(float_model))
    calibrator = calibration.CalibrationWrapper(model, [], [])
    calibrator.Prepare([list(np.shape(a)) for a in samples[0]])
    for sample in samples:
        calibrator.FeedTensor([np.ascontiguousarray(a, dtype=np.float32) for a in sample])
    try:
        quantized = _quantize(calibrator, allow_float=False)
    except RuntimeError:  # "Quantization not yet supported for op: 'DIV'"
        with map_exceptions({RuntimeError: QuantizationError}, "TFLite's quantizer could not quantize the fused-LSTM model: {error}",
                            "Run with --verbose for its output, or keep the model float."):
            quantized = _quantize(calibrator, allow_float=True)
    del calibrator, model  # the wrapper first: it reads ``model``
    return reset_lstm_states(_cap_cell_state_scales(bytes(quantized)))


# LiteRT's integer LSTM takes an int16 cell state with a power-of-two scale of at most 2**-9
# (|c| < 64): the quantizer gave a trained LSTM's cells (|c| up to 92) 2**-7, and those layers
# came out as noise (-0.8 dB SQNR from the first steps; the first layer, 2**-10, 48 dB). Capped,
# the cell saturates at 64, where tanh(c) is 1 to float precision: 49 dB.
_CELL_SCALE_CAP = 2.0**-9


def _cap_cell_state_scales(model_bytes: bytes) -> bytes:
    from ..flatbuffer import pack_model, read_model
    from ..passes.flatbuffer.graph_edits import opcode_name

    model = read_model(model_bytes)
    sg, changed = model.subgraphs[0], False
    for op in sg.operators:
        if opcode_name(model, op) != "UNIDIRECTIONAL_SEQUENCE_LSTM" or op.inputs[19] < 0:
            continue
        q = sg.tensors[op.inputs[19]].quantization
        if q is not None and q.scale is not None and len(q.scale) == 1 and q.scale[0] > _CELL_SCALE_CAP:
            q.scale, changed = [_CELL_SCALE_CAP], True
    return pack_model(model, source=model_bytes) if changed else model_bytes


def _quantize(calibrator: object, *, allow_float: bool) -> bytes:
    f32, i8, i32 = (np.dtype(t).num for t in (np.float32, np.int8, np.int32))
    # (input type, output type, allow float, activations, bias, no per-channel, no per-channel FC)
    return calibrator.QuantizeModel(f32, f32, allow_float, i8, i32, False, False)  # type: ignore[attr-defined]
