"""Weight quantization recipes for the exported language model, applied by ai-edge-quantizer to
the float flatbuffer (no new export: seconds instead of a trace and conversion per recipe; this
is what litert-torch's ``quantization_recipe`` does internally, ``export_lib.quantize_model``).

A recipe gives each group of weights a precision (``GROUP_RECIPES``):

    group      the ops it covers
    embedding  EMBEDDING_LOOKUP (the token table)
    attention  FULLY_CONNECTED whose output is named after the attention module (q/k/v/o)
    mlp        FULLY_CONNECTED named after the MLP (gate/up/down)
    lm_head    the FULLY_CONNECTED that produces the vocabulary's logits

    precision  what ai-edge-quantizer does
    float32    nothing
    fp16       float16 weights (FLOAT_CASTING), float32 compute
    int8       per-channel int8 weights, dequantized to float32 compute (weight-only)
    int8-dyn   per-channel int8 weights, activations quantized to int8 at run time (dynamic)
    int4-dyn   blockwise int4 weights (--block-size 32/64/128/256), activations quantized at run
               time; the embedding table, which no blockwise kernel reads, per-channel int4

Measured on the pretrained SmolLM2-135M (docs/BENCHMARKS.md, "A pretrained decoder"; 5 prompts x
24 tokens): int8 weight-only kept token agreement 0.967 (mean KL 0.004) at 136 MiB, but XNNPack
unpacks its weights to float32 when it loads them (a 538 MB weight cache: the file is smaller, the
memory is not); int4 on the MLP alone (int4-mlp, 101 MiB) already fell to 0.733 (KL 0.26), so auto
refuses the int4 recipes there with those figures. ``weight_groups`` says, per group, what the
bytes were and became. ``auto`` (run.check_recipes) tries them smallest first and keeps the first
that passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import QuantizationError, UsageError, first_line

__all__ = ["LLM_RECIPES", "AUTO_ORDER", "BLOCK_SIZES", "GROUP_RECIPES", "WeightGroup", "quantize_language_model", "weight_groups"]

GROUPS = ("embedding", "attention", "mlp", "lm_head")
# recipe -> precision of (embedding, attention, mlp, lm_head)
GROUP_RECIPES = {
    "none": ("float32", "float32", "float32", "float32"),
    "fp16": ("fp16", "fp16", "fp16", "fp16"),
    "int8": ("int8", "int8", "int8", "int8"),
    "dynamic-int8": ("int8-dyn", "int8-dyn", "int8-dyn", "int8-dyn"),
    "int4-mlp": ("int8", "int8", "int4-dyn", "int8"),
    "int4-layers": ("int8", "int4-dyn", "int4-dyn", "int8"),
    "int4": ("int4-dyn", "int4-dyn", "int4-dyn", "int4-dyn"),
}
LLM_RECIPES = tuple(GROUP_RECIPES)
# smallest first; at the same size the closer to float first: int8 (weight-only) before dynamic-int8
# (SmolLM2-135M: token agreement 0.967 against 0.938)
AUTO_ORDER = ("int4", "int4-layers", "int4-mlp", "int8", "dynamic-int8", "fp16", "none")
BLOCK_SIZES = (32, 64, 128, 256)
# ai-edge-quantizer matches these against an op's output tensor names (its "scope"); litert-torch
# names them after the PyTorch module path (".../LlamaAttention_self_attn/...Linear_q_proj",
# ".../LlamaMLP_mlp/...Linear_down_proj") and the vocabulary projection's output "decode_logits_output"
SCOPES = {"attention": r"self_attn|attention", "mlp": r"mlp|feed_forward|ffn", "lm_head": r"lm_head|logits"}


def _add(manager: Any, regex: str, op: Any, precision: str, block_size: int) -> None:
    from ai_edge_quantizer import qtyping
    from ai_edge_quantizer.algorithm_manager import AlgorithmName

    if precision == "float32":
        manager.add_quantization_config(regex, op, qtyping.OpQuantizationConfig(), algorithm_key=AlgorithmName.NO_QUANTIZE)
    elif precision == "fp16":
        weight = qtyping.TensorQuantizationConfig(num_bits=16, dtype=qtyping.TensorDataType.FLOAT)
        config = qtyping.OpQuantizationConfig(weight_tensor_config=weight, compute_precision=qtyping.ComputePrecision.FLOAT, explicit_dequantize=True)
        manager.add_quantization_config(regex, op, config, algorithm_key=AlgorithmName.FLOAT_CASTING)
    elif precision == "int8" and op == qtyping.TFLOperationName.FULLY_CONNECTED:
        manager.add_weight_only_config(regex, op, num_bits=8)
    elif precision in ("int8", "int8-dyn"):  # an embedding lookup computes nothing: its int8 table is read as is
        manager.add_dynamic_config(regex, op, num_bits=8)
    else:
        blockwise = op == qtyping.TFLOperationName.FULLY_CONNECTED
        granularity = getattr(qtyping.QuantGranularity, f"BLOCKWISE_{block_size}") if blockwise else qtyping.QuantGranularity.CHANNELWISE
        manager.add_dynamic_config(regex, op, num_bits=4, granularity=granularity)


def _recipe(mode: str, block_size: int) -> Any:
    """The ai-edge-quantizer recipe: one rule per group; a later matching rule wins, so the
    catch-all FULLY_CONNECTED rule (the MLP's precision) comes first."""
    from ai_edge_quantizer import qtyping, recipe_manager

    precision = dict(zip(GROUPS, GROUP_RECIPES[mode]))
    fc, lookup = qtyping.TFLOperationName.FULLY_CONNECTED, qtyping.TFLOperationName.EMBEDDING_LOOKUP
    manager = recipe_manager.RecipeManager()
    _add(manager, ".*", lookup, precision["embedding"], block_size)
    _add(manager, ".*", fc, precision["mlp"], block_size)
    for group in ("attention", "mlp", "lm_head"):
        _add(manager, SCOPES[group], fc, precision[group], block_size)
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
