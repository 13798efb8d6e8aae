"""Weight quantization recipes for the exported language model, applied by ai-edge-quantizer to
the float flatbuffer (no new export: seconds instead of a trace and conversion per recipe; this
is what litert-torch's ``quantization_recipe`` does internally, ``export_lib.quantize_model``).

    fp16          float16 weights (FLOAT_CASTING), float32 compute
    dynamic-int8  per-channel int8 weights, activations quantized at run time (dynamic_wi8_afp32)
    int4          blockwise int4 weights (--block-size 32/64/128/256), activations quantized at run
                  time; the embedding table, which no blockwise kernel reads, per-channel int4

Every recipe quantizes FULLY_CONNECTED (attention and MLP projections, lm_head) and
EMBEDDING_LOOKUP weights; ``weight_groups`` says, per group, what the bytes were and became.
``auto`` (pipeline.py) tries them smallest first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import QuantizationError, UsageError, first_line

__all__ = ["LLM_RECIPES", "AUTO_ORDER", "BLOCK_SIZES", "WeightGroup", "quantize_language_model", "weight_groups"]

LLM_RECIPES = ("none", "fp16", "dynamic-int8", "int4")
AUTO_ORDER = ("int4", "dynamic-int8", "fp16", "none")  # smallest first
BLOCK_SIZES = (32, 64, 128, 256)


def _recipe(mode: str, block_size: int) -> Any:
    from ai_edge_quantizer import qtyping, recipe_manager
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    ops = (qtyping.TFLOperationName.FULLY_CONNECTED, qtyping.TFLOperationName.EMBEDDING_LOOKUP)
    manager = recipe_manager.RecipeManager()
    for op in ops:
        if mode == "fp16":
            weight = qtyping.TensorQuantizationConfig(num_bits=16, dtype=qtyping.TensorDataType.FLOAT)
            config = qtyping.OpQuantizationConfig(weight_tensor_config=weight, compute_precision=qtyping.ComputePrecision.FLOAT, explicit_dequantize=True)
            manager.add_quantization_config(".*", op, config, algorithm_key=AlgorithmName.FLOAT_CASTING)
        elif mode == "dynamic-int8":
            manager.add_dynamic_config(".*", op, num_bits=8)
        else:
            blockwise = op == qtyping.TFLOperationName.FULLY_CONNECTED
            granularity = getattr(qtyping.QuantGranularity, f"BLOCKWISE_{block_size}") if blockwise else qtyping.QuantGranularity.CHANNELWISE
            manager.add_dynamic_config(".*", op, num_bits=4, granularity=granularity)
    return manager.get_quantization_recipe()


def quantize_language_model(float_tflite: bytes, mode: str, block_size: int = 32) -> bytes:
    """``float_tflite`` with ``mode``'s weights (``none`` returns it unchanged)."""
    if mode == "none":
        return float_tflite
    if mode not in LLM_RECIPES:
        raise UsageError(f"--quantize {mode} is not a language-model recipe.", f"Use one of {', '.join(LLM_RECIPES)} or auto.")
    if block_size not in BLOCK_SIZES:
        raise UsageError(f"--block-size {block_size} is not one ai-edge-quantizer supports.", f"Use one of {', '.join(map(str, BLOCK_SIZES))}.")
    from ai_edge_quantizer import quantizer

    try:
        q = quantizer.Quantizer(bytearray(float_tflite))
        q.load_quantization_recipe(_recipe(mode, block_size))
        return bytes(q.quantize().quantized_model)
    except Exception as exc:  # boundary: ai-edge-quantizer
        raise QuantizationError(f"ai-edge-quantizer could not apply {mode}: {first_line(exc, with_type=True)}.", "Try another --quantize recipe.") from exc


@dataclass(frozen=True)
class WeightGroup:
    """One group of weights (embedding, attention, mlp, lm_head, other) in a flatbuffer."""

    group: str
    tensors: int
    bytes: int
    dtypes: tuple[str, ...]  # storage types, e.g. ("INT4",) or ("FLOAT32",)


_GROUP_PATTERNS = (("attention", re.compile(r"attn|attention", re.I)), ("mlp", re.compile(r"mlp|feed_forward|ffn", re.I)),
                   ("lm_head", re.compile(r"lm_head", re.I)), ("embedding", re.compile(r"embed", re.I)))


def _consumers(model: Any) -> dict[int, set[str]]:
    """Buffer index -> the operators reading it (through one DEQUANTIZE)."""
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    found: dict[int, set[str]] = {}
    for sg in model.subgraphs:
        readers: dict[int, list[str]] = {}
        for op in sg.operators:
            code = model.operatorCodes[op.opcodeIndex]
            name = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")
            for i in op.inputs if op.inputs is not None else ():
                readers.setdefault(int(i), []).append(name)
        for op in sg.operators:  # a DEQUANTIZE's input counts as read by its output's readers
            code = model.operatorCodes[op.opcodeIndex]
            if names.get(max(code.builtinCode, code.deprecatedBuiltinCode)) == "DEQUANTIZE" and op.outputs is not None:
                readers.setdefault(int(op.inputs[0]), []).extend(readers.get(int(op.outputs[0]), []))
        for index, tensor in enumerate(sg.tensors):
            found.setdefault(tensor.buffer, set()).update(readers.get(index, []))
    return found


def weight_groups(tflite: bytes, vocab_size: int) -> tuple[WeightGroup, ...]:
    """The constant weights (over 1 KiB) of ``tflite`` grouped by what they belong to: by the
    module path in the tensor's name, else (the unnamed vocabulary tables) by whether an
    EMBEDDING_LOOKUP/GATHER reads them (embedding) or a FULLY_CONNECTED does (lm_head)."""
    from ai_edge_litert import schema_py_generated as schema
    from ai_edge_litert.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(tflite))
    readers = _consumers(model)
    types = {v: k for k, v in vars(schema.TensorType).items() if not k.startswith("_")}
    seen: dict[int, tuple[str, int, str]] = {}
    for sg in model.subgraphs:
        for tensor in sg.tensors:
            data = model.buffers[tensor.buffer].data
            size = len(data) if data is not None else int(model.buffers[tensor.buffer].size or 0)
            if size < 1024 or tensor.buffer in seen:
                continue
            seen[tensor.buffer] = (_group(tensor, readers.get(tensor.buffer, set()), vocab_size), size, types.get(tensor.type, "?"))
    groups: dict[str, list[tuple[int, str]]] = {}
    for group, size, dtype in seen.values():
        groups.setdefault(group, []).append((size, dtype))
    order = ("embedding", "attention", "mlp", "lm_head", "other")
    return tuple(
        WeightGroup(g, len(groups[g]), sum(s for s, _ in groups[g]), tuple(sorted({d for _, d in groups[g]})))
        for g in order if g in groups
    )


def _group(tensor: Any, readers: set[str], vocab_size: int) -> str:
    name = tensor.name.decode() if isinstance(tensor.name, bytes) else str(tensor.name or "")
    for group, pattern in _GROUP_PATTERNS:
        if pattern.search(name):
            return group
    if readers & {"EMBEDDING_LOOKUP", "GATHER"}:
        return "embedding"
    shape = list(tensor.shape) if tensor.shape is not None else []
    if vocab_size in shape and "FULLY_CONNECTED" in readers:
        return "lm_head"
    return "other"
