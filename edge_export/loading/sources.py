"""Load the user's model from any of the four supported sources, detected by content.

    ExportedProgram archive (torch.export.save)   -> its module; stored example inputs give shapes
    TorchScript archive (torch.jit.save)          -> converted to an ExportedProgram (needs shapes)
    package.module:attr                           -> class, factory or instance; optional --weights
    full pickle (torch.save(model))               -> only with trust_pickle=True

A state dict or any other pickle is loaded with ``weights_only=True`` first, which cannot run code, so
an untrusted pickle is identified without executing its payload. An ExportedProgram archive holds
pickles and code too: pt2_archive.py reads it through an allow-list and hands torch only the checked
bytes, archive_safety.py guards torch while it reads them, and sandbox.py confines the whole run.
"""

from __future__ import annotations

import enum
import importlib
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputSpecError, ModelLoadError, UsageError, first_line, map_exceptions

__all__ = ["ModelKind", "LoadedModel", "detect_kind", "load_model", "is_module_reference", "needs_confinement"]

_REFERENCE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
_PICKLE_PROTOCOL_PREFIX = b"\x80"
_EXPECTED = (
    "edge-export accepts an ExportedProgram archive (torch.export.save, usually .pt2), a TorchScript "
    "archive (torch.jit.save), a `package.module:attr` reference to an nn.Module class, factory or "
    "instance, or a pickled module (torch.save(model), only with --trust-pickle)."
)


class ModelKind(str, enum.Enum):
    EXPORTED_PROGRAM = "exported_program"
    TORCHSCRIPT = "torchscript"
    MODULE_REFERENCE = "module_reference"
    PICKLE = "pickle"


@dataclass(frozen=True)
class LoadedModel:
    module: Any  # torch.nn.Module in eval mode
    kind: ModelKind
    source: str
    example_inputs: tuple | None  # torch tensors, when the source carries them
    class_name: str
    # forward()'s parameter names when the source records them apart from ``module`` (TorchScript:
    # the converted graph renames ``x`` to ``x_1``); None: read them from ``module.forward``
    input_names: tuple[str, ...] | None = None


def is_module_reference(text: str) -> bool:
    return bool(_REFERENCE.match(text)) and not Path(text).exists()


def needs_confinement(model: Any, trusted: bool) -> bool:
    """An archive file (ExportedProgram or TorchScript) not marked trusted: it is read in a child."""
    if trusted or not isinstance(model, (str, Path)) or is_module_reference(str(model)):
        return False
    try:
        return detect_kind(Path(model)) in (ModelKind.EXPORTED_PROGRAM, ModelKind.TORCHSCRIPT)
    except ModelLoadError:
        return False  # the loader reports the bad file, in the child or here


def detect_kind(path: Path) -> ModelKind:
    """Look inside the file; the extension is ignored."""
    if not path.exists():
        raise ModelLoadError(
            f"No such model file: {path}.",
            f"Check the path. {_EXPECTED}",
        )
    if path.is_dir():
        raise ModelLoadError(f"{path} is a directory, not a model file.", _EXPECTED)
    try:
        with path.open("rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        raise ModelLoadError(f"Cannot read {path}: {exc.strerror}.", "Check the file's permissions.") from exc
    if head[:2] == b"PK":
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
                # checksums read every member: only when the archive does not claim to inflate far
                # beyond its size (pt2_archive refuses that one from its directory, unread)
                declared = sum(info.file_size for info in zf.infolist())
                bad = zf.testzip() if declared <= 10 * path.stat().st_size + (1 << 20) else None
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ModelLoadError(
                f"{path} looks like a PyTorch archive but is damaged or truncated ({exc}).",
                "Save the model again; " + _EXPECTED,
            ) from exc
        if bad is not None:
            raise ModelLoadError(
                f"{path} is a damaged PyTorch archive: member {bad} fails its checksum.",
                "Save the model again.",
            )
        tails = {n.split("/", 1)[1] if "/" in n else n for n in names}
        if "archive_format" in tails or "models/model.json" in tails or any(
            t.startswith("models/") and t.endswith(".json") for t in tails
        ):
            return ModelKind.EXPORTED_PROGRAM
        if "constants.pkl" in tails or any(t.startswith("code/") for t in tails):
            return ModelKind.TORCHSCRIPT
        if "data.pkl" in tails:
            return ModelKind.PICKLE
        raise ModelLoadError(f"{path} is a zip archive but not a PyTorch model archive.", _EXPECTED)
    if head[:1] == _PICKLE_PROTOCOL_PREFIX:
        return ModelKind.PICKLE
    raise ModelLoadError(f"{path} is not a PyTorch model file (unrecognized content).", _EXPECTED)


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def torch_error_text(exc: BaseException, limit: int = 400) -> str:
    """The useful part of a torch error on one line: no terminal escape codes, the unpickler's own
    reason instead of its two-option preamble, every line of a load_state_dict error."""
    text = _ANSI_ESCAPE.sub("", str(exc)).strip()
    reason = re.search(r"WeightsUnpickler error: (.*?)(?:\s+Please use|\n|$)", text, re.DOTALL)
    if reason:
        text = reason.group(1)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith("Error(s) in loading state_dict"):
        lines = lines[1:]
    text = "; ".join(line.rstrip(" .;") for line in lines)
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text or type(exc).__name__


def _class_name(module: Any) -> str:
    cls = type(module)
    return f"{cls.__module__}.{cls.__qualname__}"


def _load_exported_program(path: Path, trust_pickle: bool = False) -> LoadedModel:
    import torch

    from .archive_safety import UnsafeArchiveMember, load_untrusted_archive

    try:
        ep = torch.export.load(str(path)) if trust_pickle else load_untrusted_archive(path)
    except (UnsafeArchiveMember, UsageError):
        raise
    except Exception as exc:  # boundary: a corrupt archive makes torch.export.load raise many kinds
        if not trust_pickle and _is_refused_unpickling(exc):
            raise ModelLoadError(
                f"{path} is an ExportedProgram archive holding a pickle that is more than tensors; "
                "loading it could run arbitrary code, so it is refused by default.",
                "Export the model again with torch.export.save from plain tensors; if you trust the "
                "file's author, pass --trust-pickle.",
            ) from exc
        raise ModelLoadError(
            f"{path} is an ExportedProgram archive that torch.export.load cannot read: "
            f"{first_line(exc, 200)}.",
            "It may be truncated or saved by an incompatible torch version; export it again with "
            "torch.export.save.",
        ) from exc
    example = None
    stored = ep.example_inputs
    # stored inputs are used only when they are exactly (args of tensors, no kwargs)
    if isinstance(stored, tuple) and len(stored) == 2 and isinstance(stored[0], tuple) and not stored[1]:
        if all(isinstance(a, torch.Tensor) for a in stored[0]):
            example = tuple(stored[0])
    with map_exceptions(
        {Exception: ModelLoadError},  # torch builds the module from the program's parts: any of them may be malformed
        f"{path} is an ExportedProgram archive whose program torch cannot turn into a module: {{error}}.",
        "It may be damaged or saved by an incompatible torch version; export it again with torch.export.save.",
    ):
        module = ep.module()
    return LoadedModel(module, ModelKind.EXPORTED_PROGRAM, str(path), example, "torch.export.ExportedProgram")


def _is_refused_unpickling(exc: BaseException) -> bool:
    """The weights_only unpickler (or the refused pickle.loads) stopped something in the archive."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = str(exc)
        if "Weights only load failed" in text or "Unsupported global" in text or type(exc).__name__ == "_RefusedPickle":
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def _load_torchscript(path: Path, example_inputs: tuple | None, trust_pickle: bool = False) -> LoadedModel:
    """Trusted: torch.jit.load here. Untrusted: the allow-list reader first (torchscript_archive),
    then torch.jit.load and the conversion in a child that may read only Python's own files, which
    hands back a .pt2 read through the .pt2 allow-list reader (its graph's operators checked again)."""
    checked = None if trust_pickle else _checked_torchscript(path)  # None: trusted, or the test hook
    if example_inputs is None:
        raise InputSpecError(
            f"{path} is a TorchScript archive, which does not record its input shapes.",
            "Pass them with --input-shape (once per input, in forward() order), e.g. --input-shape 1,3,224,224.",
        )
    if checked is not None:
        checked.check_inputs(len(example_inputs))
    if trust_pickle:
        converted = convert_torchscript(path.read_bytes(), tuple(example_inputs), str(path))
    else:
        data = path.read_bytes() if checked is None else checked.canonical_bytes()
        converted = _convert_confined(data, tuple(example_inputs), str(path))
    ep = _program_from_pt2(path, converted.pt2, trusted=trust_pickle)
    return LoadedModel(ep.module(), ModelKind.TORCHSCRIPT, str(path), None, converted.class_name, converted.input_names)


def _checked_torchscript(path: Path) -> Any:
    """The allow-list reader's result; None under the test hook that shows the confinement alone."""
    import os

    from .pt2_archive import DISABLE_CHECKS_ENV
    from .torchscript_archive import read_checked_torchscript

    if os.environ.get(DISABLE_CHECKS_ENV) == "1":
        return None
    return read_checked_torchscript(path)


@dataclass(frozen=True)
class ConvertedTorchScript:
    """What the TorchScript loader's child sends back: plain bytes and names, no object of the model's."""

    pt2: bytes  # torch.export.save of the converted ExportedProgram
    class_name: str
    input_names: tuple[str, ...]


def _convert_confined(data: bytes, example_inputs: tuple, shown: str) -> ConvertedTorchScript:
    import os

    from ..processes.sandbox import python_reads, run_confined

    if not hasattr(os, "fork"):
        return convert_torchscript(data, example_inputs, shown)  # the reader's checks stand alone here
    result, _ = run_confined(_convert_in_child, data, example_inputs, shown, reads=python_reads())
    if not isinstance(result, ConvertedTorchScript) or not isinstance(result.pt2, bytes):
        raise ModelLoadError(f"{shown}: the TorchScript loader's child returned no program.", "Run with --debug and report it.")
    return result


def _convert_in_child(data: bytes, example_inputs: tuple, shown: str, _channel: Any) -> ConvertedTorchScript:
    return convert_torchscript(data, example_inputs, shown)


def convert_torchscript(data: bytes, example_inputs: tuple, shown: str) -> ConvertedTorchScript:
    """torch.jit.load of ``data`` (a TorchScript archive's bytes) and torch's TorchScript-to-
    ExportedProgram converter; the program comes back as .pt2 bytes."""
    import io

    import torch

    with map_exceptions(
        {Exception: ModelLoadError},  # torch.jit.load raises RuntimeError, ValueError, ... on a bad archive
        f"{shown} is a TorchScript archive that torch.jit.load cannot read: {{error}}.",
        "It may be truncated; save it again with torch.jit.save.",
    ):
        scripted = torch.jit.load(io.BytesIO(data), map_location="cpu")
    scripted.eval()
    try:
        from torch._export.converter import TS2EPConverter

        ep = TS2EPConverter(scripted, tuple(example_inputs)).convert()
    except Exception as exc:  # boundary: the converter runs the user's TorchScript code
        raise ModelLoadError(
            f"{shown}: torch's TorchScript-to-ExportedProgram converter failed: {first_line(exc, 200)}.",
            "Check --input-shape against the model, or export the original nn.Module with "
            "torch.export.save and pass the .pt2 instead.",
        ) from exc
    # exported again from the converted module at the example shapes: the converter's program keeps
    # symbolic sizes and guard code, which the .pt2 reader refuses, and fixed shapes need neither
    with map_exceptions(
        {Exception: ModelLoadError},  # torch.export on the converted module: the model's own limits
        f"{shown}: the program converted from TorchScript cannot be exported at the given shapes: {{error}}.",
        "Check --input-shape against the model, or export the original nn.Module with torch.export.save.",
    ):
        ep = torch.export.export(ep.module(), tuple(example_inputs))
    buffer = io.BytesIO()
    torch.export.save(ep, buffer)
    return ConvertedTorchScript(buffer.getvalue(), str(scripted.original_name), _torchscript_input_names(scripted))


def _program_from_pt2(path: Path, data: bytes, trusted: bool) -> Any:
    """The converted program, through the .pt2 allow-list reader unless trusted."""
    import io
    import tempfile

    import torch

    if trusted:
        return torch.export.load(io.BytesIO(data))
    from .archive_safety import load_untrusted_archive
    from .pt2_refusals import UnsafeArchiveMember

    with tempfile.TemporaryDirectory() as work:  # the child's private folder when confined
        converted = Path(work) / "converted.pt2"
        converted.write_bytes(data)
        try:
            return load_untrusted_archive(converted)
        except UnsafeArchiveMember as exc:
            raise UnsafeArchiveMember(
                f"{path}: the program converted from this TorchScript archive was refused: "
                f"{exc.message.replace(str(converted), 'it')}", exc.hint,
            ) from None


def _torchscript_input_names(scripted: Any) -> tuple[str, ...]:
    """forward()'s parameter names from the TorchScript graph (its debug names carry a ``.N``
    suffix when the tracer renamed them: ``pixel_values.1``), without ``self``."""
    names = [value.debugName() for value in scripted.graph.inputs()][1:]
    return tuple(re.sub(r"\.\d+$", "", name) for name in names)


def _load_pickle(path: Path, trust_pickle: bool) -> LoadedModel:
    import torch

    # weights_only=True cannot execute code: it tells a state dict apart from a pickled module
    # without running an untrusted payload.
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as safe_exc:  # boundary: the unpickler raises many kinds on a corrupt file
        message = str(safe_exc)
        if "Weights only load failed" not in message and "Unsupported global" not in message:
            raise ModelLoadError(
                f"{path} cannot be read as a PyTorch file: {torch_error_text(safe_exc, 200)}.",
                "It may be truncated or corrupted. " + _EXPECTED,
            ) from safe_exc
        if not trust_pickle:
            raise ModelLoadError(
                f"{path} is a pickled Python object; loading it would run arbitrary code, so it is "
                "refused by default.",
                "Safer alternatives: save an ExportedProgram (torch.export.save) or TorchScript "
                "(torch.jit.save), or pass `package.module:Class --weights state_dict.pt`. If you "
                "trust the file's author, pass --trust-pickle.",
            ) from None
        try:
            obj = torch.load(str(path), map_location="cpu", weights_only=False)
        except Exception as exc:  # boundary: a trusted pickle runs its own code, which may raise anything
            raise ModelLoadError(
                f"{path} could not be unpickled: {first_line(exc, 200)}.",
                "The classes it needs must be importable (run from the project folder), or save an "
                "ExportedProgram instead.",
            ) from exc
    if isinstance(obj, torch.nn.Module):
        return LoadedModel(obj.eval(), ModelKind.PICKLE, str(path), None, _class_name(obj))
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ModelLoadError(
            f"{path} holds a state dict (weights only), not a model.",
            "Name the model's class with `package.module:Class --weights " + str(path) + "`.",
        )
    raise ModelLoadError(
        f"{path} holds a pickled {type(obj).__name__}, not a torch.nn.Module.", _EXPECTED
    )


def _load_reference(reference: str, weights: Path | None) -> LoadedModel:
    import torch

    module_name, attr_path = reference.split(":", 1)
    cwd = str(Path.cwd())
    inserted = cwd not in sys.path
    if inserted:
        sys.path.insert(0, cwd)  # the reference is importable "from the current directory"
    try:
        mod = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelLoadError(
            f"Cannot import '{module_name}' for the model reference '{reference}': {exc}.",
            "Run edge-export from the folder that contains the package, or install it.",
        ) from exc
    except Exception as exc:  # boundary: the user's module runs on import
        raise ModelLoadError(
            f"Importing '{module_name}' raised {type(exc).__name__}: {first_line(exc, 200)}.",
            "Fix the error in that module, or run with --debug for the traceback.",
        ) from exc
    except SystemExit as exc:  # a script-like module: without this, edge-export exited 0 having written nothing
        raise ModelLoadError(
            f"Importing '{module_name}' called sys.exit({exc.code!r}), so it defines no model to export.",
            "Guard the module's script code with `if __name__ == \"__main__\":`, or reference a module that only defines the model.",
        ) from exc
    finally:
        if inserted and cwd in sys.path:
            # only for this import: a stray litert_torch.py in the folder must not shadow the real one
            sys.path.remove(cwd)
    obj: Any = mod
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            raise ModelLoadError(
                f"'{module_name}' has no attribute '{attr_path}'.",
                "Check the name after the colon in `package.module:attr`.",
            )
        obj = getattr(obj, part)
    if not isinstance(obj, torch.nn.Module):
        if callable(obj):
            try:
                obj = obj()
            except TypeError as exc:
                raise ModelLoadError(
                    f"Calling {reference}() to build the model failed: {exc}.",
                    "The class or factory must be callable without arguments; wrap it in a "
                    "zero-argument factory function that sets them.",
                ) from exc
            except (Exception, SystemExit) as exc:  # the model's own constructor failed: the user's error
                raise ModelLoadError(
                    f"Building the model with {reference}() raised {type(exc).__name__}: {first_line(exc, 200)}.",
                    "Fix the error in the model's constructor, or run with --debug for the traceback.",
                ) from exc
        if not isinstance(obj, torch.nn.Module):
            raise ModelLoadError(
                f"{reference} is not an nn.Module class, factory or instance (it gave a {type(obj).__name__}).",
                _EXPECTED,
            )
    if weights is not None:
        if not weights.is_file():
            raise ModelLoadError(f"No such weights file: {weights}.", "Check the --weights path.")
        try:
            state = torch.load(str(weights), map_location="cpu", weights_only=True)
        except Exception as exc:  # boundary: the unpickler raises many kinds on a corrupt file
            raise ModelLoadError(
                f"{weights} cannot be loaded as a state dict with weights_only=True: {torch_error_text(exc)}.",
                "Save it with torch.save(model.state_dict(), path).",
            ) from exc
        if not isinstance(state, dict):
            raise ModelLoadError(f"{weights} does not hold a state dict.", "Save it with torch.save(model.state_dict(), path).")
        try:
            obj.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise ModelLoadError(
                f"The weights in {weights} do not fit {reference}: {torch_error_text(exc)}.",
                "Check that the weights were saved from the same model class and configuration.",
            ) from exc
    return LoadedModel(obj.eval(), ModelKind.MODULE_REFERENCE, reference, None, _class_name(obj))


def load_model(
    source: str | Path | Any,
    *,
    example_inputs: tuple | None = None,
    weights: str | Path | None = None,
    trust_pickle: bool = False,
) -> LoadedModel:
    """Load ``source`` (a path, a reference string, or an nn.Module already in memory)."""
    import torch

    if isinstance(source, torch.nn.Module):
        return LoadedModel(source.eval(), ModelKind.MODULE_REFERENCE, "<in-memory module>", None, _class_name(source))
    text = str(source)
    if weights is not None and not is_module_reference(text):
        raise ModelLoadError(
            "--weights only applies to a `package.module:attr` model reference.",
            "Drop --weights, or name the model's class as `package.module:Class`.",
        )
    if is_module_reference(text):
        return _load_reference(text, Path(weights) if weights is not None else None)
    path = Path(text)
    kind = detect_kind(path)
    if kind is ModelKind.EXPORTED_PROGRAM:
        return _load_exported_program(path, trust_pickle)
    if kind is ModelKind.TORCHSCRIPT:
        return _load_torchscript(path, example_inputs, trust_pickle)
    return _load_pickle(path, trust_pickle)
