"""TFLite model metadata for apps: what MediaPipe Tasks and the LiteRT support library read.

``--labels [NAME=]FILE``, ``--mean``/``--std``, ``--model-name``, ``--model-version``,
``--description`` and ``--author`` are written in the published metadata form:

- a ``ModelMetadata`` flatbuffer (MediaPipe's ``metadata_schema.fbs``, file identifier ``M001``) in
  a model buffer named by the ``TFLITE_METADATA`` metadata entry (``attach_metadata_pass``);
- one ``SubGraphMetadata`` whose tensor metadata follow the signature's inputs and outputs, in order:
  an image input (the 4-D input ``--mean``/``--std`` describe) gets ``ImageProperties`` (colour
  space) and a ``NormalizationOptions`` process unit, a classifier output with ``--labels`` gets
  its labels file as a ``TENSOR_AXIS_LABELS`` associated file, any other tensor a plain entry with its
  signature name;
- the associated files appended after the flatbuffer as a zip, stored uncompressed, with the user's
  bytes unchanged (an app reads the labels file back out of the .tflite).

Normalization is on the scale apps feed: MediaPipe normalizes raw 0..255 pixels as
``(pixel - mean) / std``, while ``--mean``/``--std`` are on a 0..1 scale (as calibration images use
them), so the metadata holds ``255 * mean`` and ``255 * std``: the same input tensor either way.

Writer. The tensor entries are built with MediaPipe's metadata writers (``metadata_info``: the
image input, classification output and general info builders) and its generated schema classes,
from the optional extra ``edge-export[metadata]`` (mediapipe 1.2). MediaPipe 1.2.2's populator
(``metadata.py``, and ``metadata_writer.py`` which imports it) does not import: it needs
``mediapipe.tasks.cc.metadata.python``, which the 1.2 wheels no longer ship. It also re-packs the
model with a plain ``flatbuffers.Builder`` and its own copy of the TFLite schema, which would undo the
16-byte buffer alignment. So the model side is edge-export's own: a flatbuffer pass through the
aligned writer, then the zip appended the way the populator does (``zipfile`` in append mode).
``min_parser_version`` is ``1.0.0``: every field written here is in the schema's 1.0.0 (the
populator computes it with a native helper that 1.2 does not ship either).
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from ..errors import UsageError
from ..reports.model import AssociatedFile, MetadataSection, MetadataTensor

if TYPE_CHECKING:
    from ..config import InputSpec
    from ..flatbuffer import FlatbufferModel, TensorInfo
    from ..validators.output_kinds import KindDecision

__all__ = [
    "DESCRIBING_OPTIONS",
    "INSTALL_COMMAND",
    "MIN_PARSER_VERSION",
    "ModelMetadata",
    "attach_metadata",
    "build_model_metadata",
    "check_metadata_options",
    "metadata_requested",
    "model_has_metadata",
    "read_model_metadata",
    "read_model_metadata_bundle",
]

INSTALL_COMMAND = "pip install 'edge-export[metadata]'"
MIN_PARSER_VERSION = "1.0.0"
_METADATA_FILE_IDENTIFIER = b"M001"
# The options that only describe the model (no other role than the metadata).
DESCRIBING_OPTIONS = (
    ("model_name", "--model-name"),
    ("model_version", "--model-version"),
    ("description", "--description"),
    ("author", "--author"),
)
# Fixed zip timestamps: the same export writes the same bytes.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class ImageInput:
    """The input ``--mean``/``--std`` describe: its index and channel count."""

    index: int
    channels: int


@dataclass(frozen=True)
class ModelMetadata:
    """What ``attach_metadata`` writes: the metadata flatbuffer, the associated files (name, bytes)
    and the report section describing both."""

    buffer: bytes
    files: tuple[tuple[str, bytes], ...]
    section: MetadataSection


def metadata_requested(options: Any) -> bool:
    """Whether the run writes model metadata (any of the six options given, and no --no-metadata)."""
    given = bool(options.parity.labels or options.quantization.mean is not None or options.quantization.std is not None) or any(
        getattr(options.metadata, field) for field, _ in DESCRIBING_OPTIONS
    )
    return given and options.metadata.write_metadata


def _metadata_modules() -> tuple[Any, Any, Any]:
    """MediaPipe's metadata builders and generated schemas; a usage error naming the extra when absent."""
    try:
        from mediapipe.tasks.metadata import metadata_schema_py_generated as metadata_fb
        from mediapipe.tasks.metadata import schema_py_generated as schema_fb
        from mediapipe.tasks.python.metadata.metadata_writers import metadata_info
    except ImportError as exc:
        raise UsageError(
            "Writing TFLite model metadata (--labels, --mean/--std, --model-name, --model-version, "
            f"--description, --author) needs MediaPipe's metadata writers, which are not installed ({exc}).",
            f"Install them with {INSTALL_COMMAND}, or pass --no-metadata to use --labels, --mean and --std "
            "only for parity and calibration.",
        ) from exc
    return metadata_info, metadata_fb, schema_fb


def _image_input(specs: Sequence[InputSpec], layout: str) -> ImageInput:
    images = [i for i, s in enumerate(specs) if len(s.shape) == 4]
    if len(images) != 1:
        what = "no 4-D (image) input" if not images else f"{len(images)} 4-D inputs"
        raise UsageError(
            f"--mean/--std describe the normalization of the model's image input, but the model has {what} "
            f"(input shapes: {', '.join(s.shape_text for s in specs)}).",
            "Drop --mean/--std (they are written as image normalization metadata), or export the image model.",
        )
    shape = specs[images[0]].shape
    # The PyTorch shape: --image-layout says where its channels are (--channels-last only changes the flatbuffer).
    channels = shape[1] if layout == "nchw" else shape[3]
    return ImageInput(images[0], channels)


def check_metadata_options(options: Any, specs: Sequence[InputSpec], carries_metadata: bool) -> ImageInput | None:
    """Refuse metadata options the run cannot write (exit 2) before any conversion: the extra is
    missing, the target keeps no metadata, ``--mean``/``--std`` do not fit the image input. Returns
    the image input ``--mean``/``--std`` describe (None without them)."""
    described = [flag for field, flag in DESCRIBING_OPTIONS if getattr(options.metadata, field)]
    if described and not options.metadata.write_metadata:
        raise UsageError(
            f"{', '.join(described)} and --no-metadata contradict each other: "
            f"{'it is' if len(described) == 1 else 'they are'} only written as model metadata.",
            f"Drop --no-metadata, or drop {', '.join(described)}.",
        )
    if not metadata_requested(options):
        return None
    if not carries_metadata:
        given = [flag for field, flag in DESCRIBING_OPTIONS if getattr(options.metadata, field)]
        if given:
            raise UsageError(
                f"{', '.join(given)} {'is' if len(given) == 1 else 'are'} written as TFLite model metadata, "
                f"which --target {options.target if isinstance(options.target, str) else options.target.value} "
                "does not keep (TFLite Micro ignores metadata; it would only cost flash).",
                f"Drop {', '.join(given)}.",
            )
        return None
    _metadata_modules()
    if options.quantization.mean is None and options.quantization.std is None:
        return None
    image = _image_input(specs, options.quantization.image_layout)
    for flag, values in (("--mean", options.quantization.mean), ("--std", options.quantization.std)):
        if values is not None and len(values) not in (1, image.channels):
            raise UsageError(
                f"{flag} has {len(values)} values, but the image input '{specs[image.index].name}' "
                f"(shape {specs[image.index].shape_text}, layout {options.quantization.image_layout}) has {image.channels} channels.",
                f"Give one value per channel ({image.channels}), or one for all; check --image-layout.",
            )
    return image


def _labels_file_names(kinds: Sequence[KindDecision], output_names: Sequence[str]) -> dict[int, str]:
    """The associated file name of each labelled output: the labels file's own name, prefixed with
    the output's name when two outputs' files share one."""
    names = {i: Path(k.labels.file).name for i, k in enumerate(kinds) if k.labels is not None}
    clashing = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {i: f"{output_names[i]}_{n}" if n in clashing else n for i, n in names.items()}


def build_model_metadata(
    model: FlatbufferModel,
    options: Any,
    kinds: Sequence[KindDecision],
    image: ImageInput | None,
) -> ModelMetadata:
    """The metadata of ``model`` (its signature names and I/O types) from the options: ``kinds``
    are the outputs' decisions (the labelled ones carry their labels file, count already checked)."""
    metadata_info, metadata_fb, schema_fb = _metadata_modules()
    notes: list[str] = []
    inputs = [
        _image_entry(name, tensor, options, image.channels, notes)
        if image is not None and i == image.index
        else _plain_entry(metadata_info, name)
        for i, (name, tensor) in enumerate(zip(model.input_names, model.input_tensors))
    ]
    file_names = _labels_file_names(kinds, model.output_names)
    outputs = [
        _classification_entry(name, tensor, kinds[i], file_names[i])
        if i < len(kinds) and kinds[i].labels is not None
        else _plain_entry(metadata_info, name)
        for i, (name, tensor) in enumerate(zip(model.output_names, model.output_tensors))
    ]
    buffer = _metadata_flatbuffer(model, options, [e.md for e in inputs], [e.md for e in outputs])
    section = MetadataSection(
        name=options.metadata.model_name,
        version=options.metadata.model_version,
        description=options.metadata.description,
        author=options.metadata.author,
        min_parser_version=MIN_PARSER_VERSION,
        inputs=tuple(e.row for e in inputs),
        outputs=tuple(e.row for e in outputs),
        associated_files=tuple(e.associated for e in outputs if e.associated is not None),
        metadata_bytes=len(buffer),
        notes=tuple(notes),
    )
    return ModelMetadata(buffer, tuple(e.file for e in outputs if e.file is not None), section)


@dataclass(frozen=True)
class _TensorEntry:
    """One tensor's metadata: MediaPipe's writer object, the report's row, and the associated file
    it brings (name and bytes, with the report's description of it)."""

    md: Any
    row: MetadataTensor
    file: tuple[str, bytes] | None = None
    associated: AssociatedFile | None = None


def _tensor_type(dtype: str) -> int | None:
    _, _, schema_fb = _metadata_modules()
    return getattr(schema_fb.TensorType, dtype.upper(), None)


def _plain_entry(metadata_info: Any, name: str) -> _TensorEntry:
    return _TensorEntry(metadata_info.TensorMd(name=name), MetadataTensor(name, "tensor"))


def _image_entry(name: str, tensor: TensorInfo, options: Any, channels: int, notes: list[str]) -> _TensorEntry:
    """The image input ``--mean``/``--std`` describe (on MediaPipe's 0..255 scale); adds a note
    when MediaPipe Tasks would refuse or misread it."""
    metadata_info, metadata_fb, _ = _metadata_modules()
    # Rounded: 255 * 0.224 is 57.120000000000005 in binary; the schema stores float32 anyway.
    mean = tuple(round(255.0 * v, 6) for v in (options.quantization.mean if options.quantization.mean is not None else (0.0,)))
    std = tuple(round(255.0 * v, 6) for v in (options.quantization.std if options.quantization.std is not None else (1.0,)))
    if len(mean) != len(std):  # one given per channel, the other once: spell both out
        mean, std = (mean * channels)[:channels], (std * channels)[:channels]
    color = {3: "RGB", 1: "GRAYSCALE"}.get(channels)
    md = metadata_info.InputImageTensorMd(
        name=name,
        description=f"Image input, {tensor.dtype}, shape {list(tensor.shape)}.",
        norm_mean=list(mean),
        norm_std=list(std),
        color_space_type=getattr(metadata_fb.ColorSpaceType, color or "UNKNOWN"),
        tensor_type=_tensor_type(tensor.dtype),
    )
    if len(set(mean)) > 1 or len(set(std)) > 1:
        # Measured with mediapipe 1.2.2: ImageClassifier.create_from_options refuses the model.
        notes.append(
            "Per-channel normalization: the LiteRT support library applies it, but MediaPipe Tasks "
            "refuses such a model (\"Per-channel image normalization is not available\"); for "
            "MediaPipe give one --mean and one --std value for all channels."
        )
    if len(tensor.shape) == 4 and tensor.shape[-1] != channels:
        notes.append(
            f"The image input '{name}' is NCHW {list(tensor.shape)}; MediaPipe Tasks' image tasks "
            "and the support library's image processor feed NHWC: export with --channels-last."
        )
    return _TensorEntry(md, MetadataTensor(name, "image", mean, std, color))


def _classification_entry(name: str, tensor: TensorInfo, decision: KindDecision, file_name: str) -> _TensorEntry:
    """A labelled output: its labels file (the user's bytes, unchanged) as an associated file."""
    metadata_info, _, _ = _metadata_modules()
    data = Path(decision.labels.file).read_bytes()
    md = metadata_info.ClassificationTensorMd(
        name=name,
        description=f"Scores of {decision.labels.count} classes, labelled by {file_name}.",
        label_files=[metadata_info.LabelFileMd(file_name)],
        tensor_type=_tensor_type(tensor.dtype),
    )
    if tensor.dtype == "float32":
        # The writer records a 0..1 range for float scores (probabilities); a logits output
        # is not in it, and the export cannot tell which one the model returns: no range.
        md.min_values = md.max_values = None
    associated = AssociatedFile(
        file_name, "TENSOR_AXIS_LABELS", len(data), hashlib.sha256(data).hexdigest(), decision.labels.file
    )
    row = MetadataTensor(name, "classification", labels_file=file_name, labels_count=decision.labels.count)
    return _TensorEntry(md, row, (file_name, data), associated)


def _metadata_flatbuffer(model: FlatbufferModel, options: Any, input_md: list[Any], output_md: list[Any]) -> bytes:
    """The ``ModelMetadata`` flatbuffer (identifier ``M001``): the general info and one subgraph
    whose tensor entries follow the signature's inputs and outputs."""
    import flatbuffers

    metadata_info, metadata_fb, _ = _metadata_modules()
    general = metadata_info.GeneralMd(
        name=options.metadata.model_name, version=options.metadata.model_version, description=options.metadata.description, author=options.metadata.author
    ).create_metadata()
    subgraph = metadata_fb.SubGraphMetadataT()
    subgraph.name = model.signatures[0]["key"] if model.signatures else None
    subgraph.inputTensorMetadata = [m.create_metadata() for m in input_md]
    subgraph.outputTensorMetadata = [m.create_metadata() for m in output_md]
    general.subgraphMetadata = [subgraph]
    general.minParserVersion = MIN_PARSER_VERSION
    builder = flatbuffers.Builder(1024)
    builder.Finish(general.Pack(builder), _METADATA_FILE_IDENTIFIER)
    return bytes(builder.Output())


def attach_metadata(model: FlatbufferModel | bytes, metadata: ModelMetadata, origin: str = "the model with metadata") -> FlatbufferModel:
    """``model`` with ``metadata``: the ``TFLITE_METADATA`` buffer through the aligned writer, then
    the associated files as a zip after the flatbuffer (any zip the input carried is replaced).
    Also re-attaches metadata to a model that lost it (the Edge TPU compiler's output)."""
    import functools

    from ..flatbuffer import read_flatbuffer
    from ..passes.flatbuffer import attach_metadata_pass, run_flatbuffer_passes

    attach = functools.partial(attach_metadata_pass, metadata_buffer=metadata.buffer)
    packed = run_flatbuffer_passes(model, [attach], origin=origin).model
    data = _flatbuffer_only(packed.data)
    if metadata.files:
        stream = io.BytesIO()
        stream.write(data)
        # Append mode on bytes that are no zip writes the archive after them, as MediaPipe's
        # populator does: readers find it from the end of the file.
        with zipfile.ZipFile(stream, "a", compression=zipfile.ZIP_STORED) as archive:
            for name, content in metadata.files:
                info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
                info.external_attr = 0o644 << 16
                archive.writestr(info, content)
        data = stream.getvalue()
    return read_flatbuffer(data, origin)


def _zip_names(data: bytes) -> list[str]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return archive.namelist()
    except zipfile.BadZipFile:
        return []


def _flatbuffer_only(data: bytes) -> bytes:
    """The bytes without an appended zip (a packed model never has one; a model read from a file may)."""
    if not _zip_names(data):
        return data
    from ..flatbuffer import pack_model, read_model

    return pack_model(read_model(data), source=data)


def read_model_metadata(model: FlatbufferModel) -> MetadataSection | None:
    """The metadata of a model read back with MediaPipe's generated schema classes and ``zipfile``
    (``inspect``); None when the model has none. Raises UsageError when the extra is missing."""
    raw = _metadata_buffer(model.data)
    if raw is None:
        return None
    _, metadata_fb, _ = _metadata_modules()
    if raw[4:8] != _METADATA_FILE_IDENTIFIER:
        return None
    meta = metadata_fb.ModelMetadataT.InitFromPackedBuf(raw, 0)  # MediaPipe's object API: the whole table
    files: dict[str, bytes] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(model.data)) as archive:
            files = {n: archive.read(n) for n in archive.namelist()}
    except zipfile.BadZipFile:
        pass
    file_types = {v: k for k, v in vars(metadata_fb.AssociatedFileType).items() if not k.startswith("_")}
    colors = {v: k for k, v in vars(metadata_fb.ColorSpaceType).items() if not k.startswith("_")}

    def text(value: Any) -> str | None:
        return value.decode("utf-8", "replace") if isinstance(value, bytes) else value

    def row(tensor: Any) -> MetadataTensor:
        name = text(tensor.name) or ""
        mean = std = color = None
        for unit in tensor.processUnits or ():
            if unit.optionsType == metadata_fb.ProcessUnitOptions.NormalizationOptions:
                mean, std = tuple(float(v) for v in unit.options.mean), tuple(float(v) for v in unit.options.std)
        content = tensor.content
        if content is not None and content.contentPropertiesType == metadata_fb.ContentProperties.ImageProperties:
            color = colors.get(content.contentProperties.colorSpace)
            return MetadataTensor(name, "image", mean, std, color)
        for f in tensor.associatedFiles or ():
            if f.type == metadata_fb.AssociatedFileType.TENSOR_AXIS_LABELS:
                fname = text(f.name)
                data = files.get(fname)
                count = len([line for line in data.decode("utf-8", "replace").splitlines() if line.strip()]) if data is not None else None
                return MetadataTensor(name, "classification", labels_file=fname, labels_count=count)
        return MetadataTensor(name, "tensor")

    subgraph = (meta.subgraphMetadata or [None])[0]
    listed: list[tuple[str, int]] = []
    for tensor in (*(subgraph.inputTensorMetadata or ()), *(subgraph.outputTensorMetadata or ())) if subgraph else ():
        listed += [(text(f.name), f.type) for f in tensor.associatedFiles or ()]
    associated = tuple(
        AssociatedFile(name, file_types.get(kind, str(kind)), len(files[name]), hashlib.sha256(files[name]).hexdigest())
        for name, kind in listed
        if name in files
    )
    missing = [name for name, _ in listed if name not in files]
    return MetadataSection(
        name=text(meta.name),
        version=text(meta.version),
        description=text(meta.description),
        author=text(meta.author),
        min_parser_version=text(meta.minParserVersion),
        inputs=tuple(row(t) for t in (subgraph.inputTensorMetadata or ())) if subgraph else (),
        outputs=tuple(row(t) for t in (subgraph.outputTensorMetadata or ())) if subgraph else (),
        associated_files=associated,
        metadata_bytes=len(raw),
        notes=tuple(f"the metadata names the associated file {n}, which the file does not hold" for n in missing),
    )


def read_model_metadata_bundle(model: FlatbufferModel) -> ModelMetadata | None:
    """The metadata of ``model`` as ``attach_metadata`` takes it (the buffer as stored, the
    associated files' bytes): to copy metadata onto another model of the same inputs and outputs."""
    raw = _metadata_buffer(model.data)
    section = read_model_metadata(model)
    if raw is None or section is None:
        return None
    files: tuple[tuple[str, bytes], ...] = ()
    if section.associated_files:  # read_model_metadata listed only files the zip holds
        with zipfile.ZipFile(io.BytesIO(model.data)) as archive:
            files = tuple((f.name, archive.read(f.name)) for f in section.associated_files)
    return ModelMetadata(raw, files, section)


def model_has_metadata(data: bytes) -> bool:
    """Whether the flatbuffer ``data`` has a ``TFLITE_METADATA`` buffer (no MediaPipe needed)."""
    return _metadata_buffer(bytes(data)) is not None


def _metadata_buffer(data: bytes) -> bytes | None:
    """The data of the buffer the ``TFLITE_METADATA`` entry names (None: no such entry)."""
    from ..flatbuffer import metadata_buffer
    from ..passes.flatbuffer.attach_metadata_pass import METADATA_BUFFER_NAME

    return metadata_buffer(data, METADATA_BUFFER_NAME)
