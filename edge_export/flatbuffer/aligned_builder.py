"""The ``flatbuffers.Builder`` every .tflite is written with (``pack.pack_model``): buffer data on
16-byte boundaries from the file start, each equal vector and string written once, each table's
fields largest first, and the gap before each buffer's data filled with vectors the model needs
anyway. The reasons and the measured savings are in ``pack``'s docstring.

Imported only when a model is packed: ``flatbuffers`` imports numpy.
"""

from __future__ import annotations

import itertools
from typing import Any

import flatbuffers

from ..errors import InternalError

__all__ = ["BUFFER_ALIGNMENT", "SHARED_DTYPES", "AlignedModelBuilder"]

BUFFER_ALIGNMENT = 16  # the schema's force_align on Buffer.data
# Element types of the vectors written once: QuantizationParameters' (zero_point: [long],
# scale/min/max: [float]) and int32 index vectors (shapes, operator and subgraph inputs/outputs).
SHARED_DTYPES = ("<i8", "<f4", "<i4")


class AlignedModelBuilder(flatbuffers.Builder):
    """A Builder that aligns buffer data to 16 bytes and writes each quantization vector once.

    ``aligned_vectors`` holds the ``id`` of each buffer's data array: the generated packer
    hands those arrays to ``CreateNumpyVector`` as they are, and no other vector is one of them.
    """

    def __init__(self, size: int, aligned_vectors: set[int]) -> None:
        super().__init__(size)
        self._aligned_vectors = aligned_vectors
        self._vectors: dict[tuple[str, bytes], int] = {}
        self._strings: dict[bytes, int] = {}
        self._fields: list[tuple[int, int, Any, tuple]] | None = None
        self._aligned_written: dict[int, int] = {}
        self.shared_bytes = 0

    # A table's fields are written largest first, so that its 1-byte fields (a tensor's type
    # and has_rank, an operator's options type) sit together instead of each padded to the
    # next 4-byte field, as the generated packer's field order leaves them: 4 bytes less per
    # tensor. The vtable records where each field is, so readers see the same values.
    def StartObject(self, numfields: int) -> None:  # noqa: N802 (the flatbuffers API's names)
        super().StartObject(numfields)
        self._fields = []

    def PrependSlot(self, flags: Any, o: int, x: Any, d: Any) -> None:  # noqa: N802
        if self._fields is None:
            return super().PrependSlot(flags, o, x, d)
        self._fields.append((flags.bytewidth, len(self._fields), super().PrependSlot, (flags, o, x, d)))
        return None

    def PrependUOffsetTRelativeSlot(self, o: int, x: int, d: int) -> None:  # noqa: N802
        if self._fields is None:
            return super().PrependUOffsetTRelativeSlot(o, x, d)
        self._fields.append((4, len(self._fields), super().PrependUOffsetTRelativeSlot, (o, x, d)))
        return None

    def PrependStructSlot(self, v: int, x: int, d: int) -> None:  # noqa: N802
        raise InternalError("The TFLite schema has no struct fields; the writer does not reorder them.")

    def EndObject(self) -> int:  # noqa: N802
        fields, self._fields = self._fields or [], None
        for _, _, prepend, args in sorted(fields, key=lambda f: (-f[0], f[1])):
            prepend(*args)
        return super().EndObject()

    def CreateString(self, s: Any, encoding: str = "utf-8", errors: str = "strict") -> int:  # noqa: N802
        key = s.encode(encoding, errors) if isinstance(s, str) else bytes(s)
        found = self._strings.get(key)
        if found is None:
            found = self._strings[key] = super().CreateString(s, encoding, errors)
        return found

    def CreateNumpyVector(self, x: Any) -> int:  # noqa: N802 (the flatbuffers API's name)
        if id(x) in self._aligned_vectors:
            return self._create_aligned_bytes(x)
        if x.ndim != 1 or x.dtype.str not in SHARED_DTYPES:
            return super().CreateNumpyVector(x)
        key = (x.dtype.str, x.tobytes())
        found = self._vectors.get(key)
        if found is not None:
            self.shared_bytes += x.nbytes
            return found
        offset = super().CreateNumpyVector(x)
        self._vectors[key] = offset
        return offset

    def _create_aligned_bytes(self, data: Any) -> int:
        # Written ahead by fill_alignment_gaps, then found again when the buffer's table is packed.
        found = self._aligned_written.get(id(data))
        if found is not None:
            return found
        # StartVector pads so that the data starts at a multiple of the alignment counted from
        # the end of the finished buffer, and raises minalign so that Finish pads the whole
        # file to a multiple of it: counted from the start, the data is aligned too.
        size = data.nbytes
        self.StartVector(1, size, BUFFER_ALIGNMENT)
        self.head -= size
        # Copied once, straight from the array (weights are most of a model's bytes).
        self.Bytes[self.head : self.head + size] = data.data if data.flags.c_contiguous else data.tobytes()
        offset = self._aligned_written[id(data)] = self.EndVector()
        return offset

    def fill_alignment_gaps(self, buffers: list[Any], fillers: list[Any]) -> None:
        """Write every buffer's data first, each preceded by vectors the model needs anyway
        (``fillers``: its index vectors, shapes, scales and zero points) chosen so that the
        data lands on its 16-byte boundary without padding where they allow. The 16-byte rule
        otherwise leaves (4 - size) mod 16 bytes before each buffer: 4 bytes for the usual
        multiple-of-16 weights, 448 bytes on the benchmark MobileNetV2 width 0.5. int64 zero
        points go where their data is 8-byte aligned without padding, which saves the 4 bytes
        they would often cost later among the tables."""
        pool: dict[tuple[int, bool], list[Any]] = {}
        for vector in fillers:
            pool.setdefault(((4 + vector.nbytes) % 16, vector.itemsize == 8), []).append(vector)
        for data in buffers:
            available = {kind: len(vectors) for kind, vectors in pool.items() if vectors}
            for kind in _gap_fill(self.Offset(), data.nbytes, available):
                self.CreateNumpyVector(pool[kind].pop(0))
            self._create_aligned_bytes(data)


def _gap_fill(offset: int, size: int, available: dict[tuple[int, bool], int]) -> tuple[tuple[int, bool], ...]:
    """Which fillers to write, in order, before buffer data of ``size`` bytes when ``offset``
    bytes are written (the builder writes back to front): up to three, each a ``(size mod 16,
    is int64)`` kind with ``available`` vectors left, none padded (an int64 vector's data needs
    8-byte alignment) and the data then on its 16-byte boundary. Most int64 vectors, then fewest
    fillers; () when nothing fits (the data is padded as before)."""
    aligned_already = (offset + size) % BUFFER_ALIGNMENT == 0
    best: tuple[tuple[int, bool], ...] = ()
    best_key = (0, 0)
    for count in (1, 2, 3):
        for combo in itertools.product(sorted(available), repeat=count):
            if any(combo.count(kind) > available[kind] for kind in set(combo)):
                continue
            wide_count = sum(wide for _, wide in combo)
            if aligned_already and not wide_count:
                continue  # nothing to gain: keep these fillers for a later gap
            position = offset
            for residue, wide in combo:
                if wide and position % 8:  # its data would be padded to 8 bytes
                    break
                position += residue  # only positions mod 16 matter
            else:
                if (position + size) % BUFFER_ALIGNMENT == 0 and (not best or (wide_count, -count) > best_key):
                    best, best_key = combo, (wide_count, -count)
    return best
