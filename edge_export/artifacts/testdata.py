"""Test vectors: ``<stem>.testdata.npz``, what an app team's CI or on-device test asserts parity with.

``export --emit-test-vectors`` writes a few of the parity inputs exactly as the ``.tflite``'s
signature takes them (its dtypes, its layout, quantized with its input scale and zero point), the
PyTorch outputs for them (float32, in the model's output layout) and the thresholds and output kinds
the report judged them by. ``validate MODEL.tflite --test-vectors FILE`` re-checks a model against
them with no PyTorch: LiteRT runs the stored inputs, and ``validators/parity.compare_outputs``
compares the outputs with the stored ones.

The file is a plain ``numpy.savez`` archive (no pickled objects; README, "Test vectors", lists its
keys). Reading one is reading untrusted input: ``np.load(allow_pickle=False)``, every member's
declared size checked against what the archive holds and the memory available before it is read,
and every key, name, shape and dtype checked against the model before anything runs (exit 2).
"""

from __future__ import annotations

import io
import math
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from ..config import OutputKind, Thresholds
from ..errors import UsageError, map_exceptions

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel
    from ..validators.parity import ParityResult

__all__ = [
    "TEST_VECTORS_FORMAT",
    "TEST_VECTORS_VERSION",
    "DEFAULT_TEST_VECTOR_COUNT",
    "VectorTensor",
    "ReferenceVectors",
    "test_vectors_path",
    "build_reference_vectors",
    "serialize_vectors",
    "load_reference_vectors",
    "check_vectors_fit_model",
    "tensor_layout",
    "signature_tensors",
]

TEST_VECTORS_FORMAT = "edge-export-test-vectors"
TEST_VECTORS_VERSION = 1
DEFAULT_TEST_VECTOR_COUNT = 4
LAYOUTS = ("NHWC", "NCHW", "other")
THRESHOLD_FIELDS = tuple(f.name for f in fields(Thresholds))
# Far more tensors than any model's signature has; a crafted archive with millions of members is
# refused before its directory is walked member by member.
_MAX_MEMBERS = 10_000

_HINT = "Pass the <stem>.testdata.npz that `edge-export MODEL --emit-test-vectors` wrote beside the model."


def test_vectors_path(tflite_path: Path) -> Path:
    """``<stem>.testdata.npz`` beside the ``.tflite``."""
    return Path(f"{tflite_path.with_suffix('')}.testdata.npz")


def tensor_layout(rank: int, channels_last: bool) -> str:
    """NHWC for a 4-D tensor the model takes channels-last, NCHW for another 4-D tensor (PyTorch's
    order, kept by the converter), ``other`` for any other rank."""
    if rank != 4:
        return "other"
    return "NHWC" if channels_last else "NCHW"


@dataclass(frozen=True)
class VectorTensor:
    """One signature input or output as the model takes or gives it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    layout: str  # NHWC, NCHW or other
    scale: float | None  # None: not quantized
    zero_point: int | None


@dataclass(frozen=True)
class ReferenceVectors:
    """The contents of one test-vector file. ``inputs[i]`` is ``[count, *shape]`` in the model's
    input dtype; ``expected[k]`` is ``[count, *shape]`` float32 (PyTorch's output, in the model's
    output layout); ``thresholds[k]`` holds only the thresholds that gate output k's kind."""

    signature_key: str
    input_tensors: tuple[VectorTensor, ...]
    output_tensors: tuple[VectorTensor, ...]
    inputs: tuple[np.ndarray, ...]
    expected: tuple[np.ndarray, ...]
    kinds: tuple[str, ...]
    kind_sources: tuple[str, ...]
    thresholds: tuple[Thresholds, ...]
    model_sha256: str
    model_class: str
    tool_version: str

    @property
    def count(self) -> int:
        return int(self.inputs[0].shape[0]) if self.inputs else int(self.expected[0].shape[0])


def signature_tensors(
    fb: FlatbufferModel, channels_last_inputs: Sequence[int], channels_last_outputs: Sequence[int]
) -> tuple[tuple[VectorTensor, ...], tuple[VectorTensor, ...]]:
    """The model's inputs and outputs by signature name, as an app feeds and reads them (also the
    report's ``app`` section)."""
    return (
        _io_tensors(fb.input_names, fb.input_tensors, channels_last_inputs),
        _io_tensors(fb.output_names, fb.output_tensors, channels_last_outputs),
    )


def _io_tensors(names: Sequence[str], tensors: Sequence, channels_last: Sequence[int]) -> tuple[VectorTensor, ...]:
    out = []
    for i, (name, t) in enumerate(zip(names, tensors)):
        q = t.quant
        per_tensor = q is not None and not q.per_channel and len(q.scales) == 1 and float(q.scales[0]) != 0.0
        out.append(
            VectorTensor(
                name=name,
                shape=tuple(int(d) for d in t.shape),
                dtype=t.dtype,
                layout=tensor_layout(len(t.shape), i in channels_last),
                scale=float(q.scales[0]) if per_tensor else None,
                zero_point=int(q.zero_points[0]) if per_tensor else None,
            )
        )
    return tuple(out)


def build_reference_vectors(
    fb: FlatbufferModel,
    feeds: Sequence[Sequence[np.ndarray]],
    references: Sequence[Sequence[np.ndarray]],
    parity: ParityResult,
    *,
    channels_last_inputs: Sequence[int],
    channels_last_outputs: Sequence[int],
    count: int,
    model_class: str,
    tool_version: str,
) -> ReferenceVectors:
    """The first ``count`` parity samples as the model takes them. ``feeds[s]`` are sample s's float
    inputs in the model's layout (what parity fed the runner), ``references[s]`` PyTorch's outputs in
    PyTorch's layout, in the flatbuffer's output order (as parity compared them)."""
    import hashlib

    from ..runtime.interpreter import IOTensor, to_model_inputs

    inputs, outputs = signature_tensors(fb, channels_last_inputs, channels_last_outputs)
    # The runner's own quantization (runtime.to_model_inputs), so these are the bytes parity fed.
    specs = [IOTensor(t.name, i, t.shape, t.dtype, t.scale, t.zero_point) for i, t in enumerate(inputs)]
    chosen = range(min(count, len(feeds)))
    per_sample = [to_model_inputs(specs, feeds[s]) for s in chosen]
    stacked_inputs = tuple(np.stack([sample[i] for sample in per_sample]) for i in range(len(inputs)))
    expected = []
    for k in range(len(outputs)):
        arrays = [np.asarray(references[s][k], dtype=np.float32) for s in chosen]
        if k in channels_last_outputs:
            arrays = [np.transpose(a, (0, 2, 3, 1)) for a in arrays]
        expected.append(np.ascontiguousarray(np.stack(arrays)))
    from ..validators.parity import output_thresholds

    by_name = {o.name: o for o in parity.outputs}
    judged = [by_name[t.name] if t.name in by_name else parity.outputs[k] for k, t in enumerate(outputs)]
    decisions = [o.decision for o in judged]
    thresholds = tuple(output_thresholds(parity.thresholds, o) for o in judged)
    signature_key = fb.signatures[0]["key"] if fb.signatures else ""
    return ReferenceVectors(
        signature_key=signature_key or "",
        input_tensors=inputs,
        output_tensors=outputs,
        inputs=stacked_inputs,
        expected=tuple(expected),
        kinds=tuple(d.kind.value for d in decisions),
        kind_sources=tuple(d.source.value for d in decisions),
        thresholds=thresholds,
        model_sha256=hashlib.sha256(fb.data).hexdigest(),
        model_class=model_class,
        tool_version=tool_version,
    )


def _strings(values: Sequence[str]) -> np.ndarray:
    return np.array(list(values), dtype=np.str_) if values else np.zeros((0,), dtype="<U1")


def serialize_vectors(vectors: ReferenceVectors) -> bytes:
    """The ``.npz`` bytes (keys: README, "Test vectors")."""
    arrays: dict[str, np.ndarray] = {
        "format": np.array(TEST_VECTORS_FORMAT),
        "format_version": np.array(TEST_VECTORS_VERSION, dtype=np.int64),
        "tool_version": np.array(vectors.tool_version),
        "model_sha256": np.array(vectors.model_sha256),
        "model_class": np.array(vectors.model_class),
        "signature_key": np.array(vectors.signature_key),
        "threshold_names": _strings(THRESHOLD_FIELDS),
        "output_kinds": _strings(vectors.kinds),
        "output_kind_sources": _strings(vectors.kind_sources),
        "output_thresholds": np.array(
            [[math.nan if getattr(t, f) is None else float(getattr(t, f)) for f in THRESHOLD_FIELDS] for t in vectors.thresholds],
            dtype=np.float64,
        ).reshape(len(vectors.thresholds), len(THRESHOLD_FIELDS)),
    }
    for side, tensors in (("input", vectors.input_tensors), ("output", vectors.output_tensors)):
        arrays[f"{side}_names"] = _strings([t.name for t in tensors])
        arrays[f"{side}_dtypes"] = _strings([t.dtype for t in tensors])
        arrays[f"{side}_layouts"] = _strings([t.layout for t in tensors])
        arrays[f"{side}_scales"] = np.array([math.nan if t.scale is None else t.scale for t in tensors], dtype=np.float64)
        arrays[f"{side}_zero_points"] = np.array([0 if t.zero_point is None else t.zero_point for t in tensors], dtype=np.int64)
    for i, a in enumerate(vectors.inputs):
        arrays[f"input_{i}"] = np.ascontiguousarray(a)
    for k, a in enumerate(vectors.expected):
        arrays[f"expected_{k}"] = np.ascontiguousarray(a, dtype=np.float32)
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


# ---- reading a file someone hands in ---------------------------------------------------------


def _refuse(path: Path, problem: str, hint: str = _HINT) -> UsageError:
    return UsageError(f"{path} is not a usable test-vector file: {problem}.", hint)


def _check_members(path: Path, archive: zipfile.ZipFile) -> None:
    """Every member an ``.npy`` within its declared size and memory (npz_files.py)."""
    from ..loading.npz_files import UnsafeNpz, check_npz_members

    try:
        check_npz_members(archive, f"the test vectors {path}", _MAX_MEMBERS)
    except UnsafeNpz as exc:
        raise _refuse(path, str(exc)) from None


def _text(archive, key: str, path: Path) -> str:
    value = archive[key]
    if value.dtype.kind != "U" or value.shape != ():
        raise _refuse(path, f"'{key}' is not a text value")
    return str(value)


def _texts(archive, key: str, path: Path, count: int | None = None) -> tuple[str, ...]:
    value = archive[key]
    if value.ndim != 1 or (value.dtype.kind != "U" and value.size):
        raise _refuse(path, f"'{key}' is not a list of names")
    if count is not None and value.size != count:
        raise _refuse(path, f"'{key}' has {value.size} entries where {count} are needed")
    return tuple(str(v) for v in value)


def _numbers(archive, key: str, path: Path, count: int, kind: str) -> np.ndarray:
    value = archive[key]
    if value.shape != (count,) or value.dtype.kind not in kind:
        raise _refuse(path, f"'{key}' is not {count} number(s)")
    return value


_REQUIRED = (
    "format", "format_version", "tool_version", "model_sha256", "model_class", "signature_key", "threshold_names",
    "output_kinds", "output_kind_sources", "output_thresholds",
    "input_names", "input_dtypes", "input_layouts", "input_scales", "input_zero_points",
    "output_names", "output_dtypes", "output_layouts", "output_scales", "output_zero_points",
)


def load_reference_vectors(path: str | Path) -> ReferenceVectors:
    """Read and check a test-vector file (exit 2 on anything that is not one)."""
    from ..processes.memory import ensure_memory_for

    p = Path(path)
    if not p.exists():
        raise UsageError(f"No such file: {p}.", _HINT)
    if not p.is_file():
        raise _refuse(p, "it is not a regular file")
    ensure_memory_for(p.stat().st_size, f"Reading the test vectors {p}", "Check that this is the file you meant.")
    errors = (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError)
    with map_exceptions({errors: UsageError}, f"{p} is not a usable test-vector file: {{error}}.", _HINT):
        with zipfile.ZipFile(p) as zf:
            _check_members(p, zf)
        archive = np.load(p, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise _refuse(p, "it is a single .npy array, not an .npz archive")
        with archive:
            stored = _read_archive(archive, p)
    return _reference_vectors(stored, p)


@dataclass(frozen=True)
class _StoredVectors:
    """What a test-vector archive holds, each key checked on its own (not yet against the others)."""

    tensors: dict[str, tuple]  # "input"/"output" -> (names, dtypes, layouts, scales, zero points)
    arrays: dict[str, list[np.ndarray]]  # "input" -> the inputs, "output" -> the expected outputs
    kinds: tuple[str, ...]
    sources: tuple[str, ...]
    threshold_names: tuple[str, ...]
    table: np.ndarray  # outputs x threshold_names
    header: dict[str, str]


def _read_archive(archive: Any, p: Path) -> _StoredVectors:
    keys = set(archive.files)
    _check_format(archive, keys, p)
    tensors = {side: _tensor_table(archive, side, p) for side in ("input", "output")}
    n_in, n_out = len(tensors["input"][0]), len(tensors["output"][0])
    if n_out == 0:
        raise _refuse(p, "it names no outputs")
    arrays = {}
    for side, prefix, n in (("input", "input_", n_in), ("output", "expected_", n_out)):
        wanted = [f"{prefix}{i}" for i in range(n)]
        absent = [k for k in wanted if k not in keys]
        if absent:
            raise _refuse(p, f"it lacks the array(s) {', '.join(absent)}")
        arrays[side] = [archive[k] for k in wanted]
    extra = sorted(keys - set(_REQUIRED) - {f"input_{i}" for i in range(n_in)} - {f"expected_{k}" for k in range(n_out)})
    if extra:
        raise _refuse(p, f"it holds key(s) no test-vector file has: {', '.join(extra[:5])}")
    kinds = _texts(archive, "output_kinds", p, n_out)
    sources = _texts(archive, "output_kind_sources", p, n_out)
    threshold_names = _texts(archive, "threshold_names", p)
    unknown = [t for t in threshold_names if t not in THRESHOLD_FIELDS]
    if unknown:
        raise _refuse(p, f"it names threshold(s) {', '.join(unknown)} this edge-export does not know")
    table = archive["output_thresholds"]
    if table.dtype.kind != "f" or table.shape != (n_out, len(threshold_names)):
        raise _refuse(p, f"'output_thresholds' is not a {n_out}x{len(threshold_names)} table of numbers")
    header = {key: _text(archive, key, p) for key in ("tool_version", "model_sha256", "model_class", "signature_key")}
    return _StoredVectors(tensors, arrays, kinds, sources, threshold_names, table, header)


def _check_format(archive: Any, keys: set[str], p: Path) -> None:
    """An archive `--emit-test-vectors` wrote, every required key present, the version this one reads."""
    if "format" not in keys or archive["format"].dtype.kind != "U" or str(archive["format"]) != TEST_VECTORS_FORMAT:
        raise _refuse(p, "it is an .npz archive, but not one `--emit-test-vectors` wrote (no 'format' key naming it)")
    missing = [k for k in _REQUIRED if k not in keys]
    if missing:
        raise _refuse(p, f"it lacks the key(s) {', '.join(missing)}")
    version = archive["format_version"]
    if version.shape != () or version.dtype.kind not in "iu" or int(version) != TEST_VECTORS_VERSION:
        raise _refuse(p, f"its format version is {version!r}; this edge-export reads version {TEST_VECTORS_VERSION}",
                      "Use the edge-export version that wrote it, or export the vectors again.")


def _tensor_table(archive: Any, side: str, p: Path) -> tuple:
    """(names, dtypes, layouts, scales, zero points) of the inputs or the outputs."""
    names = _texts(archive, f"{side}_names", p)
    n = len(names)
    dtypes = _texts(archive, f"{side}_dtypes", p, n)
    layouts = _texts(archive, f"{side}_layouts", p, n)
    bad_layout = [x for x in layouts if x not in LAYOUTS]
    if bad_layout:
        raise _refuse(p, f"'{side}_layouts' holds {bad_layout[0]!r} (not one of {', '.join(LAYOUTS)})")
    scales = _numbers(archive, f"{side}_scales", p, n, "f")
    zero_points = _numbers(archive, f"{side}_zero_points", p, n, "iu")
    return names, dtypes, layouts, scales, zero_points


def _reference_vectors(stored: _StoredVectors, p: Path) -> ReferenceVectors:
    """The checked vectors, once the keys agree with each other."""
    from ..validators.output_kinds import KindSource

    valid_kinds = {k.value for k in OutputKind}
    valid_sources = {s.value for s in KindSource}
    for kind, source in zip(stored.kinds, stored.sources):
        if kind not in valid_kinds or source not in valid_sources:
            raise _refuse(p, f"output kind {kind!r} ({source!r}) is not one of {', '.join(sorted(valid_kinds))}")
    thresholds = tuple(
        Thresholds(**{name: float(v) for name, v in zip(stored.threshold_names, row) if not math.isnan(float(v))})
        for row in stored.table
    )
    arrays = stored.arrays
    counts = {int(a.shape[0]) if a.ndim else -1 for a in (*arrays["input"], *arrays["output"])}
    if len(counts) != 1 or min(counts) < 1:
        raise _refuse(p, "its arrays do not all hold the same number (at least 1) of samples along their first axis")
    return ReferenceVectors(
        signature_key=stored.header["signature_key"],
        input_tensors=_described(p, stored.tensors["input"], arrays["input"], True),
        output_tensors=_described(p, stored.tensors["output"], arrays["output"], False),
        inputs=tuple(arrays["input"]),
        expected=tuple(np.asarray(a, dtype=np.float32) for a in arrays["output"]),
        kinds=stored.kinds,
        kind_sources=stored.sources,
        thresholds=thresholds,
        model_sha256=stored.header["model_sha256"],
        model_class=stored.header["model_class"],
        tool_version=stored.header["tool_version"],
    )


def _described(p: Path, table: tuple, stored: list[np.ndarray], is_input: bool) -> tuple[VectorTensor, ...]:
    """The inputs' or outputs' descriptions, each checked against its stored array's dtype."""
    names, dtypes, layouts, scales, zero_points = table
    out = []
    for i, (name, dtype, layout) in enumerate(zip(names, dtypes, layouts)):
        array = stored[i]
        if is_input and array.dtype.name != dtype:
            raise _refuse(p, f"input_{i} ({name}) holds {array.dtype.name}, but the file says the model takes {dtype}")
        if not is_input and array.dtype.kind != "f":
            raise _refuse(p, f"expected_{i} ({name}) holds {array.dtype.name}, not float values")
        scale = float(scales[i])
        has_scale = math.isfinite(scale) and scale > 0
        out.append(VectorTensor(name, tuple(int(d) for d in array.shape[1:]), dtype, layout,
                                scale if has_scale else None, int(zero_points[i]) if has_scale else None))
    return tuple(out)


def check_vectors_fit_model(vectors: ReferenceVectors, fb: FlatbufferModel, vectors_path: Path, tflite_path: Path) -> None:
    """The model's signature, names, shapes and dtypes are the ones the vectors were made for
    (exit 2 naming the first difference)."""
    hint = (
        f"Pass the test vectors written with {tflite_path.name} (its <stem>.testdata.npz), or export them "
        "again with --emit-test-vectors."
    )
    key = fb.signatures[0]["key"] if fb.signatures else ""
    if (key or "") != vectors.signature_key:
        raise UsageError(
            f"The test vectors {vectors_path} are for signature {vectors.signature_key!r}, but {tflite_path}'s "
            f"signature is {key!r}.",
            hint,
        )
    for side, stored, names, tensors in (
        ("input", vectors.input_tensors, fb.input_names, fb.input_tensors),
        ("output", vectors.output_tensors, fb.output_names, fb.output_tensors),
    ):
        if [t.name for t in stored] != list(names):
            raise UsageError(
                f"The test vectors {vectors_path} have {side}s {', '.join(t.name for t in stored) or 'none'}, but "
                f"{tflite_path} has {side}s {', '.join(names) or 'none'}.",
                hint,
            )
        for t, model_tensor in zip(stored, tensors):
            shape = tuple(int(d) for d in model_tensor.shape)
            if t.shape != shape or t.dtype != model_tensor.dtype:
                raise UsageError(
                    f"The test vectors {vectors_path} hold {side} {t.name} as {t.dtype} {list(t.shape)}, but "
                    f"{tflite_path} takes it as {model_tensor.dtype} {list(shape)}.",
                    hint,
                )
