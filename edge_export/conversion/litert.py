"""Convert a PyTorch module to LiteRT flatbuffer bytes with litert-torch.

litert-torch traces the module with torch.export itself; we let it, so that the model is traced once
(tracing twice would cost up to a third of the export time on a ResNet-sized model). Its failures
are sorted into tracing failures (TraceError) and lowering failures (ConversionError) and located
with ``diagnosis.locate_failure``.
"""

from __future__ import annotations

from typing import Any

from ..graph.channels_last import ChannelsLastPlan, plan_channels_last  # noqa: F401  (re-exported)
from .diagnosis import CONVERTER_PASS_REASON, FailureLocation, is_trace_failure, locate_failure
from ..errors import ConversionError, TraceError
from ..processes.library_output import quiet_libraries

__all__ = [
    "ChannelsLastPlan",
    "plan_channels_last",
    "wrap_channels_last",
    "convert_module",
    "check_converted_model",
    "fold_layout_transposes",
    "fp16_quant_config",
]


def wrap_channels_last(module: Any, plan: ChannelsLastPlan) -> Any:
    """NHWC I/O for the planned inputs/outputs. An nn.Module is wrapped (litert-torch's
    to_channel_last_io); a GraphModule from an ExportedProgram gets the permutes written into its
    own graph instead, because re-tracing a wrapped GraphModule drops the nn.Module paths that
    the flatbuffer's tensor names (and so per-layer parity and the Edge TPU report) rely on."""
    import torch

    if isinstance(module, torch.fx.GraphModule):
        from ..passes.fx.permute_io_channels_last_pass import permute_io_channels_last_pass

        return permute_io_channels_last_pass(module, plan)
    import litert_torch

    return litert_torch.to_channel_last_io(module, args=list(plan.inputs), outputs=list(plan.outputs))


def fold_layout_transposes(model_bytes: bytes) -> bytes:
    """The converter's model with the TRANSPOSEs its layout pass leaves inside a NHWC graph
    removed (``passes.flatbuffer.LAYOUT_PASSES``: exact rewrites), or the
    same bytes when it has no TRANSPOSE. Every conversion goes through here, so the float model,
    both quantization backends and every target start from the same graph."""
    if not _has_transpose(model_bytes):  # read without unpacking: a large model costs nothing
        return model_bytes
    from ..flatbuffer import pack_model, read_model
    from ..passes.flatbuffer import LAYOUT_PASSES

    model = read_model(model_bytes)
    changed = [p(model) for p in LAYOUT_PASSES]
    return pack_model(model, source=model_bytes) if any(changed) else model_bytes


def reset_lstm_states(model_bytes: bytes) -> bytes:
    """The model with a FILL zeroing each fused LSTM's state before every invocation
    (``passes.flatbuffer.reset_lstm_states_pass``: otherwise each call starts from the previous
    call's final state), or the same bytes when it has no UNIDIRECTIONAL_SEQUENCE_LSTM."""
    from ..flatbuffer import has_builtin_operator

    if not has_builtin_operator(model_bytes, "UNIDIRECTIONAL_SEQUENCE_LSTM"):
        return model_bytes
    from ..flatbuffer import pack_model, read_model
    from ..passes.flatbuffer.reset_lstm_states_pass import reset_lstm_states_pass

    model = read_model(model_bytes)
    return pack_model(model, source=model_bytes) if reset_lstm_states_pass(model) else model_bytes


def _has_transpose(model_bytes: bytes) -> bool:
    from ..flatbuffer import has_builtin_operator

    return has_builtin_operator(model_bytes, "TRANSPOSE")


def fp16_quant_config() -> Any:
    """fp16 weights (the converter inserts DEQUANTIZE to float32 for compute on CPU)."""
    from litert_torch.generative.quantize import quant_recipes

    return quant_recipes.full_fp16_recipe()


def _trace_for_diagnosis(module: Any, args: tuple, strict: bool) -> Any:
    """Trace again only on the failure path, to map the failing node to its nn.Module."""
    import torch

    try:
        return torch.export.export(module, args, strict=strict).graph_module
    except Exception:  # diagnosis only: without a graph the error names no module, and is still raised
        return None


def _hint_for(loc: FailureLocation, tracing: bool) -> str:
    reason = loc.reason.lower()
    if tracing and ("data-dependent" in reason or "guard" in reason):
        return (
            "The model's control flow depends on tensor values, which torch.export cannot trace: "
            "replace the Python `if` on a tensor with torch.where or torch.cond, or move the branch "
            "out of forward()."
        )
    if tracing:
        return (
            "Try --strict (or drop it) to switch torch.export's tracing mode, check that forward() "
            "accepts the given --input-shape values, or run with --debug for the full traceback."
        )
    if "complex" in reason:
        return "LiteRT has no complex tensors: replace complex ops (e.g. torch.fft) with real-valued math."
    if loc.reason.startswith(CONVERTER_PASS_REASON):  # an MLIR pass refused what litert-torch lowered
        return (
            "litert-torch lowered the operation, and one of LiteRT's converter passes refused the result: "
            "a converter limitation, not a problem with your file. Write the line it names another way "
            "(the same math with other operators), or run with --debug and report it to litert-torch."
        )
    return (
        "The operator has no LiteRT lowering in this litert-torch version: replace it with supported "
        "ops (see litert-torch's supported-op list), or run with --debug for the full traceback."
    )


def check_converted_model(model_bytes: bytes) -> None:
    """The converter's output is not the user's file: a model LiteRT cannot allocate is a runtime
    error (exit 3) naming the module the tensor came from, and any other failed check a conversion
    error (exit 3), never a "truncated or corrupted" bad input."""
    from ..errors import FlatbufferError, RuntimeRunError
    from ..flatbuffer import OversizedTensorError, read_flatbuffer
    from ..graph.provenance import describe_location, tensor_module

    try:
        read_flatbuffer(model_bytes, origin="the converted model")
    except OversizedTensorError as exc:
        found = tensor_module(exc.tensor_name)
        where = describe_location(found.path, found.type_name, None) if found else ""
        raise RuntimeRunError(
            f"litert-torch converted the model into one LiteRT cannot allocate: a tensor{where} has shape "
            f"{exc.shape} ({exc.nbytes / 2**30:.1f} GiB), more than a LiteRT tensor can hold (2 GB).",
            "A pooling or padding far larger than its input is the usual cause: write it as the "
            "operation it amounts to (a window covering the whole input is a mean over H and W), or "
            "make the input smaller.",
        ) from exc
    except FlatbufferError as exc:
        raise ConversionError(
            f"litert-torch wrote a model that fails LiteRT's checks: {exc.message}",
            "This is a converter problem, not your model file: run with --debug and report it to litert-torch.",
        ) from exc


def convert_module(
    module: Any,
    example_inputs: tuple,
    *,
    strict: bool = False,
    quant_config: Any = None,
    verbose: bool = False,
) -> bytes:
    """Trace and convert; return the flatbuffer bytes. Raises TraceError or ConversionError, or
    RuntimeRunError for a model LiteRT cannot allocate (``check_converted_model``)."""
    with quiet_libraries(verbose) as captured:
        try:
            import litert_torch

            edge_model = litert_torch.convert(
                module, tuple(example_inputs), strict_export=strict, quant_config=quant_config
            )
            converted = bytes(edge_model.model_content())
        except Exception as exc:  # boundary: conversion runs the user's forward() and litert-torch's passes
            # (mapped here by hand, not with map_exceptions: the failing node is located first)
            tracing = is_trace_failure(exc)
            loc = locate_failure(exc, _trace_for_diagnosis(module, tuple(example_inputs), strict))
            failure = exc
        else:
            check_converted_model(converted)  # outside the handler: its errors are already ours
            failure = None
    if failure is None:  # our own rewrites, outside the boundary: a bug in them is not the model's failure
        return reset_lstm_states(fold_layout_transposes(converted))
    stage = "Tracing the model with torch.export" if tracing else "Converting the traced graph to LiteRT"
    where = loc.describe()
    message = f"{stage} failed" + (f" {where}" if where else "") + f". PyTorch says: {loc.reason}"
    err = (TraceError if tracing else ConversionError)(message, _hint_for(loc, tracing))
    err.location = loc  # type: ignore[attr-defined]
    err.library_output = captured.text  # type: ignore[attr-defined]
    raise err from failure
