"""Where a flatbuffer tensor or a graph node came from in the user's PyTorch model.

One reading of the two records the toolchain leaves, used by quantization (which module stayed
float), the Edge TPU report (which module an unmapped op belongs to), per-layer parity (which
module's output a tensor holds) and error diagnosis (which module a failing node ran in):

- **litert-torch tensor names.** The converter names each tensor after the ``nn_module_stack`` of
  the FX node(s) that made it: ``<root class>/<class>_<attribute>/...`` with qualified class names,
  several locations of a fused op joined by ``;;`` and a trailing ``;N`` (or ``;``) that makes
  names unique. The signature's own tensors are plain (``serving_default_args_0``), constants the
  converter made are ``arith.constant<N>``, and nodes torch.export added outside the user's module
  sit under ``torch.export._trace...<locals>.Wrapper``: none of these names a module.
- **FX node metadata.** ``node.meta["nn_module_stack"]`` maps keys to ``(path, type)``, with paths
  spelled ``L['self'].layer1[0].conv`` or ``layer1.0.conv``; ``node.meta["stack_trace"]`` holds the
  Python frames that created the node.

Two questions every target asks of a flatbuffer are answered here once: which module an operator
is (``flatbuffer_operator_module``: its output's name, else its weights', else its inputs') and
which line of the user's code defines that module (``module_user_source``).

``tests/test_provenance.py`` pins every function here to a table of names taken from real
conversions (fp32, int8 through both backends, channels-last I/O, nested ModuleLists, attention).
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..flatbuffer import FlatbufferModel, OperatorInfo

__all__ = [
    "ModuleRef",
    "clean_module_path",
    "describe_location",
    "flatbuffer_operator_module",
    "module_label",
    "module_user_source",
    "node_module",
    "node_user_source",
    "operator_module",
    "scope_levels",
    "tensor_module",
    "tensor_scopes",
]

# The channels-last I/O wrapper edge-export puts around the user's module holds it as ``wrapped``:
# paths below it are the user's own.
_WRAPPER_ROOTS = {"ChannelLastIOWrapper": "wrapped"}
_COUNTER = re.compile(r"^\d*$")  # the empty separators of ";;" and the uniqueness counter
_CLASS_ATTR = re.compile(r"^(_*[^_]+)_(.+)$")  # "Conv2d_conv", "_Private_attr": class, attribute


@dataclass(frozen=True)
class ModuleRef:
    """A module of the user's model: its dotted path ("" for the root's own forward()) and the
    short name of its class (None when unknown)."""

    path: str
    type_name: str | None


def _short(qualified: str) -> str:
    return qualified.rsplit(".", 1)[-1]


def _names_a_module(first_component: str) -> bool:
    if "." not in first_component:  # serving_default_output_0_output
        return False
    if first_component.startswith("arith.constant"):  # a constant the converter made
        return False
    return "<locals>" not in first_component  # torch.export's own wrapper around the module


def tensor_scopes(name: str) -> tuple[tuple[str, ...], ...]:
    """Every module location in a litert-torch tensor name, as raw components, in order and once.

    ``"m.A/m.B_x;;m.A/m.C_y;2"`` -> ``(("m.A", "m.B_x"), ("m.A", "m.C_y"))``; names that name no
    module give ``()``. The first location is the op's own (outermost) result.
    """
    scopes: list[tuple[str, ...]] = []
    for part in name.split(";"):
        if _COUNTER.match(part):
            continue
        comps = tuple(part.split("/"))
        if not _names_a_module(comps[0]):
            continue
        if comps not in scopes:
            scopes.append(comps)
    return tuple(scopes)


def scope_levels(scope: tuple[str, ...]) -> tuple[tuple[str, str], ...] | None:
    """``(class short name, attribute)`` for each level below the root of one scope, with
    edge-export's channels-last wrapper removed; None when a component is not ``Class_attr``."""
    levels: list[tuple[str, str]] = []
    for comp in scope[1:]:
        match = _CLASS_ATTR.match(_short(comp))
        if not match:
            return None
        levels.append((match.group(1), match.group(2)))
    wrapped = _WRAPPER_ROOTS.get(_short(scope[0]))
    if wrapped is not None and levels and levels[0][1] == wrapped:
        levels = levels[1:]
    return tuple(levels)


def _root_type(scope: tuple[str, ...]) -> str:
    root = _short(scope[0])
    if root in _WRAPPER_ROOTS and len(scope) > 1:
        match = _CLASS_ATTR.match(_short(scope[1]))
        if match:
            return match.group(1)
    return root


def tensor_module(name: str) -> ModuleRef | None:
    """The module a tensor's op ran in (its first location), or None when the name names none."""
    for scope in tensor_scopes(name)[:1]:
        levels = scope_levels(scope)
        if levels is None:
            return None
        type_name = levels[-1][0] if levels else _root_type(scope)
        return ModuleRef(".".join(attr for _, attr in levels), type_name)
    return None


# The module classes an operator computes for: a fused CONV_2D is named after its conv and its ReLU,
# and the conv is the layer (its weights) a user would change.
_OPCODE_MODULES = {
    "CONV_2D": ("Conv",), "DEPTHWISE_CONV_2D": ("Conv",), "TRANSPOSE_CONV": ("Conv",),
    "FULLY_CONNECTED": ("Linear",), "BATCH_MATMUL": ("Linear", "Attention"),
}


def operator_module(name: str, opcode: str | None = None) -> ModuleRef | None:
    """The module a tensor name names for the operator ``opcode`` that computes or reads it: among
    the locations of a fused op's name (the block whose forward() applied the ReLU first, the conv
    after it), the one whose class computes ``opcode`` (a Conv for CONV_2D), else the first (``tensor_module``)."""
    candidates = [levels for levels in (scope_levels(scope) for scope in tensor_scopes(name)) if levels]
    if not candidates:
        return tensor_module(name)
    families = _OPCODE_MODULES.get(opcode or "", ())
    matching = [levels for levels in candidates if any(f in levels[-1][0] for f in families)]
    if not matching:  # no location's class computes the opcode: the first, as tensor_module says
        return tensor_module(name)
    best = max(matching, key=len)
    return ModuleRef(".".join(attr for _, attr in best), best[-1][0])


def flatbuffer_operator_module(model: FlatbufferModel, op: OperatorInfo) -> ModuleRef | None:
    """The module an operator of ``model`` computes for (``operator_module`` of its tensors' names).

    Searched in this order: the output (the op's own result; for a fused op, the module that computes
    the opcode); then the constant inputs (weights and bias belong to the layer, and keep its name
    where the output is a graph output such as ``serving_default_output_0_output``, as the last
    FULLY_CONNECTED of a classifier is); then the activation inputs (the producer's module, the best
    guess left). None when no name names a module."""
    tensors = [model.tensors[i] for i in op.inputs if i >= 0]
    constants = [t.name for t in tensors if t.is_constant]
    activations = [t.name for t in tensors if not t.is_constant]
    outputs = [model.tensors[i].name for i in op.outputs if i >= 0]
    for name in (*outputs, *constants, *activations):
        found = operator_module(name, op.opcode)
        if found is not None:
            return found
    return None


def module_label(ref: ModuleRef | None) -> str | None:
    """A module as one short text: its path, or its class for the root module ("" path)."""
    return None if ref is None else (ref.path or ref.type_name)


def clean_module_path(path: str) -> str:
    """An ``nn_module_stack`` path as a dotted module path: ``L['self'].layer1[0].conv`` and
    ``layer1.0.conv`` both give ``layer1.0.conv``; the root gives ""."""
    path = re.sub(r"^L\['self'\]\.?", "", str(path))
    path = re.sub(r"\[(\d+)\]", r".\1", path)
    return path.strip(".")


def node_module(node: Any) -> ModuleRef | None:
    """The innermost module an FX node ran in, from its ``nn_module_stack``; None without one."""
    stack = getattr(node, "meta", {}).get("nn_module_stack") or {}
    if not stack:
        return None
    path, mtype = list(stack.values())[-1]
    if not isinstance(mtype, str):
        mtype = getattr(mtype, "__name__", str(mtype))
    return ModuleRef(clean_module_path(path), _short(mtype))


_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def node_user_source(node: Any) -> str | None:
    """``file:line`` of the innermost frame in the user's code that created an FX node (frames in
    torch and site-packages are skipped), or None when the node has no such frame."""
    frames = _FRAME.findall(getattr(node, "meta", {}).get("stack_trace") or "")
    user = [(f, n) for f, n in frames if "site-packages" not in f and "/torch/" not in f]
    return f"{user[-1][0]}:{user[-1][1]}" if user else None


def _graph_user_source(graph_module: Any, module_path: str) -> str | None:
    """The user's source line of the first graph node that ran inside ``module_path`` (an exported
    graph keeps each node's nn_module_stack and stack trace)."""
    for node in graph_module.graph.nodes:
        found = node_module(node)
        if found is None or found.path != module_path:
            continue
        source = node_user_source(node)
        if source:
            return source
    return None


def module_user_source(source_module: Any, module_path: str | None) -> str | None:
    """``file:line`` in the user's code for the module at ``module_path`` of ``source_module``: the
    exported graph's stack trace when it is a GraphModule, else where the module's class is defined.
    None without a module or a path, or when the class is a library's (nn.Conv2d says nothing about
    the user's code)."""
    if source_module is None or module_path is None:
        return None
    import torch

    if isinstance(source_module, torch.fx.GraphModule):
        found = _graph_user_source(source_module, module_path)
        if found:
            return found
    try:
        sub = source_module.get_submodule(module_path) if module_path else source_module
        cls = type(sub)
        file = inspect.getsourcefile(cls)
        line = inspect.getsourcelines(cls)[1]
    except (AttributeError, OSError, TypeError):
        return None
    if not file or "site-packages" in file or "/torch/" in file:
        return None
    return f"{file}:{line}"


def describe_location(module_path: str | None, module_type: str | None, source: str | None) -> str:
    """`` in module 'path' (Type), at file.py:LINE``: where an operator came from, for the messages
    of every target's first unsupported operator ("" when the name named no module)."""
    if module_path is None:
        return ""
    where = f" in module '{module_path or '<root>'}'"
    if module_type:
        where += f" ({module_type})"
    if source:
        where += f", at {source}"
    return where
