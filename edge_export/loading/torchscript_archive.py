"""An allow-list reader for untrusted TorchScript archives (torch.jit.save): TorchScript is code.

``torch.jit.load`` compiles and runs the archive's code: a ``__setstate__`` runs while loading, and
``forward`` when traced. That code can call any registered operator, and ``torch.from_file`` reads any
file the user can read into a tensor, which then becomes a weight of the exported ``.tflite``. So,
without ``--trust-pickle``, this reader decides what the archive may hold before torch sees a byte:

- the zip: one root folder, no duplicate names, declared sizes within limits (``pt2_archive``'s
  directory check), and only the members torch.jit.save writes: ``data.pkl``, ``constants.pkl``,
  ``data/<n>``, ``constants/<n>``, ``code/__torch__/…py`` (and their ``.debug_pkl``, which are not
  passed on), ``traced_inputs``, ``extra/<name>`` and the format files;
- the pickles: opcodes whose globals are tensors' rebuild functions, storages, TorchScript's own
  list builders and the archive's own classes (``__torch__.*``): no custom C++ class;
- the code: Python syntax of the form TorchScript writes, every operator it names (called or not)
  allowed by ``operator_policy`` (no ``from_file``, no ``save``, no ``aten``/``prim`` outsider);
- ``forward``'s parameters: tensors only, and no attribute it writes (a model that keeps state).

``CheckedTorchScript.canonical_bytes`` writes the checked members as a fresh zip, which is all torch
is given; ``loading`` loads it in a child whose reads are confined too (``sandbox.run_confined``
with ``reads``) and takes back an ExportedProgram, read through the ``.pt2`` allow-list reader.
"""

from __future__ import annotations

import ast
import pickletools
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputSpecError, ModelLoadError

__all__ = ["CheckedTorchScript", "UnsafeTorchScript", "read_checked_torchscript"]

_NAMES = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}(/[A-Za-z0-9_.][A-Za-z0-9_.-]{0,127}){1,24}")
_TAIL = re.compile(
    r"data\.pkl|constants\.pkl|version|byteorder|\.data/serialization_id|\.data/version|traced_inputs\.pkl"
    r"|(data|constants|traced_inputs)/[0-9]{1,9}|extra/[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}"
    r"|code/__torch__(/[A-Za-z_][A-Za-z0-9_]{0,127}){0,20}\.py(\.debug_pkl)?"
)
_PICKLES = ("data.pkl", "constants.pkl", "traced_inputs.pkl")
_FORMAT = {"version": re.compile(rb"[0-9]{1,4}\s*"), "byteorder": re.compile(rb"little|big"),
           ".data/serialization_id": re.compile(rb"[0-9]{1,64}"), ".data/version": re.compile(rb"[0-9]{1,4}\s*")}
_CODE_LIMIT = 64 << 20
_STORAGES = {f"{kind}Storage" for kind in (
    "Float", "Double", "Half", "BFloat16", "Long", "Int", "Short", "Char", "Byte", "Bool", "ComplexFloat", "ComplexDouble",
)}
_PICKLE_GLOBALS = {
    ("torch._utils", "_rebuild_tensor_v2"), ("collections", "OrderedDict"), ("torch.jit._pickle", "restore_type_tag"),
    *(("torch.jit._pickle", f"build_{kind}list") for kind in ("int", "tensor", "double", "bool")),
    *(("torch", storage) for storage in _STORAGES),
}
_HINT = (
    "A TorchScript archive is code that runs when it is loaded. Export the original nn.Module with "
    "torch.export.save and pass the .pt2 instead; if you trust the file's author, pass --trust-pickle."
)


class UnsafeTorchScript(ModelLoadError):
    """A TorchScript archive holding what the reader does not allow; refused without --trust-pickle (exit 2)."""


def _refuse(path: Path | str, member: str, what: str, *, size: bool = False) -> UnsafeTorchScript:
    return UnsafeTorchScript(f"{path} is a TorchScript archive whose member {member} {what}; it is refused by default.", _HINT)


@dataclass(frozen=True)
class CheckedTorchScript:
    root: str
    members: dict[str, bytes]  # tail -> checked bytes (no .debug_pkl)
    class_name: str  # the root module's TorchScript class, e.g. __torch__.Net
    parameters: tuple[str, ...] = ()  # forward()'s, after self, as written ("x: Tensor")

    def check_inputs(self, count: int) -> None:
        """--input-shape gave ``count`` tensors: as many as forward() takes (a default counts too:
        torch's converter passes every parameter)."""
        if self.parameters and count != len(self.parameters):
            raise InputSpecError(
                f"The TorchScript model's forward({', '.join(self.parameters)}) takes {len(self.parameters)} "
                f"input{'s' if len(self.parameters) != 1 else ''}; --input-shape gave {count}.",
                "Pass --input-shape once per parameter of forward(), in order (an Optional one too).",
            )

    def canonical_bytes(self) -> bytes:
        """The checked members as a fresh zip: all torch.jit.load is given."""
        from .pt2_archive import canonical_zip

        return canonical_zip(self.root, self.members)


def read_checked_torchscript(path: Path) -> CheckedTorchScript:
    """Read and check the archive at ``path`` once; a refusal is an UnsafeTorchScript naming the
    member and the rule, a forward() that cannot be traced from tensors an InputSpecError."""
    members, root = _checked_members(path)
    for tail, pattern in _FORMAT.items():
        if tail in members and not pattern.fullmatch(members[tail]):
            raise _refuse(path, f"{root}/{tail}", "does not hold the value the format defines")
    if "data.pkl" not in members:
        raise _refuse(path, f"{root}/data.pkl", "is missing")
    for tail in [*_PICKLES, *(t for t in members if t.endswith(".debug_pkl"))]:
        if tail in members:
            _check_pickle(path, f"{root}/{tail}", members[tail])
    code = {tail: _parsed(path, f"{root}/{tail}", data) for tail, data in members.items() if tail.endswith(".py")}
    for tail, tree in code.items():
        _check_code(path, f"{root}/{tail}", tree)
    class_name = _root_class(path, root, members["data.pkl"])
    parameters = check_forward(path, class_name, code)
    return CheckedTorchScript(root, {t: d for t, d in members.items() if not t.endswith(".debug_pkl")}, class_name, parameters)


def _checked_members(path: Path) -> tuple[dict[str, bytes], str]:
    from .pt2_archive import ArchiveLimits, checked_directory, read_member

    limits = ArchiveLimits.from_environment()
    try:
        with path.open("rb") as fh, zipfile.ZipFile(fh) as zf:
            infos = checked_directory(path, zf, path.stat().st_size, limits, refuse=_refuse, names=_NAMES)
            root = infos[0].filename.split("/", 1)[0]
            members = {}
            for info in infos:
                tail = info.filename.split("/", 1)[1] if "/" in info.filename else ""
                if info.is_dir():
                    continue
                if not _TAIL.fullmatch(tail):
                    raise _refuse(path, _shown(info.filename), "is not one torch.jit.save writes")
                limit = info.file_size if tail.startswith(("data/", "constants/", "traced_inputs/", "extra/")) else _CODE_LIMIT
                members[tail] = read_member(path, zf, info, limit, refuse=_refuse)
    except (zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ModelLoadError(f"{path} is a damaged TorchScript archive ({exc}).", "Save the model again with torch.jit.save.") from exc
    return members, root


def _shown(name: str) -> str:
    from ..output.text_safety import for_terminal

    return for_terminal(name[:120])


def _check_pickle(path: Path, member: str, data: bytes) -> None:
    """Every global the pickle names is on the list; the opcodes are read, never executed."""
    try:
        for opcode, arg, _ in pickletools.genops(data):
            if opcode.name in ("STACK_GLOBAL", "INST", "OBJ", "EXT1", "EXT2", "EXT4"):
                # torch.jit.save names classes with GLOBAL only; these take their names from the stack
                raise _refuse(path, member, f"is a pickle using the {opcode.name} opcode, which torch.jit.save never writes")
            if opcode.name != "GLOBAL":
                continue
            module, _, name = str(arg).partition(" ")
            if not _allowed_global(module, name):
                raise _refuse(path, member, f"is a pickle that names {_shown(module)}.{_shown(name)}, which a TorchScript model's data never holds")
    except (ValueError, EOFError, UnicodeDecodeError, IndexError) as exc:
        raise _refuse(path, member, f"is not a well-formed pickle ({exc})") from None


def _allowed_global(module: str, name: str) -> bool:
    if (module, name) in _PICKLE_GLOBALS:
        return True
    own = module == "__torch__" or module.startswith("__torch__.")
    return own and not module.startswith("__torch__.torch.classes") and name.isidentifier()


def _parsed(path: Path, member: str, data: bytes) -> ast.Module:
    try:
        return ast.parse(data.decode("utf-8"), filename=member)
    except (SyntaxError, ValueError, UnicodeDecodeError, RecursionError, MemoryError) as exc:
        raise _refuse(path, member, f"is not TorchScript code ({type(exc).__name__})") from None


def _check_code(path: Path, member: str, tree: ast.Module) -> None:
    for statement in tree.body:
        if isinstance(statement, ast.Import) and all(a.name.startswith("__torch__") for a in statement.names):
            continue
        if not isinstance(statement, (ast.ClassDef, ast.FunctionDef)):
            raise _refuse(path, member, f"holds a top-level {type(statement).__name__} statement at line {statement.lineno}, which TorchScript's code never has")
    try:
        _References(path, member).visit(tree)
    except RecursionError:
        raise _refuse(path, member, "nests its code deeper than TorchScript writes") from None


class _References(ast.NodeVisitor):
    """Every dotted name in the code: an operator (``torch.X``, ``ops.NS.X``) must be allowed by
    operator_policy; ``__torch__.*`` is the archive's own code (its C++ classes excepted)."""

    def __init__(self, path: Path, member: str) -> None:
        self.path, self.member = path, member

    def visit_Attribute(self, node: ast.Attribute) -> None:
        parts: list[str] = []
        base: ast.AST = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if isinstance(base, ast.Name):
            self._check([base.id, *reversed(parts)], node.lineno)
        else:
            self.visit(base)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ("torch", "ops"):
            self._refused(f"torch's module object {node.id}", "is not an operator", node.lineno)

    def _check(self, parts: list[str], line: int) -> None:
        from .operator_policy import operator_refusal

        dotted = ".".join(parts)
        if parts[0] == "__torch__" and dotted.startswith("__torch__.torch.classes"):
            self._refused(dotted, "is a custom C++ class, whose code is not in the archive", line)
        if parts[0] not in ("torch", "ops"):
            # a method of a value (``w.set_(storage)``) resolves to the aten operator of its name
            if len(parts) > 1 and parts[0] != "__torch__" and f"aten::{parts[-1]}" in _aten_names():
                reason = operator_refusal(f"aten::{parts[-1]}")
                if reason:
                    self._refused(dotted, reason, line)
            return
        qualified = _operator_name(parts)
        reason = operator_refusal(qualified) if qualified else "it is not an operator"
        if reason:
            self._refused(dotted, reason, line)

    def _refused(self, name: str, reason: str, line: int) -> None:
        raise _refuse(self.path, self.member, f"calls {_shown(name)} (line {line}), which is not allowed: {reason}")


def _aten_names() -> frozenset[str]:
    from .operator_policy import operator_names

    return operator_names()


def _operator_name(parts: list[str]) -> str | None:
    """``torch.add`` -> aten::add, ``ops.prim.min`` / ``torch.ops.aten.x`` -> prim::min / aten::x."""
    if parts[0] == "torch" and len(parts) == 2:
        return f"aten::{parts[1]}"
    tail = parts[1:] if parts[0] == "ops" else parts[2:] if parts[:2] == ["torch", "ops"] else None
    return f"{tail[0]}::{tail[1]}" if tail is not None and len(tail) == 2 else None


def _root_class(path: Path, root: str, data_pkl: bytes) -> str:
    """The first class data.pkl builds: the archive's root module."""
    for opcode, arg, _ in pickletools.genops(data_pkl):
        if opcode.name == "GLOBAL" and str(arg).startswith("__torch__"):
            return ".".join(str(arg).split(" "))
    raise _refuse(path, f"{root}/data.pkl", "builds no TorchScript module")


_TENSOR_ANNOTATION = re.compile(r"(Optional\[)?Tensor\]?|List\[Tensor\]|Tuple\[Tensor(, Tensor)*\]")


def check_forward(path: Path, class_name: str, code: dict[str, ast.Module]) -> tuple[str, ...]:
    """forward()'s parameters, as written. forward() is traced from tensors made from --input-shape:
    a non-tensor parameter (``sr: int``) or an attribute it writes (a streaming model's state)
    cannot be, so say which and what to do."""
    module, _, name = class_name.rpartition(".")
    tree = code.get("code/" + module.replace(".", "/") + ".py")
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None) if tree else None
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)} if cls else {}
    forward = methods.get("forward")
    if forward is None:
        return ()  # torch.jit.load reports a module without forward itself
    parameters = tuple(f"{a.arg}: {ast.unparse(a.annotation)}" if a.annotation else a.arg for a in forward.args.args[1:])
    others = [f"{a.arg}: {ast.unparse(a.annotation) if a.annotation else '?'}" for a in forward.args.args[1:]
              if a.annotation is None or not _TENSOR_ANNOTATION.fullmatch(ast.unparse(a.annotation))]
    state = sorted(_state_written(forward, methods))
    if not others and not state:
        return parameters
    what = []
    if others:
        what.append(f"its forward() takes {', '.join(others)}, which {'is not a tensor' if len(others) == 1 else 'are not tensors'}")
    if state:
        what.append(f"forward() writes the attribute{'s' if len(state) > 1 else ''} {', '.join('self.' + s for s in state)} (the model keeps state between calls)")
    raise InputSpecError(
        f"{path} is a TorchScript model that edge-export cannot trace from tensors alone: {'; '.join(what)}.",
        "Export the nn.Module itself with torch.export: wrap it in a module whose forward takes only tensors "
        "(fix the other arguments, e.g. sr=16000, inside it) and passes any state in and out as tensors "
        "(an input and an output each), then torch.export.save it and pass the .pt2.",
    )


def _state_written(forward: ast.FunctionDef, methods: dict[str, ast.FunctionDef]) -> set[str]:
    """Attributes of self that forward, or a method of the same class it calls, assigns."""
    seen, todo, written = set(), [forward], set()
    while todo:
        function = todo.pop()
        if function.name in seen:
            continue
        seen.add(function.name)
        for node in ast.walk(function):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            written |= {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in methods:
                todo.append(methods[node.attr])
    return written
