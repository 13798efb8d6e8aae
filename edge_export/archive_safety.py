"""Read an untrusted ExportedProgram archive (.pt2) without running code from it.

``torch.export.load`` is documented as unsafe for untrusted files. Inside a .pt2 archive it unpickles
(torch 2.6-2.13, torch/export/pt2_archive/_package.py and torch/_export/serde/serialize.py):

    data/sample_inputs/<model>.pt      torch.load(weights_only=True), then falls back to weights_only=False
    data/weights/<path>                torch.load(weights_only=False) when the weights config says use_pickle
    data/constants/tensor_*            the same, from the constants config
    data/constants/custom_obj_*        TorchScript's unpickler (TorchBind objects)
    data/constants/opaque_obj_*        pickle.loads
    data/{weights,constants}/<m>.pt    legacy single-file payloads, through the sample-inputs path

and it gives every ``expr_str`` of the graph JSON (symbolic shapes) to ``sympy.sympify``, which
evaluates Python. Without --trust-pickle, edge-export checks each of these before torch sees the
archive (a pickle must load with torch's weights_only unpickler, which builds only tensors and plain
containers; an expression may hold only sympy constructors and literals), holds ``torch.load`` to
``weights_only=True`` while torch reads the archive (so whatever the check misses fails instead of
running), and refuses a graph that calls anything but a PyTorch operator.
"""

from __future__ import annotations

import io
import json
import operator
import re
import threading
import tokenize
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .errors import ModelLoadError

__all__ = ["UnsafeArchiveMember", "check_archive_members", "check_graph_targets", "refuse_unsafe_unpickling"]

_TRUST_HINT = (
    "Export the model again with torch.export.save from a module whose weights, buffers and example "
    "inputs are plain tensors; if you trust the file's author, pass --trust-pickle."
)
# A symbol or number inside a quoted sympy argument: Symbol('s0', ...), Float('1.5', precision=53).
_SAFE_STRING = re.compile(r"""^(['"])([A-Za-z_][A-Za-z0-9_]*|[-+]?[0-9.]+(e[-+]?[0-9]+)?)\1$""")
_SYMBOL_NAME = re.compile(r"^[a-z]+[0-9]+$")
_SAFE_OPERATORS = {"(", ")", ",", "=", "+", "-", "*", "/", "**", "<", ">", "<=", ">=", "==", "!="}


class UnsafeArchiveMember(ModelLoadError):
    """An archive member whose loading could run code; refused without --trust-pickle."""


def _refuse(path: Path, member: str, what: str) -> UnsafeArchiveMember:
    return UnsafeArchiveMember(
        f"{path} is an ExportedProgram archive whose member {member} {what}; loading it could run "
        "arbitrary code, so it is refused by default.",
        _TRUST_HINT,
    )


def _weights_only_loads(data: bytes) -> bool:
    import torch

    try:
        torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception:  # a probe: any failure means "not plain tensors", which the caller refuses
        return False
    return True


def _members(zf: zipfile.ZipFile) -> dict[str, str]:
    """Name inside the archive's root folder -> zip member name (torch reads records that way)."""
    return {(n.split("/", 1)[1] if "/" in n else n): n for n in zf.namelist()}


def _payload_pickles(zf: zipfile.ZipFile, members: dict[str, str], config: str, folder: str) -> Iterator[tuple[str, str]]:
    """(name, kind) of each member a weights/constants config makes torch unpickle."""
    if config not in members:
        return
    try:
        entries = json.loads(zf.read(members[config])).get("config", {})
    except (ValueError, AttributeError, OSError, zipfile.BadZipFile):
        return  # torch rejects it too, before unpickling anything
    if not isinstance(entries, dict):
        return
    for fqn, meta in entries.items():
        if not isinstance(meta, dict) or not isinstance(meta.get("path_name"), str):
            continue
        name = folder + meta["path_name"]
        if meta["path_name"].startswith(("custom_obj_", "opaque_obj_")):
            yield name, f"object:{fqn}"
        elif meta.get("use_pickle"):
            yield name, f"tensor:{fqn}"


def check_archive_members(path: Path) -> None:
    """Refuse, naming the member, anything in the archive torch would unpickle or evaluate unsafely."""
    with zipfile.ZipFile(path) as zf:
        members = _members(zf)
        models = [n[len("models/"):-len(".json")] for n in members if n.startswith("models/") and n.endswith(".json")]
        to_check: list[tuple[str, str]] = [(n, "sample inputs") for n in members if n.startswith("data/sample_inputs/")]
        for model in models:
            to_check += _payload_pickles(zf, members, f"data/weights/{model}_weights_config.json", "data/weights/")
            to_check += _payload_pickles(zf, members, f"data/constants/{model}_constants_config.json", "data/constants/")
            to_check += [(f"data/{d}/{model}.pt", "legacy payload") for d in ("weights", "constants")]
        # the pre-2.8 layout torch.export.load falls back to
        to_check += [(n, "legacy payload") for n in members if n.startswith("serialized_") and n.endswith(".pt")]
        for name, kind in to_check:
            if name not in members:
                continue  # torch fails on the missing record before it unpickles anything
            if kind.startswith("object:"):
                raise _refuse(path, members[name], f"is a pickled Python object (constant {kind[7:]}), not a tensor")
            if not _weights_only_loads(zf.read(members[name])):
                label = f"weight or constant {kind[7:]}" if kind.startswith("tensor:") else kind
                raise _refuse(path, members[name], f"({label}) is a pickle that holds more than tensors")
        for model in models:
            _check_expressions(path, members[f"models/{model}.json"], zf.read(members[f"models/{model}.json"]))


def _expressions(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr_str" and isinstance(value, str):
                yield value
            else:
                yield from _expressions(value)
    elif isinstance(node, list):
        for value in node:
            yield from _expressions(value)


def _sympy_names() -> set[str]:
    import sympy
    import torch.utils._sympy.functions as torch_sympy

    names = {"True", "False", "None"}
    for namespace in (sympy, torch_sympy):
        for name in dir(namespace):
            value = getattr(namespace, name)
            # constructors (Symbol, Mul, FloorDiv, ...) and constants (oo, true, pi, ...)
            if (isinstance(value, type) and issubclass(value, sympy.Basic)) or isinstance(value, sympy.Basic):
                names.add(name)
    return names


def _check_expressions(path: Path, member: str, data: bytes) -> None:
    """sympify evaluates its string: allow only sympy constructors, keyword names and literals."""
    try:
        graph = json.loads(data)
    except ValueError:
        return  # torch rejects it before evaluating anything
    allowed: set[str] | None = None
    for expr in _expressions(graph):
        if allowed is None:
            allowed = _sympy_names()
        if not _is_plain_sympy(expr, allowed):
            raise _refuse(
                path, member, f"has a symbolic shape expression that is not plain sympy ({expr[:80]!r})"
            )


def _is_plain_sympy(expr: str, allowed: set[str]) -> bool:
    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(expr).readline)
                  if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return False
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.NUMBER:
            continue
        if tok.type == tokenize.STRING and _SAFE_STRING.match(tok.string):
            continue
        if tok.type == tokenize.OP and tok.string in _SAFE_OPERATORS:
            continue
        if tok.type == tokenize.NAME:
            is_keyword = i + 1 < len(tokens) and tokens[i + 1].string == "="
            # a bare symbol name such as s0 or u12 (older torch wrote str(expr), not srepr)
            if is_keyword or tok.string in allowed or _SYMBOL_NAME.match(tok.string):
                continue
        return False
    return True


class _RefusedPickle(Exception):
    pass


class _RefusingPickleModule:
    """Stands in for the ``pickle`` module inside torch's archive reader while it loads."""

    def loads(self, *args: Any, **kwargs: Any) -> Any:
        raise _RefusedPickle("pickle.loads of an archive member was refused")

    def __getattr__(self, name: str) -> Any:
        import pickle

        return getattr(pickle, name)


_GUARD_LOCK = threading.Lock()


@contextmanager
def refuse_unsafe_unpickling() -> Iterator[None]:
    """While torch reads an archive in this thread, torch.load only runs its weights_only unpickler
    and the archive reader's plain ``pickle.loads`` raises."""
    import torch

    try:
        from torch.export.pt2_archive import _package as archive_reader
    except ImportError:  # an older torch without the pt2 archive reader
        archive_reader = None
    with _GUARD_LOCK:
        owner = threading.get_ident()
        original_load = torch.load

        def load(*args: Any, **kwargs: Any) -> Any:
            if threading.get_ident() == owner:
                kwargs["weights_only"] = True
            return original_load(*args, **kwargs)

        torch.load = load
        original_pickle = getattr(archive_reader, "pickle", None)
        if original_pickle is not None:
            archive_reader.pickle = _RefusingPickleModule()
        try:
            yield
        finally:
            torch.load = original_load
            if original_pickle is not None:
                archive_reader.pickle = original_pickle


def check_graph_targets(path: Path, graph_module: Any) -> None:
    """torch's deserializer turns any `torch.*` name in the graph into the callable it names (the
    JSON could say `torch.os.system`); running the module would call it. Allow only operators."""
    import torch

    allowed_plain = {operator.getitem}
    try:
        from torch._export.serde.serialize import _SYM_OPS

        allowed_plain |= set(_SYM_OPS)
    except ImportError:
        pass
    for module in graph_module.modules():
        graph = getattr(module, "graph", None)
        if graph is None:
            continue
        for node in graph.nodes:
            if node.op != "call_function":
                continue
            target = node.target
            if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket, torch._ops.HigherOrderOperator)):
                continue
            if any(target is t for t in allowed_plain):
                continue
            name = f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', repr(target))}"
            raise UnsafeArchiveMember(
                f"{path} is an ExportedProgram archive whose graph calls {name} (node {node.name}), "
                "which is not a PyTorch operator; running it could run arbitrary code, so it is refused "
                "by default.",
                _TRUST_HINT,
            )
