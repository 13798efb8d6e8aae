"""Where the bytes of a .tflite file go, and the fewest bytes the LiteRT schema lets a model take.

``byte_accounting(data)`` walks the flatbuffer from its root with the verifier's schema walker and
gives every byte of the file one category (the first object that reaches a shared byte owns it;
bytes no object reaches are alignment padding), so the categories add up to the file size exactly.

``schema_floor(data)`` is a lower bound on the size of any file that holds the same model and that
LiteRT's interpreter and TFLite Micro load: per-channel weights need their scales and an int64 zero
point per scale (``InterpreterBuilder::ParseQuantization`` refuses a zero-point vector of another
length), each tensor a table with its type, shape (omitted for scalars), buffer index and
quantization, each operator a table with its opcode index, input and output index vectors and
non-default options, each quantized activation a scale and a zero point, the model its buffer
vector (buffer 0 empty), opcodes, one subgraph with its inputs and outputs, the version field and
the file header. It counts nothing the runtimes do not read (names, signature defs, metadata,
the description, shape signatures, min/max), no vtables, no alignment padding, and every equal
vector or table once (FlatBuffers lets any number of tables point at one), so no writer can go
below it; a real file is a few hundred bytes above it at least (vtables, 4-byte table alignment).
Used by ``benchmarks/int8_payload.py`` and the compaction tests.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from .schema_layout import FieldSpec
from .schema_walk import SchemaWalker

__all__ = ["PAYLOAD_CATEGORIES", "byte_accounting", "payload_bytes", "schema_floor"]

# The per-channel payload (benchmarks/int8_payload.py): int8 weights, int32 biases, their float32 scales.
PAYLOAD_CATEGORIES = ("int8 weights", "int32 biases", "weight and bias scales")
_INT8, _INT32 = 9, 2  # TensorType values


def _constant_kinds(model: Any) -> tuple[dict[int, str], set[int]]:
    """Category of each buffer's data by the tensors that use it, and the payload tensors' indices."""
    kinds: dict[int, str] = {}
    payload: set[int] = set()
    for sg in model.subgraphs or ():
        for i, t in enumerate(sg.tensors or ()):
            data = model.buffers[t.buffer].data if t.buffer < len(model.buffers or ()) else None
            if data is None or not len(data):
                continue
            quantized = t.quantization is not None and t.quantization.scale is not None and len(t.quantization.scale)
            if t.type == _INT8:
                kinds[t.buffer] = "int8 weights"
                payload.add(i)
            elif t.type == _INT32 and quantized:
                kinds[t.buffer] = "int32 biases"
                payload.add(i)
            else:
                kinds.setdefault(t.buffer, "other constants")
    for md in model.metadata or ():
        kinds[md.buffer] = "metadata"
    return kinds, payload


def payload_bytes(model: Any) -> dict[str, int]:
    """The per-channel payload of ``model`` (a ``ModelT``): int8 weights, int32 biases and their scales."""
    parts = dict.fromkeys(PAYLOAD_CATEGORIES, 0)
    kinds, payload = _constant_kinds(model)
    counted: set[bytes] = set()  # equal constants (a buffer two tensors share, or equal copies) are one payload
    for sg in model.subgraphs or ():
        for i in sorted(payload):
            t = sg.tensors[i]
            data = bytes(model.buffers[t.buffer].data)
            if data not in counted:
                counted.add(data)
                parts[kinds[t.buffer]] += len(model.buffers[t.buffer].data)
            if t.quantization is not None and t.quantization.scale is not None:
                parts["weight and bias scales"] += 4 * len(t.quantization.scale)
    return parts


class _ByteOwners(SchemaWalker):
    """Gives each byte the category of the first object the schema walk reaches it from. The walk's
    state is ``(category, context)``: the category a field's contents count under, and where the
    walk is (``index``: the position of the current table in its vector)."""

    def __init__(self, data: bytes, model: Any) -> None:
        super().__init__(data)
        # Each byte's category as an index into ``categories`` (0: not reached yet).
        self.owner = bytearray(len(data))
        self.categories: list[str] = ["alignment padding"]
        self.buffer_kinds, self.payload_tensors = _constant_kinds(model)
        self.seen_tables: set[int] = set()
        self.current_tensor: int | None = None

    def claim(self, start: int, length: int, category: str) -> None:
        if category not in self.categories:
            self.categories.append(category)
        code = self.categories.index(category)
        start, end = max(start, 0), min(start + length, len(self.data))
        if end <= start:
            return
        if self.owner.count(0, start, end) == end - start:  # the usual case: nothing there yet
            self.owner[start:end] = bytes([code]) * (end - start)
            return
        for p in range(start, end):
            if self.owner[p] == 0:
                self.owner[p] = code

    # ---- the walker's hooks ------------------------------------------------------------------
    def table(self, pos: int, cls: str, state: Any) -> None:
        if pos in self.seen_tables:  # a table shared by several owners counts once
            return
        self.seen_tables.add(pos)
        vtable = self.vtable_of(pos)
        vsize, tsize = self.u16(vtable), self.u16(vtable + 2)
        self.claim(vtable, vsize, state[0])
        self.claim(pos, tsize, state[0])
        self.walk_fields(pos, cls, vtable, vsize, state, cls)

    def string(self, pos: int, what: str, state: Any) -> None:
        self.claim(pos, 4 + self.u32(pos) + 1, state[0])

    def vector(self, pos: int, spec: FieldSpec, what: str, state: Any) -> int:
        category = state[0]
        header = self.vector_header(category) if spec.kind == "scalar_vector" else None
        n = self.u32(pos)
        self.claim(pos, 4, header or category)
        self.claim(pos + 4, n * spec.size, category)
        return n

    def field_state(self, cls: str, spec: FieldSpec, state: Any) -> Any:
        category, context = state
        return self.field_category(cls, spec.slot, category, context), context

    def child_state(self, state: Any, cls: str, index: int | None) -> Any:
        if index is None:
            return state
        category, context = state
        return category, {**(context or {}), "index": index, "cls": cls}

    @staticmethod
    def vector_header(category: str) -> str | None:
        # A payload vector's 4-byte length is structure, not payload.
        return "payload vector lengths" if category in PAYLOAD_CATEGORIES else None

    def field_category(self, cls: str, slot: int, category: str, context: dict | None) -> str:
        ctx = context or {}
        if cls == "Model":
            return {6: "opcodes", 8: "subgraph table", 10: "description", 12: "buffer tables",
                    14: "metadata", 16: "metadata", 18: "signature defs"}.get(slot, category)
        if cls == "SubGraph":
            return {4: "tensor tables", 10: "operator tables", 12: "subgraph table"}.get(slot, "subgraph table")
        if cls == "Tensor":
            self.current_tensor = ctx.get("index")
            return {4: "shapes", 10: "tensor names", 12: "quantization tables", 16: "sparsity",
                    18: "shape signatures"}.get(slot, category)
        if cls == "QuantizationParameters":
            if slot in (4, 6):
                return "min/max"
            if slot == 8:
                return "weight and bias scales" if self.current_tensor in self.payload_tensors else "activation scales"
            if slot == 10:
                return "zero points"
            return category
        if cls == "Operator":
            if slot in (6, 8, 20):
                return "operator inputs/outputs"
            if slot in (12, 28):
                return "operator options"
            return category
        if cls == "Buffer" and slot == 4:
            return self.buffer_kinds.get(ctx.get("index"), "other constants")
        return category


def byte_accounting(data: bytes) -> dict[str, int]:
    """Bytes of ``data`` (a verified .tflite) by category; the values add up to ``len(data)``.

    Categories: the payload (``int8 weights``, ``int32 biases``, ``weight and bias scales``), then
    ``payload vector lengths``, ``other constants`` (shape and permutation tensors, float or
    unquantized constants), ``tensor tables``, ``shapes``, ``shape signatures``, ``tensor names``,
    ``quantization tables``, ``activation scales``, ``zero points``, ``min/max``, ``operator
    tables``, ``operator inputs/outputs``, ``operator options``, ``opcodes``, ``buffer tables``,
    ``subgraph table``, ``signature defs``, ``metadata`` (entries, names and their buffers),
    ``description``, ``header`` (root offset, identifier, model table) and ``alignment padding``.
    Data stored after the flatbuffer (``Buffer.offset``: the converter's layout for models over
    2 GB, which edge-export's writer never keeps) is reached by no object and counts as padding.
    """
    from .pack import read_model

    data = bytes(data)
    walker = _ByteOwners(data, read_model(data))
    walker.claim(0, 8, "header")
    walker.walk(("header", None))
    counts = {name: walker.owner.count(code) for code, name in enumerate(walker.categories)}
    return {name: n for name, n in counts.items() if n}


def schema_floor(data: bytes) -> dict[str, int]:
    """A lower bound on the bytes of any file holding this model that LiteRT and TFLite Micro load
    (see the module docstring for what it counts), by category; ``total`` is the sum."""
    from .pack import read_model

    floor = _Floor(read_model(bytes(data)))
    for sg in floor.model.subgraphs or ():
        floor.add_subgraph(sg)
    floor.add_buffers()
    result = {k: v for k, v in floor.bytes.items() if v}
    result["total"] = sum(result.values())
    return result


def _packed(values: Any, dtype: str) -> bytes:
    """The bytes a vector of ``values`` takes as the schema type ``dtype``: the key of equal vectors."""
    import numpy as np

    return np.asarray(values if values is not None else [], dtype=dtype).tobytes()


class _Floor:
    """The floor of one model (a ``ModelT``), counted by category piece by piece. Equal vectors and
    tables are counted once, as FlatBuffers lets any number of tables point at one (the writer
    does): int32 vectors whatever holds them (shapes, operator and subgraph inputs/outputs), scale
    and zero-point vectors, quantization, tensor and options tables, and equal constant data."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.bytes: Counter = Counter()
        self.bytes["header"] = 4 + 4  # root offset and the "TFL3" identifier (VerifyModelBuffer checks it)
        self.bytes["header"] += 4 + 4 + 4 + 4 + 4  # model table: vtable offset, version, opcodes, subgraphs, buffers
        self.kinds, self.payload = _constant_kinds(model)
        # Equal constant data needs storing once: every buffer maps to the first with its bytes.
        first_with: dict[bytes, int] = {}
        self.canonical = {
            b: first_with.setdefault(bytes(model.buffers[b].data), b) for b in sorted(self.kinds) if self.kinds[b] != "metadata"
        }
        payload_parts = payload_bytes(model)
        for part in ("int8 weights", "int32 biases"):
            self.bytes[part] = payload_parts[part]
        self.bytes["opcodes"] = 4 + sum(4 + 4 + 1 + (4 if (oc.version or 1) != 1 else 0) for oc in model.operatorCodes or ())
        self.seen: dict[str, set] = {}

    def first(self, kind: str, key: Any) -> bool:
        """Whether ``key`` is the first of its ``kind`` met (the only one stored)."""
        seen = self.seen.setdefault(kind, set())
        if key in seen:
            return False
        seen.add(key)
        return True

    def add_subgraph(self, sg: Any) -> None:
        self.bytes["subgraph table"] += 4 + 4 * 4  # vtable offset, tensors, inputs, outputs, operators
        for vector in (sg.inputs, sg.outputs):
            packed = _packed(vector, "<i4")
            if self.first("int32 vectors", packed):
                self.bytes["subgraph table"] += 4 + len(packed)
        self.bytes["tensor tables"] += 4 + 4 * len(sg.tensors)  # the tensors vector
        # Payload tensors first: a scale vector an activation shares with a weight or bias is
        # stored once, as the weight's.
        for i in sorted(range(len(sg.tensors)), key=lambda i: i not in self.payload):
            self.add_tensor(i, sg.tensors[i])
        self.bytes["operator tables"] += 4 + 4 * len(sg.operators)
        for op in sg.operators:
            self.add_operator(op)

    def add_tensor(self, i: int, t: Any) -> None:
        quant_key = self.add_quantization(i, t.quantization)
        shape = _packed(t.shape, "<i4")
        if len(shape) and self.first("int32 vectors", shape):
            self.bytes["shapes"] += 4 + len(shape)
        buffer_index = self.canonical.get(t.buffer, 0)
        if self.first("tensor tables", (shape, int(t.type), buffer_index, quant_key, bool(t.isVariable))):
            self.bytes["tensor tables"] += (
                4 + (4 if len(shape) else 0) + (1 if t.type else 0) + (4 if buffer_index else 0)
                + (4 if quant_key else 0) + (1 if t.isVariable else 0)
            )

    def add_quantization(self, i: int, q: Any) -> tuple | None:
        """Count tensor ``i``'s quantization parameters; returns their key (None: not quantized)."""
        if q is None or q.scale is None or not len(q.scale):
            return None
        scales, zeros = _packed(q.scale, "<f4"), _packed(q.zeroPoint, "<i8")
        quant_key = (scales, zeros, int(q.quantizedDimension or 0))
        if self.first("scale vectors", scales):
            if i in self.payload:
                self.bytes["weight and bias scales"] += len(scales)
                self.bytes["payload vector lengths"] += 4
            else:
                self.bytes["activation scales"] += 4 + len(scales)
        if self.first("zero-point vectors", zeros):
            self.bytes["zero points"] += 4 + len(zeros)
        if self.first("quantization tables", quant_key):
            self.bytes["quantization tables"] += 4 + 4 + 4 + (4 if quant_key[2] else 0)
        return quant_key

    def add_operator(self, op: Any) -> None:
        self.bytes["operator tables"] += 4 + (4 if op.opcodeIndex else 0) + 4 + 4
        for vector in (op.inputs, op.outputs):
            packed = _packed(vector, "<i4")
            if self.first("int32 vectors", packed):
                self.bytes["operator inputs/outputs"] += 4 + len(packed)
        options = _non_default_fields(op.builtinOptions)
        if options:
            self.bytes["operator tables"] += 1 + 4  # the union's type byte and offset
            if self.first("options tables", (op.builtinOptionsType, tuple(sorted(options.items())))):
                self.bytes["operator options"] += 4 + sum(size for size, _ in options.values())

    def add_buffers(self) -> None:
        # Buffer 0 (empty: "no data") and one per constant buffer; the empty table needs only its
        # vtable offset. Constant buffers: table, data offset, data vector length.
        constant_buffers = set(self.canonical.values())
        self.bytes["buffer tables"] = 4 + 4 * (1 + len(constant_buffers)) + 4
        self.bytes["buffer tables"] += sum(4 + 4 for _ in constant_buffers)
        self.bytes["payload vector lengths"] += sum(4 for b in constant_buffers if self.kinds[b] in PAYLOAD_CATEGORIES)
        self.bytes["other constants"] = sum(
            4 + len(self.model.buffers[b].data) for b in constant_buffers if self.kinds[b] == "other constants"
        )


def _non_default_fields(options: Any) -> dict[str, tuple[int, Any]]:
    """The fields of a builtin-options object that differ from the schema default: ``{name:
    (bytes, value)}`` (a vector field counts its length word and elements)."""
    if options is None:
        return {}
    defaults = type(options)()
    found = {}
    for name, value in vars(options).items():
        default = getattr(defaults, name, None)
        if value is None or (not hasattr(value, "__len__") and value == default):
            continue
        if hasattr(value, "__len__"):
            if len(value) == 0:
                continue
            found[name] = (4 + 4 * len(value), tuple(int(v) for v in value))
        else:
            found[name] = (4 if isinstance(value, float) or abs(int(value)) > 127 else 1, value)
    return found
