"""Per-layer parity: compare every PyTorch module's output with the flatbuffer tensor it became.

How the two sides are matched
-----------------------------
litert-torch names each flatbuffer tensor after the ``nn_module_stack`` of the FX node(s) it came
from: one *scope* per module on the call stack, ``<class fullname>_<attribute name>`` joined with
``/`` (the root has no attribute name), the whole followed by ``;``. When the converter fuses ops
(conv + batch norm + ReLU, bias add + residual add) the scopes of all fused nodes are joined with
``;`` and a counter is appended to keep names unique, e.g.::

    __main__.Net/torch.nn.modules.container.Sequential_stem/torch.nn.modules.activation.ReLU_2;;
    __main__.Net/torch.nn.modules.container.Sequential_stem/torch.nn.modules.conv.Conv2d_0;2

On the PyTorch side, forward pre-hooks and hooks on every submodule record the same call stack, so
each module call gets the same scope key, plus its output and the moment it finished. A
``torch.export`` graph module (``ExportedProgram.module()``) has its modules inlined, so hooks see
nothing in it; there the nodes' own ``nn_module_stack`` gives the keys and the last node under a
module gives its output.

Each flatbuffer tensor is *owned* by the module, among those its name carries, that finished
last in PyTorch: a CONV_2D named after a conv, its BN and its ReLU holds the ReLU's output; an ADD
named after a Linear and the parent whose residual add absorbed the Linear's reshape holds the
parent's value. Names of earlier modules also ride along on constants the converter deduplicates
(BN epsilons, ReLU6 bounds), and never make those modules owners. A module M's output is the *last*
tensor (in flatbuffer order) owned by M or one of its descendants, leaving out layout ops that
merely feed M (the TRANSPOSE the converter puts before a conv carries the conv's name but holds
its input) unless M has nothing else (a Flatten is only its RESHAPE). A module that owns no tensor
(a conv fused into its ReLU, a batch norm folded into its conv) is reported as *fused*, not
compared, and listed on the row of the op it was fused into. A module that returns the very
tensor a matched module returned (a Sequential and its last child) shares that row. A module no
tensor names at all but whose input was a matched module's output was folded into that module
before conversion (PT2E folds BatchNorm into the conv's weights and drops the BN node): the tensor
is compared with the folded module's output instead (also when it ends a Sequential, whose output
it then shares). Modules whose output is one of the model's
outputs are matched to the flatbuffer's output tensors, whose names the converter replaces with
``serving_default_output_N``. Modules that return their input unchanged (Dropout in eval) are
reported as *identity* and left out of the match fraction. A module whose tensor cannot be brought
to the PyTorch shape by a transpose (its final reshape was fused away) is a *shape mismatch*. A
module called several times (torchvision's shared ReLU) has one name for all calls: its last call
is compared only when every call left tensors of its own, otherwise it is reported as *repeated
calls* (and still shares a row when its last output is another module's output). Outputs are
copied when captured, so in-place ops (``out += identity``, ``ReLU(inplace=True)``) later in the
forward do not change them; identity of outputs is judged by storage and in-place version.

Each compared tensor gets one row, owned by the innermost module; enclosing modules whose output
is the same tensor (a Sequential and its last child) are listed on it as ``also_outputs_of``.
Flatbuffer tensors that carry a module's name but are not its output (LayerNorm's inner ops) are
*internal*; tensors whose names match no module of the given PyTorch model are *unmatched*.

Layout: the flatbuffer may hold NHWC where PyTorch holds NCHW, and may drop or add size-1 axes.
Every axis permutation of the flatbuffer tensor that gives the PyTorch shape is a candidate
(identity first, then channels-last to channels-first). When several fit (C == H, or H == W in a
square image) the permutation that the model's unambiguous tensors of the same rank needed wins;
failing that, the cosine on the first sample decides, with the more likely candidate kept unless
another is better by more than 0.05 (a damaged layer must not be "explained" by a transpose the
converter never makes). int8/uint8/int16 tensors are dequantized with their own scale and zero
point; metrics are the mean over the samples of each sample's SQNR (dB) and cosine.

The jump (the likely culprit)
-----------------------------
Layers are walked in flatbuffer execution order. A layer is the *first jump* when its SQNR is below
``jump_floor_db`` (default 30 dB, the level PyTorch's own int8 tests ask for) **and** it is either
the first compared layer or its SQNR is more than ``jump_drop_db`` (default 10 dB, i.e. 10x the
noise power) below the previous compared layer's. Both conditions are needed: a float model's
layers sit at 100+ dB and may drop by tens of dB between layers without meaning anything, and an
int8 model's SQNR declines slowly through the network without any one layer being at fault.
"""

from __future__ import annotations

import enum
import itertools
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import InputSpecError, RuntimeRunError, UsageError, map_exceptions
from ..flatbuffer import FlatbufferModel, TensorInfo, read_flatbuffer
from ..provenance import clean_module_path, tensor_scopes
from .metrics import cosine_similarity, sqnr_db

__all__ = [
    "LayerParity",
    "UnmatchedModule",
    "UnmatchedReason",
    "LayerParityReport",
    "per_layer_parity",
    "first_jump_index",
    "JUMP_DROP_DB",
    "JUMP_FLOOR_DB",
]

JUMP_DROP_DB = 10.0
JUMP_FLOOR_DB = 30.0

_DEQUANTIZABLE = frozenset({"int8", "uint8", "int16"})
_COMPARABLE = frozenset({"float32", "float16"}) | _DEQUANTIZABLE
_DATA_MOVEMENT_OPS = frozenset(
    {"TRANSPOSE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "QUANTIZE", "DEQUANTIZE", "CAST", "SLICE",
     "STRIDED_SLICE", "GATHER", "PAD", "PADV2", "CONCATENATION", "SPLIT", "PACK", "UNPACK"}
)
# A less likely layout wins only when its cosine is better by more than this.
_LAYOUT_TIE_COSINE = 0.05
# Unmatched tensor names listed in the report, beyond which only the count is given.
_MAX_LISTED = 50


# ---- result objects ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LayerParity:
    """One compared layer: a PyTorch module's output against one flatbuffer tensor."""

    position: int  # index among the compared layers, in graph order
    module_path: str  # dotted path inside the model ("" is the model itself)
    module_type: str  # class name, e.g. Conv2d
    tflite_tensor: str
    tflite_index: int
    opcode: str  # operator producing the tensor
    shape: tuple[int, ...]  # flatbuffer shape
    dtype: str  # flatbuffer dtype (int8 tensors are dequantized before comparing)
    torch_shape: tuple[int, ...]
    layout: str  # how the flatbuffer tensor was brought to the PyTorch layout
    sqnr_db: float  # mean over samples
    cosine: float  # mean over samples
    also_outputs_of: tuple[str, ...] = ()  # modules whose output is the same tensor (parents)
    fused_modules: tuple[str, ...] = ()  # modules fused into this op (a conv into its ReLU)
    passed: bool | None = None  # sqnr_db >= min_sqnr_db when a per-layer gate was given

    @property
    def label(self) -> str:
        return self.module_path or "<model>"


class UnmatchedReason(str, enum.Enum):
    FUSED = "fused"  # its value only exists inside a later op (a conv fused into its ReLU)
    IDENTITY = "identity"  # returns its input unchanged (Dropout in eval)
    NO_TENSOR = "no tensor"  # no tensor carries its name (folded away, or dead code)
    SHAPE_MISMATCH = "shape mismatch"  # its tensor cannot be transposed to the PyTorch shape
    AMBIGUOUS_NAME = "ambiguous name"  # two modules give the same scope name
    REPEATED_CALLS = "repeated calls"  # used several times; the calls cannot be told apart


@dataclass(frozen=True)
class UnmatchedModule:
    module_path: str
    module_type: str
    reason: UnmatchedReason
    fused_into: str | None = None  # the flatbuffer tensor holding the op it was fused into


@dataclass(frozen=True)
class JumpRule:
    """When a layer counts as the first jump in error (see the module docstring)."""

    drop_db: float
    floor_db: float


@dataclass(frozen=True)
class LayerParityReport:
    layers: tuple[LayerParity, ...]
    first_jump: LayerParity | None
    worst: LayerParity | None
    unmatched_modules: tuple[UnmatchedModule, ...]
    modules_total: int  # modules that ran and returned a tensor
    tensors_total: int  # op outputs the flatbuffer computes (constants excluded)
    tensors_matched: int  # of those, compared with a module's output
    tensors_internal: int  # named after a module but not its output (e.g. LayerNorm's inner ops)
    unmatched_tensors: tuple[str, ...]  # names that carry no module of the model (first 50)
    tensors_unmatched: int
    samples: int
    jump_drop_db: float = JUMP_DROP_DB
    jump_floor_db: float = JUMP_FLOOR_DB
    min_sqnr_db: float | None = None  # the per-layer gate, if any
    notes: tuple[str, ...] = field(default=())

    JSON_KEYS = (
        "layers", "first_jump", "worst", "modules_total", "modules_matched", "modules_identity",
        "modules_fused", "match_fraction", "unmatched_modules", "tensors_total", "tensors_matched",
        "tensors_internal", "tensors_unmatched", "unmatched_tensors", "samples", "jump_rule",
        "min_sqnr_db", "passed", "notes",
    )

    @property
    def jump_rule(self) -> JumpRule:
        return JumpRule(self.jump_drop_db, self.jump_floor_db)

    @property
    def passed(self) -> bool | None:
        """None when no per-layer gate was given, else whether every compared layer met it."""
        if self.min_sqnr_db is None:
            return None
        return all(r.passed for r in self.layers)

    @property
    def modules_matched(self) -> int:
        return self.modules_total - len(self.unmatched_modules)

    @property
    def modules_fused(self) -> int:
        """Modules whose value only exists inside a later op: not compared, but not lost either."""
        return sum(1 for m in self.unmatched_modules if m.reason == UnmatchedReason.FUSED)

    @property
    def modules_identity(self) -> int:
        return sum(1 for m in self.unmatched_modules if m.reason == UnmatchedReason.IDENTITY)

    @property
    def match_fraction(self) -> float:
        """Matched modules over modules that compute something (identity modules left out)."""
        n = self.modules_total - self.modules_identity
        return self.modules_matched / n if n else 0.0

    def worst_layers(self, n: int = 5) -> tuple[LayerParity, ...]:
        return tuple(sorted(self.layers, key=lambda r: r.sqnr_db)[:n])


# ---- names ------------------------------------------------------------------------------------


def _class_fullname(cls: type) -> str:
    # Same spelling as litert_torch.backend.debuginfo._class_fullname.
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass
class _Call:
    key: tuple[str, ...]  # scope components below the root
    path: str
    module_type: str
    finished: int  # completion order of the module's last call
    output: Any  # a copy of the first tensor output of the last call (later in-place ops
    # such as ReLU(inplace=True) must not change what was captured)
    identity: bool = False  # returned one of its inputs unchanged (Dropout in eval, Identity)
    out_id: tuple | None = None  # _tensor_id of the output as returned
    in_id: tuple | None = None  # _tensor_id of the first tensor argument
    calls: int = 1
    keep: tuple = ()  # the original tensors, kept alive so that their storage is not reused


def _tensor_id(t: Any) -> tuple | None:
    """What makes two captured tensors the same value: storage, view, and in-place version."""
    import torch

    if not isinstance(t, torch.Tensor):
        return None
    try:
        return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), str(t.dtype), t._version)
    except RuntimeError:  # tensors without storage (e.g. sparse or meta)
        return None


def _first_tensor(out: Any):
    import torch

    if isinstance(out, torch.Tensor):
        return out
    items = out.values() if isinstance(out, Mapping) else out if isinstance(out, (tuple, list)) else ()
    for item in items:
        if isinstance(item, torch.Tensor):
            return item
    return None


def _capture_torch(module: Any, inputs: tuple) -> tuple[dict[tuple[str, ...], _Call], list, dict, set]:
    """Run the module once with hooks; return calls by scope key, outputs, names, ambiguous keys."""
    import torch

    names = {id(m): n for n, m in module.named_modules()}
    stack: list[str] = []
    calls: dict[tuple[str, ...], _Call] = {}
    owner: dict[tuple[str, ...], str] = {}  # key -> module path, to spot two modules with one key
    ambiguous: set[tuple[str, ...]] = set()
    counter = itertools.count()

    versions: list[int | None] = []

    def pre_hook(mod, args):
        name = names.get(id(mod), "")
        comp = _class_fullname(type(mod)) + (("_" + name.split(".")[-1]) if name else "")
        stack.append(comp)
        first = _first_tensor(tuple(args))
        versions.append(first._version if first is not None else None)

    def hook(mod, args, out):
        key = tuple(stack[1:])  # below the root, which may be renamed by wrappers
        stack.pop()
        version_before = versions.pop()
        path = names.get(id(mod), "")
        if owner.setdefault(key, path) != path:
            ambiguous.add(key)
        tensor = _first_tensor(out)
        first_in = _first_tensor(tuple(args))
        prev = calls.get(key)
        # Returning an argument is a no-op only if it was not modified in place (ReLU(inplace)).
        returned_input = tensor is not None and any(a is tensor for a in args)
        unchanged = first_in is not tensor or version_before == tensor._version
        calls[key] = _Call(
            key=key,
            path=path,
            module_type=type(mod).__name__,
            finished=next(counter),
            output=tensor.detach().clone() if tensor is not None else None,
            identity=returned_input and unchanged,
            out_id=_tensor_id(tensor),
            in_id=_tensor_id(first_in),
            calls=(prev.calls + 1) if prev else 1,
            keep=(tensor, first_in),
        )

    handles = []
    for _, sub in module.named_modules():
        handles.append(sub.register_forward_pre_hook(pre_hook))
        handles.append(sub.register_forward_hook(hook))
    try:
        with torch.no_grad():
            out = module(*inputs)
    finally:
        for h in handles:
            h.remove()
    if isinstance(out, torch.Tensor):
        outputs = [out]
    else:
        # litert-torch flattens tuple and dict results into the signature's outputs, in order.
        outputs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    return calls, outputs, names, ambiguous


def _graph_module_stack(module: Any) -> bool:
    import torch

    if not isinstance(module, torch.fx.GraphModule):
        return False
    return any(n.meta.get("nn_module_stack") for n in module.graph.nodes if n.op == "call_function")


def _stack_component(path: str, layer: Any) -> str:
    # Same spelling as litert_torch.backend.debuginfo._get_hierarchy.
    layer_str = layer if isinstance(layer, str) else _class_fullname(layer)
    return layer_str + (("_" + path.split(".")[-1]) if path else "")


def _capture_graph(gm: Any, inputs: tuple) -> tuple[dict[tuple[str, ...], _Call], list, str, set]:
    """Values of a torch.export graph (``ExportedProgram.module()``), grouped by nn_module_stack.

    Hooks see nothing inside such a graph (its modules are inlined), but every node records the
    module stack it came from, which is what litert-torch names tensors after. A module's output
    is the value of the last node under it; its input is the first argument of its first node.
    """
    import torch

    values: dict[Any, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n):
            result = super().run_node(n)
            values[n] = result
            return result

    with torch.no_grad():
        out = Recorder(gm).run(*inputs)
    first: dict[tuple[str, ...], Any] = {}
    last: dict[tuple[str, ...], tuple[int, Any]] = {}
    meta: dict[tuple[str, ...], tuple[str, str]] = {}
    ambiguous: set[tuple[str, ...]] = set()
    for idx, n in enumerate(gm.graph.nodes):
        stack = list((n.meta.get("nn_module_stack") or {}).values()) if n.op == "call_function" else []
        if not stack:
            continue
        comps = [_stack_component(path, layer) for path, layer in stack[1:]]
        for depth in range(len(comps) + 1):
            key = tuple(comps[:depth])
            path, layer = stack[depth]
            path = clean_module_path(path)
            type_name = (layer if isinstance(layer, str) else layer.__qualname__).rsplit(".", 1)[-1]
            if meta.setdefault(key, (path, type_name))[0] != path:
                ambiguous.add(key)
            first.setdefault(key, n)
            last[key] = (idx * 1000 + (999 - depth), n)  # a parent finishes after its last child

    calls: dict[tuple[str, ...], _Call] = {}
    for key, (finished, node) in last.items():
        tensor = _first_tensor(values.get(node))
        arg0 = first[key].args[0] if first[key].args else None
        first_in = _first_tensor(values.get(arg0)) if isinstance(arg0, torch.fx.Node) else None
        calls[key] = _Call(
            key=key,
            path=meta[key][0],
            module_type=meta[key][1],
            finished=finished,
            output=tensor.detach() if tensor is not None else None,  # a functional graph
            out_id=_tensor_id(tensor),
            in_id=_tensor_id(first_in),
            keep=(tensor, first_in),
        )
    if isinstance(out, torch.Tensor):
        outputs = [out]
    else:
        outputs = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
    if () in calls and outputs:
        # The model's result, even when its last node is not.
        calls[()].output, calls[()].out_id = outputs[0].detach(), _tensor_id(outputs[0])
    return calls, outputs, _capture_graph_root_name(gm), ambiguous


# ---- layout -----------------------------------------------------------------------------------


def _layout_candidates(tfl_shape: tuple[int, ...], torch_shape: tuple[int, ...]) -> list[tuple[str, Any]]:
    """Ways to turn a flatbuffer array into the PyTorch shape, most likely first."""
    if int(np.prod(tfl_shape, dtype=np.int64)) != int(np.prod(torch_shape, dtype=np.int64)):
        return []
    cands: list[tuple[str, Any]] = []

    def perms_for(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[int, ...]]:
        n = len(src)
        if n != len(dst) or n > 6:
            return []
        found = [p for p in itertools.permutations(range(n)) if tuple(src[i] for i in p) == dst]
        to_first = (0, n - 1, *range(1, n - 1)) if n >= 3 else None
        found.sort(key=lambda p: (p != tuple(range(n)), p != to_first))
        return found

    for p in perms_for(tfl_shape, torch_shape):
        cands.append((_perm_label(p), p))
    if not cands:
        # Size-1 axes differ ((5, 16) vs (1, 5, 16)): compare without them.
        sq_src = tuple(d for d in tfl_shape if d != 1)
        sq_dst = tuple(d for d in torch_shape if d != 1)
        for p in perms_for(sq_src, sq_dst):
            cands.append(("squeeze+" + _perm_label(p), ("squeeze", p)))
    return cands


def _perm_label(p: tuple[int, ...]) -> str:
    n = len(p)
    if p == tuple(range(n)):
        return "identity"
    if n == 4 and p == (0, 3, 1, 2):
        return "NHWC->NCHW"
    return "transpose" + str(tuple(p))


def _apply_layout(arr: np.ndarray, how: Any, torch_shape: tuple[int, ...]) -> np.ndarray:
    if isinstance(how, tuple) and how and how[0] == "squeeze":
        arr = arr.reshape(tuple(d for d in arr.shape if d != 1))
        arr = np.transpose(arr, how[1])
        return arr.reshape(torch_shape)
    return np.transpose(arr, how)


# ---- flatbuffer side --------------------------------------------------------------------------


def _dequantize(arr: np.ndarray, info: TensorInfo) -> np.ndarray | None:
    if info.dtype in _DEQUANTIZABLE:
        if info.quant is None or not info.quant.scales or info.quant.per_channel:
            return None
        scale, zero_point = info.quant.scales[0], info.quant.zero_points[0]
        return ((arr.astype(np.float64) - zero_point) * scale).astype(np.float32)
    return arr.astype(np.float32)


def _root_key_index(scope: tuple[str, ...], root_name: str, known: dict[tuple[str, ...], Any]) -> int:
    """Index in a scope after which components are below the user's root module."""
    for i, comp in enumerate(scope):
        if comp == root_name or comp.startswith(root_name + "_"):
            return i + 1
    # The root's name differs (a wrapper, a PT2E graph module, a class loaded from another file):
    # drop as many leading components as it takes to land on a known module.
    for i in range(1, len(scope)):
        if scope[i:] in known:
            return i
    return 1


def _resolve_scope(
    scope: tuple[str, ...], root_name: str, known: dict[tuple[str, ...], _Call]
) -> tuple[str, ...] | None:
    """Map a flatbuffer scope to the nearest module key that ran in PyTorch."""
    key = scope[_root_key_index(scope, root_name, known) :]
    while True:
        if key in known:
            return key
        if not key:
            return None
        key = key[:-1]  # a functional scope deeper than any hooked module


def _is_under(key: tuple[str, ...], parent: tuple[str, ...]) -> bool:
    return key[: len(parent)] == parent


# ---- the comparison ---------------------------------------------------------------------------


def per_layer_parity(
    module: Any,
    example_inputs: tuple,
    model: FlatbufferModel | bytes,
    *,
    samples: list[tuple[np.ndarray, ...]] | None = None,
    channels_last_inputs: tuple[int, ...] = (),
    jump_drop_db: float = JUMP_DROP_DB,
    jump_floor_db: float = JUMP_FLOOR_DB,
    min_sqnr_db: float | None = None,
) -> LayerParityReport:
    """Compare each PyTorch module's output with its flatbuffer tensor, over the samples.

    ``module`` is the PyTorch reference (float, as the user wrote it); ``example_inputs`` and
    ``samples`` are in PyTorch's layout. ``channels_last_inputs`` names the inputs the flatbuffer
    takes as NHWC (exported through ``conversion.wrap_channels_last``): they are permuted before
    being fed to LiteRT. The flatbuffer runs with the reference kernels and every intermediate
    tensor kept, so each tensor holds what its own op computed. ``min_sqnr_db`` gates each layer
    (``LayerParity.passed``). ``model`` is the flatbuffer as read (bytes, from a file, are read and
    verified here).
    """
    if min_sqnr_db is not None and min_sqnr_db != min_sqnr_db:
        raise UsageError("The per-layer SQNR threshold is NaN.", "Give a number of dB, e.g. 25.")
    import torch

    from ..runtime import Resolver, TFLiteRunner

    fm = model if isinstance(model, FlatbufferModel) else read_flatbuffer(model)
    if samples is None:
        samples = [tuple(np.asarray(t.detach().cpu().numpy()) for t in example_inputs)]
    if not samples:
        raise UsageError("Per-layer parity was given an empty list of samples.", "Pass at least one sample.")
    runner = TFLiteRunner(fm, resolver=Resolver.REFERENCE, preserve_all_tensors=True)
    if len(samples[0]) != len(runner.inputs):
        raise InputSpecError(
            f"The flatbuffer takes {len(runner.inputs)} inputs but the samples have {len(samples[0])}.",
            "Give per-layer parity the same inputs the model was exported with.",
        )
    for i in channels_last_inputs:
        if not 0 <= i < len(runner.inputs):
            raise UsageError(
                f"channels_last_inputs names input {i}, but the model has {len(runner.inputs)} inputs.",
                "List only indices of 4-D image inputs that were exported channels-last.",
            )

    # A torch.export graph inlines its modules: read their values from the nodes instead of hooks.
    # Its train/eval mode was fixed at export time (eval() raises on it).
    from_graph = _graph_module_stack(module)
    was_training = getattr(module, "training", False) and not from_graph
    if was_training:
        module.eval()
    root_name = _class_fullname(type(module))
    graph_outputs = [o.index for o in runner.outputs]  # in forward()'s result order

    def run_sample(s_idx: int) -> tuple[dict[tuple[str, ...], _Call], list, set, dict[int, np.ndarray]]:
        sample = samples[s_idx]
        t_inputs = tuple(torch.as_tensor(_as_model_array(a)) for a in sample)
        with map_exceptions(
            {Exception: InputSpecError},  # the user's forward() runs here: its errors are the user's
            f"The PyTorch model failed on sample {s_idx}: {{error}}",
            "Check that the samples match the model's input shapes and dtypes.",
        ):
            if from_graph:
                calls, outs, _, amb = _capture_graph(module, t_inputs)
            else:
                calls, outs, _, amb = _capture_torch(module, t_inputs)
        feed = []
        for i, arr in enumerate(sample):
            arr = _as_model_array(arr)
            if i in channels_last_inputs:
                arr = np.transpose(arr, (0, *range(2, arr.ndim), 1))
            _check_input_shape(i, arr.shape, runner.inputs[i].shape, i in channels_last_inputs)
            feed.append(arr)
        runner.run_raw(runner.quantize_inputs(feed))
        return calls, outs, amb, _read_tensors(runner, fm)

    try:
        calls, outs, ambiguous, tensors = run_sample(0)
        if from_graph:
            root_name = _capture_graph_root_name(module) or root_name
        later = (run_sample(i) for i in range(1, len(samples)))
        # Matching uses the first sample; metrics accumulate sample by sample so that memory
        # holds one sample's activations at a time.
        return _compare(
            fm, calls, ambiguous, tensors, outs, later, root_name, graph_outputs, len(samples),
            jump_drop_db, jump_floor_db, min_sqnr_db,
        )
    finally:
        if was_training:
            module.train()


def _capture_graph_root_name(gm: Any) -> str:
    for n in gm.graph.nodes:
        stack = list((n.meta.get("nn_module_stack") or {}).values()) if n.op == "call_function" else []
        if stack:
            return _stack_component("", stack[0][1])
    return ""


def _as_model_array(a: Any) -> np.ndarray:
    arr = np.asarray(a)
    # float64 samples (numpy's default) would make PyTorch run in double.
    return arr.astype(np.float32) if arr.dtype == np.float64 else arr


def _check_input_shape(i: int, got: tuple, want: tuple, permuted: bool) -> None:
    if tuple(got) == tuple(want):
        return
    hint = "Give per-layer parity the same input shapes the model was exported with."
    if not permuted and len(got) >= 3 and (got[0], *got[2:], got[1]) == tuple(want):
        hint = (
            f"The flatbuffer takes input {i} channels-last (NHWC): pass channels_last_inputs=({i},) "
            "and keep the samples in PyTorch's NCHW layout."
        )
    elif permuted and len(got) >= 3 and (got[0], got[-1], *got[1:-1]) == tuple(want):
        hint = f"The flatbuffer takes input {i} channels-first: leave it out of channels_last_inputs."
    raise InputSpecError(
        f"Input {i} has shape {list(got)} for LiteRT but the flatbuffer expects {list(want)}.", hint
    )


def _read_tensors(runner: Any, fm: FlatbufferModel) -> dict[int, np.ndarray]:
    out = {}
    for op in fm.operators:
        for t in op.outputs:
            if t < 0 or fm.tensors[t].dtype not in _COMPARABLE:
                continue
            with map_exceptions(
                {Exception: RuntimeRunError},  # a tensor the interpreter freed despite preserve_all_tensors
                f"LiteRT did not keep intermediate tensor {fm.tensors[t].name!r}: {{error}}",
                "Run with the reference resolver and preserve_all_tensors=True.",
            ):
                arr = runner.tensor(t)
            deq = _dequantize(arr, fm.tensors[t])
            if deq is not None:
                out[t] = deq
    return out


def _compare(
    fm: FlatbufferModel,
    calls: dict[tuple[str, ...], _Call],
    ambiguous: set,
    tensors: dict[int, np.ndarray],
    model_outputs: list,
    later: Any,
    root_name: str,
    graph_outputs: list[int],
    n_samples: int,
    jump_drop_db: float,
    jump_floor_db: float,
    min_sqnr_db: float | None = None,
) -> LayerParityReport:
    # Producer op and scopes of every computed tensor, in execution order.
    producer: dict[int, Any] = {}
    order: list[int] = []
    scopes: dict[int, set[tuple[str, ...]]] = {}
    named: dict[int, bool] = {}
    for op in fm.operators:
        for t in op.outputs:
            if t < 0 or t not in tensors:
                continue
            producer[t] = op
            order.append(t)
            info = fm.tensors[t]
            found = list(tensor_scopes(info.name))
            if not found and t in graph_outputs:
                # Outputs are renamed serving_default_output_N; the op's weights keep the scope.
                for i in op.inputs:
                    if i >= 0 and fm.tensors[i].is_constant:
                        found += tensor_scopes(fm.tensors[i].name)
            scopes[t] = {k for s in found if (k := _resolve_scope(s, root_name, calls)) is not None}
            # A name that only resolves to an ancestor names a module the PyTorch model lacks.
            named[t] = any(s[_root_key_index(s, root_name, calls) :] in calls for s in found)
    position = {t: n for n, t in enumerate(order)}

    # Modules whose output is literally one of the model's outputs map to that output tensor.
    by_output: dict[tuple[str, ...], int] = {}
    for c in calls.values():
        if c.output is None:
            continue
        for o_idx, out in enumerate(model_outputs):
            if o_idx < len(graph_outputs) and c.out_id is not None and c.out_id == _tensor_id(out):
                if graph_outputs[o_idx] in tensors:
                    by_output[c.key] = graph_outputs[o_idx]

    # Each tensor holds the value of the module, among those it names, that finished last in
    # PyTorch: the ReLU a conv and BN were fused into, the parent whose residual add absorbed a
    # Linear's reshape. Names of earlier modules can also ride along on shared constants (the
    # converter deduplicates BN epsilons and ReLU6 bounds), which never makes them the owner.
    owner: dict[int, tuple[str, ...] | None] = {
        t: max(scopes[t], key=lambda k: calls[k].finished) if scopes[t] else None for t in order
    }

    def is_adapter(t: int, key: tuple[str, ...]) -> bool:
        # A layout op feeding the module (the TRANSPOSE before a conv carries the conv's name but
        # holds its input): its own inputs carry nothing of the module.
        op = producer[t]
        if op.opcode not in _DATA_MOVEMENT_OPS:
            return False
        return not any(i in scopes and any(_is_under(s, key) for s in scopes[i]) for i in op.inputs)

    assignment: dict[tuple[str, ...], int] = {}
    fused_into: dict[int, list[str]] = {}
    unmatched: dict[tuple[str, ...], UnmatchedModule] = {}
    in_order = sorted(calls.items(), key=lambda kv: kv[1].finished)
    for key, c in in_order:
        if c.output is None:
            continue
        if c.identity:
            unmatched[key] = UnmatchedModule(c.path, c.module_type, UnmatchedReason.IDENTITY)
            continue
        if key in ambiguous:
            unmatched[key] = UnmatchedModule(c.path, c.module_type, UnmatchedReason.AMBIGUOUS_NAME)
            continue
        if key in by_output:
            assignment[key] = by_output[key]
            continue
        carrying = [t for t in order if any(_is_under(s, key) for s in scopes[t])]
        if not carrying:
            unmatched[key] = UnmatchedModule(c.path, c.module_type, UnmatchedReason.NO_TENSOR)
            continue
        owned = [t for t in carrying if owner[t] is not None and _is_under(owner[t], key)]
        real = [t for t in owned if not is_adapter(t, key)]
        if real or len(owned) == len(carrying):
            owned = real or owned  # a Flatten is nothing but its RESHAPE
        else:
            owned = []
        if not owned:
            host = next(
                (t for t in carrying if producer[t].opcode not in _DATA_MOVEMENT_OPS and t not in owned),
                carrying[-1],
            )
            unmatched[key] = UnmatchedModule(
                c.path, c.module_type, UnmatchedReason.FUSED, fused_into=fm.tensors[host].name
            )
            fused_into.setdefault(host, []).append(c.path)
            continue
        if c.calls > 1 and _runs(order, set(owned)) != c.calls:
            # A module used several times (torchvision's shared ReLU) has one name for all its
            # calls; unless each call left its own tensors, the last one cannot be told apart.
            unmatched[key] = UnmatchedModule(c.path, c.module_type, UnmatchedReason.REPEATED_CALLS)
            continue
        chosen = owned[-1]
        if not _layout_candidates(fm.tensors[chosen].shape, tuple(c.output.shape)):
            unmatched[key] = UnmatchedModule(c.path, c.module_type, UnmatchedReason.SHAPE_MISMATCH)
            continue
        assignment[key] = chosen

    def fold_into(k: tuple[str, ...], t: int) -> None:
        """Report matched module ``k`` as fused into tensor ``t`` instead of owning a row."""
        sc = calls[k]
        del assignment[k]
        unmatched[k] = UnmatchedModule(sc.path, sc.module_type, UnmatchedReason.FUSED, fused_into=fm.tensors[t].name)
        fused_into.setdefault(t, []).append(sc.path)

    # A module that left no tensor at all but took a matched module's output as its input was
    # folded into it before naming (PT2E folds BatchNorm into the conv's weights and drops the BN
    # node): the tensor holds the folded module's output, so compare it with that instead. This
    # comes before sharing rows: a folded BN that ends a Sequential returns the Sequential's
    # tensor, and sharing that row would leave the conv (which finished first) as its reference.
    for key, c in in_order:
        miss = unmatched.get(key)
        if miss is None or miss.reason != UnmatchedReason.NO_TENSOR or c.in_id is None:
            continue
        sources = [k for k in assignment if calls[k].out_id == c.in_id]
        if not sources:
            continue
        t = assignment[sources[0]]
        if any(assignment[k] != t for k in sources) or t in graph_outputs:
            continue
        if not _layout_candidates(fm.tensors[t].shape, tuple(c.output.shape)):
            continue
        for k in sources:
            fold_into(k, t)
        del unmatched[key]
        assignment[key] = t

    # The same fold when the BN's output is a model output: the BN was matched to the output tensor
    # above, and the conv to the value it computes before the output's TRANSPOSE or DEQUANTIZE,
    # which is already the BN's (folded) output, not the conv's: report the conv as fused into the
    # output row.
    for key, c in in_order:
        out = by_output.get(key)
        if out is None or assignment.get(key) != out or c.in_id is None or "BatchNorm" not in c.module_type:
            continue
        if any(_is_under(s, key) for t in order for s in scopes[t]):
            continue  # the BN named a tensor of its own: it was not folded away
        upstream: set[int] = set()  # tensors the output is only a layout change or requantization of
        t = out
        while (op := producer.get(t)) is not None and op.opcode in _DATA_MOVEMENT_OPS:
            moved = [i for i in op.inputs if i >= 0 and not fm.tensors[i].is_constant]
            if len(moved) != 1:
                break
            t = moved[0]
            upstream.add(t)
        for k in [k for k in assignment if k != key and calls[k].out_id == c.in_id]:
            if assignment[k] not in upstream:
                continue
            fold_into(k, out)

    # Modules that return the very tensor a matched module returned (a ReLU6 whose op the
    # converter named after its enclosing ConvLayer) share that module's tensor.
    for key, c in in_order:
        miss = unmatched.get(key)
        if miss is None or miss.reason in (UnmatchedReason.IDENTITY, UnmatchedReason.AMBIGUOUS_NAME):
            continue
        same = [k for k in assignment if c.out_id is not None and calls[k].out_id == c.out_id]
        if same:
            if miss.reason == UnmatchedReason.FUSED:
                for paths in fused_into.values():
                    if c.path in paths:
                        paths.remove(c.path)
            del unmatched[key]
            assignment[key] = assignment[same[0]]

    # One row per flatbuffer tensor: the innermost module owns it, enclosing ones are aliases.
    by_tensor: dict[int, list[tuple[str, ...]]] = {}
    for key, t in assignment.items():
        by_tensor.setdefault(t, []).append(key)
    notes: list[str] = []
    ordered = sorted(by_tensor, key=lambda t: position[t])
    layouts = _choose_layouts(fm, calls, by_tensor, ordered, tensors)
    owners = {t: min(by_tensor[t], key=lambda k: calls[k].finished) for t in ordered}
    sq: dict[int, list[float]] = {t: [] for t in ordered}
    cs: dict[int, list[float]] = {t: [] for t in ordered}

    def measure(sample_calls: dict[tuple[str, ...], _Call], sample_tensors: dict[int, np.ndarray]) -> None:
        for t in ordered:
            c = sample_calls.get(owners[t])
            if c is None or c.output is None or t not in sample_tensors:
                continue  # the module did not run on this sample (data-dependent control flow)
            ref = c.output.float().cpu().numpy()
            torch_shape = tuple(ref.shape)
            if torch_shape != tuple(int(d) for d in calls[owners[t]].output.shape):
                continue
            got = _apply_layout(sample_tensors[t], layouts[t][1], torch_shape)
            sq[t].append(sqnr_db(ref, got))
            cs[t].append(cosine_similarity(ref, got))

    measure(calls, tensors)
    for sample_calls, _, _, sample_tensors in later:
        measure(sample_calls, sample_tensors)

    rows: list[LayerParity] = []
    for t in ordered:
        keys = sorted(by_tensor[t], key=lambda k: calls[k].finished)
        c = calls[keys[0]]
        info = fm.tensors[t]
        if c.calls > 1:
            notes.append(f"{c.path or '<model>'} runs {c.calls} times; its last call was compared.")
        rows.append(
            LayerParity(
                position=len(rows),
                module_path=c.path,
                module_type=c.module_type,
                tflite_tensor=info.name,
                tflite_index=t,
                opcode=producer[t].opcode,
                shape=tuple(info.shape),
                dtype=info.dtype,
                torch_shape=tuple(int(d) for d in c.output.shape),
                layout=layouts[t][0],
                sqnr_db=float(np.mean(sq[t])),
                cosine=float(np.mean(cs[t])),
                also_outputs_of=tuple(calls[k].path or "<model>" for k in keys[1:]),
                fused_modules=tuple(fused_into.get(t, ())),
                passed=None if min_sqnr_db is None else bool(np.mean(sq[t]) >= min_sqnr_db),
            )
        )

    jump_at = first_jump_index([r.sqnr_db for r in rows], drop_db=jump_drop_db, floor_db=jump_floor_db)
    first_jump = rows[jump_at] if jump_at is not None else None
    worst = min(rows, key=lambda r: r.sqnr_db) if rows else None

    matched_tensors = set(by_tensor)
    internal = [t for t in order if t not in matched_tensors and named[t]]
    unmatched_t = [t for t in order if t not in matched_tensors and not named[t]]
    unmatched_names = [fm.tensors[t].name for t in unmatched_t]
    modules_total = sum(1 for c in calls.values() if c.output is not None)
    return LayerParityReport(
        layers=tuple(rows),
        first_jump=first_jump,
        worst=worst,
        unmatched_modules=tuple(unmatched[k] for k, _ in in_order if k in unmatched),
        modules_total=modules_total,
        tensors_total=len(order),
        tensors_matched=len(matched_tensors),
        tensors_internal=len(internal),
        unmatched_tensors=tuple(unmatched_names[:_MAX_LISTED]),
        tensors_unmatched=len(unmatched_t),
        samples=n_samples,
        jump_drop_db=jump_drop_db,
        jump_floor_db=jump_floor_db,
        min_sqnr_db=min_sqnr_db,
        notes=tuple(notes),
    )


def _choose_layouts(
    fm: FlatbufferModel,
    calls: dict[tuple[str, ...], _Call],
    by_tensor: dict[int, list[tuple[str, ...]]],
    ordered: list[int],
    tensors: dict[int, np.ndarray],
) -> dict[int, tuple[str, Any]]:
    """Pick one layout per tensor; shapes decide where they can, values only break real ties.

    A tie (C == H, or H == W in a square image) is settled first by the permutation that the
    model's unambiguous tensors of the same rank needed (the converter uses one layout throughout),
    then by cosine on the first sample, preferring the more likely candidate unless another is
    clearly better: a damaged layer must not be "explained" by a permutation the converter never
    makes.
    """
    cands_of: dict[int, list[tuple[str, Any]]] = {}
    votes: dict[int, dict[str, int]] = {}
    for t in ordered:
        c = calls[min(by_tensor[t], key=lambda k: calls[k].finished)]
        cands = _layout_candidates(fm.tensors[t].shape, tuple(int(d) for d in c.output.shape))
        cands_of[t] = cands
        if len(cands) == 1:
            rank_votes = votes.setdefault(len(fm.tensors[t].shape), {})
            rank_votes[cands[0][0]] = rank_votes.get(cands[0][0], 0) + 1
    chosen: dict[int, tuple[str, Any]] = {}
    for t in ordered:
        cands = cands_of[t]
        if len(cands) == 1:
            chosen[t] = cands[0]
            continue
        rank_votes = votes.get(len(fm.tensors[t].shape), {})
        if rank_votes:
            favourite = max(rank_votes, key=rank_votes.get)
            match = [lh for lh in cands if lh[0] == favourite]
            if match:
                chosen[t] = match[0]
                continue
        c = calls[min(by_tensor[t], key=lambda k: calls[k].finished)]
        torch_shape = tuple(int(d) for d in c.output.shape)
        ref0, out0 = c.output.float().cpu().numpy(), tensors[t]
        scores = [cosine_similarity(ref0, _apply_layout(out0, how, torch_shape)) for _, how in cands]
        best = max(scores)
        chosen[t] = next(lh for lh, sc in zip(cands, scores) if sc >= best - _LAYOUT_TIE_COSINE)
    return chosen


def _runs(order: list[int], members: set[int]) -> int:
    """How many separate stretches of ``order`` consist of ``members``."""
    runs, inside = 0, False
    for t in order:
        if t in members and not inside:
            runs += 1
        inside = t in members
    return runs


def first_jump_index(
    sqnrs: Sequence[float], *, drop_db: float = JUMP_DROP_DB, floor_db: float = JUMP_FLOOR_DB
) -> int | None:
    """Index of the first layer below ``floor_db`` that is the first layer or dropped more than
    ``drop_db`` below the layer before it (see the module docstring); None when there is none."""
    for i, value in enumerate(sqnrs):
        if value >= floor_db:
            continue
        if i == 0 or sqnrs[i - 1] - value > drop_db:
            return i
    return None
