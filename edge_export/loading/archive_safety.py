"""The second line of defence while torch reads an untrusted ExportedProgram archive (.pt2).

The first line is ``pt2_archive.read_checked_archive``: an allow-list of what the archive may hold,
whose checked bytes are all torch is given. Behind it, in case it lets something through, torch reads
those bytes with:

- ``torch.load`` held to ``weights_only=True`` and the archive reader's ``pickle.loads`` refused
  (``refuse_unsafe_unpickling``), so a pickle that is more than tensors fails instead of running;
- ``sympy.sympify`` replaced, for torch's deserializer, by the bounded parser of
  ``symbolic_expressions`` (``parse_expressions_safely``);
- after loading, before any code is generated from the program: every state name a dotted Python
  identifier (``check_state_names``) and every call a PyTorch operator (``check_graph_targets``).

The third line is the sandbox the whole run of an untrusted archive happens in (``sandbox.py``).
"""

from __future__ import annotations

import io
import operator
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .pt2_archive import DOTTED_NAME, UnsafeArchiveMember

__all__ = [
    "UnsafeArchiveMember", "load_untrusted_archive", "check_state_names", "check_graph_targets",
    "refuse_unsafe_unpickling", "parse_expressions_safely",
]

_TRUST_HINT = (
    "Export the model again with torch.export.save from a module whose weights, buffers and example "
    "inputs are plain tensors; if you trust the file's author, pass --trust-pickle."
)

def load_untrusted_archive(path: Path) -> Any:
    """The ExportedProgram in ``path``, read through the allow-list reader and the guards above."""
    import torch

    from .pt2_archive import DISABLE_CHECKS_ENV, read_checked_archive

    if os.environ.get(DISABLE_CHECKS_ENV) == "1":  # test hook: the sandbox alone (tests/test_sandbox.py)
        return torch.export.load(io.BytesIO(path.read_bytes()))
    data = read_checked_archive(path).canonical_bytes()
    with refuse_unsafe_unpickling(), parse_expressions_safely():
        ep = torch.export.load(io.BytesIO(data))
    check_state_names(path, ep)
    check_graph_targets(path, ep.graph_module)
    return ep


def check_state_names(path: Path, ep: Any) -> None:
    """torch.fx writes parameter, buffer and constant names into generated source unescaped
    (``getattr(self, "<name>")``): allow only dotted Python identifiers."""
    names = [*ep.state_dict, *ep.constants]
    for spec in ep.graph_signature.input_specs:
        names.append(spec.target or "")
    for node in ep.graph.nodes:
        if node.op in ("get_attr", "call_module"):
            names.append(str(node.target))
    for name in names:
        if name and not DOTTED_NAME.fullmatch(name):
            from ..output.text_safety import for_terminal

            raise UnsafeArchiveMember(
                f"{path} is an ExportedProgram archive with a parameter, buffer or constant named "
                f"{for_terminal(name[:80])!r}, which is not a dotted Python identifier; torch would write "
                "it into generated code, so it is refused by default.",
                _TRUST_HINT,
            )


class _RefusedPickle(Exception):
    pass


class _RefusingPickleModule:
    """Stands in for the ``pickle`` module inside torch's archive reader while it loads."""

    def loads(self, *args: Any, **kwargs: Any) -> Any:
        raise _RefusedPickle("pickle.loads of an archive member was refused")

    def __getattr__(self, name: str) -> Any:
        import pickle

        return getattr(pickle, name)


_GUARD_LOCK = threading.RLock()  # the guards nest


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


class _SafeSympy:
    """Stands in for the ``sympy`` module inside torch's deserializer: ``sympify`` parses with the
    bounded grammar of symbolic_expressions and builds the expression without evaluating text."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def sympify(self, value: Any, locals: dict | None = None, **_: Any) -> Any:  # noqa: A002 - sympy's name
        from .symbolic_expressions import ExpressionError, build_sympy, parse_expression

        if isinstance(value, self._real.Basic):
            return value
        try:
            node = parse_expression(value)
        except ExpressionError as exc:
            raise _RefusedPickle(f"a symbolic expression outside the allowed grammar was refused ({exc})") from None
        return build_sympy(node, locals)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextmanager
def parse_expressions_safely() -> Iterator[None]:
    """While torch deserializes a program in this process, its ``sympy.sympify`` is the bounded parser."""
    from torch._export.serde import serialize

    with _GUARD_LOCK:
        real = serialize.sympy
        serialize.sympy = _SafeSympy(real)
        try:
            yield
        finally:
            serialize.sympy = real


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
            if isinstance(target, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
                _check_operator(path, node, target)
                continue
            if isinstance(target, torch._ops.HigherOrderOperator):
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


def _check_operator(path: Path, node: Any, target: Any) -> None:
    """A PyTorch operator may still reach outside the model (``aten.from_file`` reads any file into
    a tensor): only those operator_policy allows."""
    from .operator_policy import operator_refusal, schema_refusal

    schema = getattr(target, "_schema", None)
    name = getattr(schema, "name", None) or str(getattr(target, "_qualified_op_name", target))
    reason = operator_refusal(name)
    if reason is None and schema is not None:
        reason = schema_refusal(schema)
    if reason:
        raise UnsafeArchiveMember(
            f"{path} is an ExportedProgram archive whose graph calls {name} (node {node.name}), which is not "
            f"allowed on an untrusted model: {reason}.",
            _TRUST_HINT,
        )
