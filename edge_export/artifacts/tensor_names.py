"""The tensor-name map written beside a model whose inner tensor names were stripped.

``--target micro`` strips inner tensor names by default (they are ~15% of a small int8 CNN's flash,
and TFLite Micro never reads them). What they carried, the PyTorch module each tensor came from, is
what per-layer parity matches layers by; so the run writes it beside the model as
``<stem>.tensors.json``: per subgraph, tensor index -> name and module path, plus the sha256 of the
stripped file it belongs to. ``validate`` finds the map beside the ``.tflite`` (or takes
``--tensor-names FILE``), refuses one made for another file, and puts the names back in memory
(``restore_tensor_names_pass``) before matching layers. The file on disk is never changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel

__all__ = [
    "TENSOR_NAMES_FORMAT",
    "TensorNameMap",
    "build_tensor_name_map",
    "load_tensor_name_map",
    "restore_tensor_names",
    "tensor_names_path",
]

TENSOR_NAMES_FORMAT = "edge-export tensor names"
_VERSION = 1


def tensor_names_path(tflite_path: Path) -> Path:
    """Where the map of ``model.tflite`` lives: ``model.tensors.json`` beside it."""
    return Path(f"{Path(tflite_path).with_suffix('')}.tensors.json")


@dataclass(frozen=True)
class TensorNameMap:
    model_sha256: str  # of the stripped file the names belong to
    # per subgraph: tensor index -> name (only the tensors whose name was stripped)
    names: tuple[Mapping[int, str], ...]

    def check_belongs_to(self, model: FlatbufferModel, source: Path, tflite_path: Path) -> None:
        actual = hashlib.sha256(model.data).hexdigest()
        if actual != self.model_sha256:
            raise UsageError(
                f"The tensor-name map {source} belongs to another model: it was written for a file with "
                f"sha256 {self.model_sha256[:16]}..., but {tflite_path} has sha256 {actual[:16]}... "
                "(the model was exported again, or the map is another model's).",
                "Export the model again so that its map is written with it, or pass the map written with "
                "this file with --tensor-names FILE.",
            )


def build_tensor_name_map(named: FlatbufferModel, stripped: FlatbufferModel) -> bytes:
    """The JSON map of the names ``stripped`` lost relative to ``named`` (the same model with its
    names), each with the PyTorch module path it came from (``provenance.tensor_module``)."""
    from ..graph.provenance import tensor_module

    named_model, stripped_model = named.mutable(), stripped.mutable()
    subgraphs = []
    for sg_named, sg_stripped in zip(named_model.subgraphs or (), stripped_model.subgraphs or ()):
        tensors = []
        for index, (a, b) in enumerate(zip(sg_named.tensors or (), sg_stripped.tensors or ())):
            name = _text(a.name)
            if name and not _text(b.name):
                ref = tensor_module(name)
                tensors.append(
                    {
                        "index": index,
                        "name": name,
                        "module": ref.path if ref is not None else None,
                        "module_type": ref.type_name if ref is not None else None,
                    }
                )
        subgraphs.append({"tensors": tensors})
    document = {
        "format": TENSOR_NAMES_FORMAT,
        "version": _VERSION,
        "model_sha256": hashlib.sha256(stripped.data).hexdigest(),
        "model_size_bytes": stripped.size_bytes,
        "subgraphs": subgraphs,
    }
    return (json.dumps(document, indent=1) + "\n").encode()


def load_tensor_name_map(path: Path) -> TensorNameMap:
    """Read a map written by ``build_tensor_name_map``; a file that is not one is exit 2."""
    hint = "Pass the <stem>.tensors.json edge-export wrote beside the model."
    try:
        document = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"The tensor-name map {path} does not exist.", hint) from exc
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UsageError(f"The tensor-name map {path} cannot be read as JSON: {exc}.", hint) from exc
    try:
        if document.get("format") != TENSOR_NAMES_FORMAT or document.get("version") != _VERSION:
            raise ValueError("not an edge-export tensor-name map (version 1)")
        sha = document["model_sha256"]
        if not isinstance(sha, str) or len(sha) != 64:
            raise ValueError("model_sha256 is not a sha256")
        names = tuple(
            {int(t["index"]): str(t["name"]) for t in sg["tensors"]} for sg in document["subgraphs"]
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"{path} is not a tensor-name map edge-export wrote: {exc}.", hint) from exc
    return TensorNameMap(sha, names)


def restore_tensor_names(model: FlatbufferModel, names: TensorNameMap, source: Path) -> FlatbufferModel:
    """The model with the map's names put back (in memory), for per-layer matching."""
    from functools import partial

    from ..passes.flatbuffer import restore_tensor_names_pass, run_flatbuffer_passes

    restore = partial(restore_tensor_names_pass, names=names.names)
    return run_flatbuffer_passes(model, [restore], origin=f"the model with the names of {source}").model


def _text(name: Any) -> str:
    if name is None:
        return ""
    return name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
