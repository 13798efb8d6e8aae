"""Turn a torch.export or litert-torch failure into one paragraph: which operator or Python construct
failed, where (nn.Module path and source line), PyTorch's reason in one line, and what to try.

torch.export and the MLIR lowering both put the failing node and the user's source line into their
messages ("While executing %node ... target=aten.X", "Original traceback: File ..., line N" or "The
following call raised this error: File ..."). The exported graph's node metadata maps a source line
to the nn.Module path, so when a graph is available we look the node up there. LiteRT's converter
passes report "<file>.py:<line>:<col>: error: <reason>" (MLIR's location of the operation): that
line is the source, and what follows "error:" the reason.
"""

from __future__ import annotations

import re
import sysconfig
import traceback
from dataclasses import dataclass
from typing import Any

from ..graph.provenance import node_module

__all__ = ["CONVERTER_PASS_REASON", "FailureLocation", "locate_failure", "is_trace_failure", "reason_line"]

CONVERTER_PASS_REASON = "LiteRT's converter: "  # a reason's start when a converter pass refused the lowered graph

_WHILE_EXECUTING = re.compile(r"While executing %(?P<node>[\w.]+)\s*:.*?target=(?P<target>[\w.:]+)")
_FILE_LINE = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>\w+))?\n\s*(?P<code>[^\n]*)')
_ATEN = re.compile(r"\b(aten[.:]{1,2}\w+(?:\.\w+)?)")
_MLIR_ERROR = re.compile(r"(?P<file>[^\s:'\"]+\.py):(?P<line>\d+):\d+: error: (?P<reason>[^\n]+)")


@dataclass(frozen=True)
class FailureLocation:
    operator: str | None = None
    node: str | None = None
    module_path: str | None = None
    module_type: str | None = None
    source: str | None = None  # "file.py:12"
    code: str | None = None
    reason: str = ""

    def describe(self) -> str:
        parts = []
        if self.operator:
            parts.append(f"at operator {self.operator}")
        if self.module_path is not None:
            where = self.module_path or "<root module>"
            if self.module_type:
                where += f" ({self.module_type})"
            parts.append(f"in module {where}")
        if self.source:
            src = f"at {self.source}"
            if self.code:
                src += f": `{self.code.strip()}`"
            parts.append(src)
        return ", ".join(parts)


def reason_line(exc: BaseException) -> str:
    """The first informative line of an exception's message."""
    text = str(exc).strip()
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith(("For more information", "Traceback")):
            return line[:300]
    return type(exc).__name__


def is_trace_failure(exc: BaseException) -> bool:
    """True when the exception was raised inside torch.export (not the MLIR lowering)."""
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.name == "export_torch_signature":
            return True
    text = str(exc)
    return "torch.export.export" in text or "data-dependent" in text


def _user_frame(text: str) -> tuple[str | None, str | None]:
    """The last File/line pair in the message that is not inside torch or litert_torch."""
    found = None
    for m in _FILE_LINE.finditer(text):
        f = m.group("file")
        if "/torch/" in f or "/litert_torch/" in f or "/site-packages/" in f:
            continue
        found = m
    if found is None:
        return None, None
    short = found.group("file").rsplit("/", 1)[-1]
    return f"{short}:{found.group('line')}", found.group("code")


def _module_from_graph(graph_module: Any, node_name: str | None, source: str | None) -> tuple[str | None, str | None, str | None]:
    """Find (operator, module path, module type) in an exported graph by node name or source line."""
    if graph_module is None:
        return None, None, None
    candidates = []
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        if node_name and node.name == node_name:
            candidates.insert(0, node)
        elif source:
            trace = node.meta.get("stack_trace") or ""
            file, _, line = source.rpartition(":")
            if f"{file}\", line {line}" in trace:
                candidates.append(node)
    for node in candidates:
        found = node_module(node)
        path, mtype = (found.path, found.type_name) if found else ("", None)
        return _op_name(node.target), path, mtype
    return None, None, None


def _op_name(target: Any) -> str:
    name = str(target)
    name = name.replace("torch.ops.", "")
    return name


def locate_failure(exc: BaseException, graph_module: Any = None) -> FailureLocation:
    text = str(exc)
    node_name = operator = None
    m = _WHILE_EXECUTING.search(text)
    if m:
        node_name = m.group("node")
        operator = _op_name(m.group("target"))
    elif (a := _ATEN.search(text)) is not None:
        operator = a.group(1).replace("::", ".")
    source, code = _user_frame(text)
    mlir = _MLIR_ERROR.search(text)
    if source is None and mlir is not None:
        source, code = _mlir_source(mlir, graph_module)
    if source is None:
        source, code = _traceback_frame(exc)
    g_op, module_path, module_type = _module_from_graph(graph_module, node_name, source)
    return FailureLocation(
        operator=operator or g_op,
        node=node_name,
        module_path=module_path,
        module_type=module_type,
        source=source,
        code=code,
        reason=f"{CONVERTER_PASS_REASON}{mlir.group('reason').strip()[:300]}" if mlir else reason_line(exc),
    )


def _mlir_source(found: re.Match, graph_module: Any) -> tuple[str, str | None]:
    """An MLIR diagnostic's location as ("file.py:12", that line's code). The code comes from the
    traced graph's recorded stack traces, never from reading the file the message names: a model's
    metadata can name any path."""
    path, line = found.group("file"), found.group("line")
    code = None
    for node in getattr(getattr(graph_module, "graph", None), "nodes", ()):
        for frame in _FILE_LINE.finditer(node.meta.get("stack_trace") or ""):
            if frame.group("file") == path and frame.group("line") == line:
                code = frame.group("code").strip() or None
                break
        if code is not None:
            break
    return f"{path.rsplit('/', 1)[-1]}:{line}", code


def _traceback_frame(exc: BaseException) -> tuple[str | None, str | None]:
    """The innermost traceback frame outside torch, the installed packages, the standard library and
    edge_export (a Python error raised inside forward())."""
    stdlib = sysconfig.get_paths()["stdlib"]
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename
        if "/torch/" in name or "/site-packages/" in name or "edge_export" in name or name.startswith(stdlib):
            continue
        return f"{name.rsplit('/', 1)[-1]}:{frame.lineno}", frame.line
    return None, None
