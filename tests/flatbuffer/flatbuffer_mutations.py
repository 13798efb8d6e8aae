"""Structure-aware mutations of a LiteRT flatbuffer, for the fuzz test and benchmarks/flatbuffer_fuzz.py.

Random bit flips mostly break the file's framing, which the structural verifier rejects at once. These
mutations keep the file well-formed and change what the kernels trust: operator inputs (omitted,
out of range, too few), tensor indices, buffers (short, long, foreign), shapes, types, opcodes,
quantization parameters, builtin options, and (on the raw bytes) vtables and table offsets.
"""

from __future__ import annotations

import random
import struct

import numpy as np

KINDS = (
    "omit-input", "input-index", "output-index", "drop-input", "extra-input", "buffer-index",
    "short-buffer", "long-buffer", "swap-buffers", "shape", "dtype", "opcode-index", "builtin-code",
    "subgraph-io", "quantization", "options", "vtable", "table-offset", "bytes",
)


def _object_model(data: bytes):
    from ai_edge_litert.tools import flatbuffer_utils

    return flatbuffer_utils.read_model_from_bytearray(bytearray(data))


def _pack(model) -> bytes:
    from ai_edge_litert.tools import flatbuffer_utils

    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _random_index(rng: random.Random, n: int) -> int:
    return rng.choice([-1, -2, n, n + rng.randint(1, 1000), rng.randrange(max(n, 1)), 2**31 - 1])


def _mutate_object(model, kind: str, rng: random.Random) -> None:
    from ai_edge_litert import schema_py_generated as schema

    sg = model.subgraphs[0]
    ops = [op for op in sg.operators if op.inputs is not None and len(op.inputs)]
    op = rng.choice(ops)
    n = len(sg.tensors)
    with_data = [i for i, b in enumerate(model.buffers) if b.data is not None and len(b.data)]
    if kind == "omit-input":
        ins = list(op.inputs)
        ins[rng.randrange(len(ins))] = -1
        op.inputs = np.array(ins, dtype=np.int32)
    elif kind == "input-index":
        ins = list(op.inputs)
        ins[rng.randrange(len(ins))] = _random_index(rng, n)
        op.inputs = np.array(ins, dtype=np.int32)
    elif kind == "output-index":
        outs = list(op.outputs)
        outs[rng.randrange(len(outs))] = _random_index(rng, n)
        op.outputs = np.array(outs, dtype=np.int32)
    elif kind == "drop-input":
        op.inputs = np.array(list(op.inputs)[: rng.randrange(len(op.inputs))], dtype=np.int32)
    elif kind == "extra-input":
        op.inputs = np.array([*op.inputs, rng.choice([-1, rng.randrange(n)])], dtype=np.int32)
    elif kind == "buffer-index":
        rng.choice(sg.tensors).buffer = rng.choice([0, len(model.buffers), len(model.buffers) + 7, rng.randrange(len(model.buffers))])
    elif kind in ("short-buffer", "long-buffer") and with_data:
        buf = model.buffers[rng.choice(with_data)]
        data = np.asarray(buf.data, dtype=np.uint8)
        cut = rng.randint(1, max(1, len(data)))
        buf.data = data[:-cut] if kind == "short-buffer" else np.concatenate([data, np.zeros(cut, np.uint8)])
    elif kind == "swap-buffers":
        a, b = rng.sample(range(n), 2)
        sg.tensors[a].buffer, sg.tensors[b].buffer = sg.tensors[b].buffer, sg.tensors[a].buffer
    elif kind == "shape":
        t = rng.choice(sg.tensors)
        shape = list(t.shape) if t.shape is not None and len(t.shape) else [1]
        shape[rng.randrange(len(shape))] = rng.choice([0, 1, 2, 3, 7, 64, 4096, -1, 2**20])
        if rng.random() < 0.2:
            shape = shape + [rng.choice([1, 2])] if rng.random() < 0.5 else shape[:-1]
        t.shape = np.array(shape, dtype=np.int32)
        if rng.random() < 0.5:
            t.shapeSignature = None
    elif kind == "dtype":
        rng.choice(sg.tensors).type = rng.randrange(0, 20)
    elif kind == "opcode-index":
        op.opcodeIndex = rng.choice([len(model.operatorCodes), rng.randrange(len(model.operatorCodes))])
    elif kind == "builtin-code":
        code = rng.choice(model.operatorCodes)
        names = [v for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")]
        code.builtinCode = rng.choice(names)
        code.deprecatedBuiltinCode = min(code.builtinCode, 127)
    elif kind == "subgraph-io":
        which = rng.choice(["inputs", "outputs"])
        values = list(getattr(sg, which))
        values[rng.randrange(len(values))] = _random_index(rng, n) if rng.random() < 0.5 else rng.randrange(n)
        setattr(sg, which, np.array(values, dtype=np.int32))
    elif kind == "quantization":
        quantized = [t for t in sg.tensors if t.quantization is not None and t.quantization.scale is not None]
        if quantized:
            q = rng.choice(quantized).quantization
            field = rng.choice(["scale", "zeroPoint", "quantizedDimension"])
            if field == "scale":
                q.scale = np.array([rng.choice([0.0, -1.0, 1e-45, 1e30, float("nan")])] * len(q.scale), dtype=np.float32)
            elif field == "zeroPoint":
                q.zeroPoint = np.array([rng.choice([-129, 300, 2**40])] * max(1, len(q.zeroPoint if q.zeroPoint is not None else [])), dtype=np.int64)
            else:
                q.quantizedDimension = rng.choice([-1, 5, 1, 3])
    elif kind == "options":
        with_options = [o for o in sg.operators if o.builtinOptions is not None]
        if with_options:
            opts = rng.choice(with_options).builtinOptions
            fields = [f for f, v in vars(opts).items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            if fields:
                setattr(opts, rng.choice(fields), rng.choice([0, -1, 2, 7, 100, 2**15]))


def _tables(data: bytes) -> list[tuple[int, int]]:
    """(table position, vtable position) of every table the verifier visits."""
    from edge_export.flatbuffer.verify import StructureVerifier as _Verifier

    found: list[tuple[int, int]] = []

    class Recorder(_Verifier):
        def verify_table(self, pos, cls, depth):
            found.append((pos, pos - struct.unpack_from("<i", self.data, pos)[0]))
            super().verify_table(pos, cls, depth)

    Recorder(data).verify_model()
    return found


def _mutate_bytes(data: bytes, kind: str, rng: random.Random) -> bytes:
    b = bytearray(data)
    if kind == "bytes":
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    pos, vtable = rng.choice(_tables(data))
    if kind == "vtable":
        vsize = struct.unpack_from("<H", b, vtable)[0]
        slot = vtable + 2 * rng.randrange(vsize // 2)
        value = rng.choice([0, 1, 2, 3, 4, 0xFFFF, rng.randrange(0x10000), struct.unpack_from("<H", b, slot)[0] + rng.choice([-4, -1, 1, 4])])
        struct.pack_into("<H", b, slot, value % 0x10000)
    else:  # table-offset: the table's signed offset to its vtable
        struct.pack_into("<i", b, pos, rng.choice([0, 4, -4, 2**31 - 1, -(2**31), struct.unpack_from("<i", b, pos)[0] + rng.choice([-2, 2, 8])]))
    return bytes(b)


def mutate(data: bytes, rng: random.Random, kind: str | None = None) -> tuple[str, bytes]:
    """One mutant of ``data``: (kind, bytes). The object-API kinds keep the file well-formed."""
    kind = kind or rng.choice(KINDS)
    if kind in ("vtable", "table-offset", "bytes"):
        return kind, _mutate_bytes(data, kind, rng)
    for _ in range(10):
        model = _object_model(data)
        try:
            _mutate_object(model, kind, rng)
            return kind, _pack(model)
        except (ValueError, OverflowError, struct.error, TypeError, IndexError):
            continue  # the writer refused this value (e.g. a negative uint32): draw again
    return kind, data
