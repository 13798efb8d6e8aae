"""What each output is (classification, embedding, regression), and how that was decided.

The kind decides how an output's parity is judged, so it is never guessed from the shape: an
embedding is shaped ``[batch, dim]`` exactly like class logits, and the argmax of an embedding means
nothing. In order, the first that speaks decides:

1. ``option``: ``--output-kind NAME=KIND`` for that output, or a bare ``--output-kind KIND`` for all;
2. ``name``: the output's name (its signature name, or the dict key / attribute PyTorch returned it
   under) is a known classifier name (``logits``, ``scores``, ``probs``, ``*_logits``, ...) or
   embedding name (``embedding``, ``pooler_output``, ``last_hidden_state``, ...);
3. ``labels``: ``--labels [NAME=]FILE`` was given for it: a classifier;
4. ``default``: ``regression``.

Parity then makes an output that is not an embedding, and whose kind no option gave, a
``probabilities`` output (source ``graph`` or ``values``) when a softmax or sigmoid makes it
(probabilities.py: that needs the converted model and PyTorch's values, which this module never sees).

Import-light (no numpy, no torch): the CLI checks these options before any heavy work.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ..config import OutputKind
from ..errors import UsageError
from ..output.serialize import json_field

__all__ = [
    "KindSource",
    "KindDecision",
    "OutputIdentity",
    "CLASSIFICATION_NAMES",
    "EMBEDDING_NAMES",
    "kind_from_name",
    "parse_output_kinds",
    "parse_labels",
    "read_labels",
    "resolve_output_kinds",
]


class KindSource(str, enum.Enum):
    OPTION = "option"
    NAME = "name"
    LABELS = "labels"
    DEFAULT = "default"
    GRAPH = "graph"  # probabilities: the exported graph's softmax/sigmoid makes the output (probabilities.py)
    VALUES = "values"  # probabilities: PyTorch's values are in [0, 1] and sum to 1 along an axis


# Whole names (case-insensitive). Suffixes below catch `start_logits`, `image_embeds`, ...
CLASSIFICATION_NAMES = frozenset(
    {"logits", "logit", "scores", "class_logits", "cls_logits", "probs", "probabilities", "class_probs"}
)
CLASSIFICATION_SUFFIXES = ("_logits", "_probs", "_probabilities")
EMBEDDING_NAMES = frozenset(
    {
        "embedding",
        "embeddings",
        "embeds",
        "pooler_output",
        "pooled_output",
        "last_hidden_state",
        "hidden_state",
        "sentence_embedding",
        "sentence_embeddings",
        "token_embeddings",
        "features",
        "image_embeds",
        "text_embeds",
    }
)
EMBEDDING_SUFFIXES = ("_embedding", "_embeddings", "_embeds")


def kind_from_name(name: str | None) -> OutputKind | None:
    """The kind a name says, or None when it says nothing."""
    if not name:
        return None
    n = name.strip().lower()
    if n in CLASSIFICATION_NAMES or n.endswith(CLASSIFICATION_SUFFIXES):
        return OutputKind.CLASSIFICATION
    if n in EMBEDDING_NAMES or n.endswith(EMBEDDING_SUFFIXES):
        return OutputKind.EMBEDDING
    return None


@dataclass(frozen=True)
class OutputIdentity:
    """What is known about one output before comparing it: its position, its names (the report
    name first, then any PyTorch-side name such as a dict key) and its PyTorch shape."""

    index: int
    names: tuple[str, ...]
    shape: tuple[int, ...]

    @property
    def name(self) -> str:
        return self.names[0] if self.names else f"output_{self.index}"


@dataclass(frozen=True)
class LabelsFile:
    """The --labels file that marked an output as a classifier, and its number of labels."""

    file: str
    count: int


@dataclass(frozen=True)
class KindDecision:
    kind: OutputKind
    source: KindSource = json_field(name="kind_source")
    labels: LabelsFile | None = json_field(default=None, omit_none=True)  # only with --labels
    # probabilities: "softmax", "log_softmax" or "sigmoid" when known (probabilities.py)
    activation: str | None = json_field(default=None, omit_none=True)
    # probabilities: the axis of the output's shape its classes lie along (a softmax's, found from
    # PyTorch's values: e.g. 1 for a channel softmax of [1, 2, H, W]); None: the last axis
    axis: int | None = json_field(default=None, omit_none=True, name="activation_axis")

    @property
    def labels_file(self) -> str | None:
        return self.labels.file if self.labels else None

    @property
    def labels_count(self) -> int | None:
        return self.labels.count if self.labels else None


_KIND_HINT = "Use classification, embedding, regression or probabilities, e.g. --output-kind embedding=embedding."


def _kind(text: str, given: str) -> OutputKind:
    try:
        return OutputKind(text.strip().lower())
    except ValueError:
        what = f"'{given}' is" if given == text else f"'{given}': '{text}' is"
        raise UsageError(f"--output-kind {what} not a kind of output.", _KIND_HINT) from None


def _split(text: str) -> tuple[str | None, str]:
    name, sep, value = str(text).rpartition("=")
    return (name.strip() or None, value.strip()) if sep else (None, str(text).strip())


def parse_output_kinds(values: object) -> tuple[tuple[str | None, OutputKind], ...]:
    """``--output-kind`` values to ``(name or None for all, kind)`` pairs. Accepts a string, a
    sequence of ``NAME=KIND``/``KIND`` strings or pairs, or a ``{name: kind}`` mapping."""
    if values is None:
        return ()
    if isinstance(values, Mapping):
        items: list = [(k, v) for k, v in values.items()]
    elif isinstance(values, (str, OutputKind)):
        items = [values]
    else:
        items = list(values)  # type: ignore[call-overload]
    pairs: list[tuple[str | None, OutputKind]] = []
    for item in items:
        if isinstance(item, OutputKind):
            name, text = None, item.value
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            name, text = item[0], item[1].value if isinstance(item[1], OutputKind) else str(item[1])
        else:
            name, text = _split(str(item))
        pairs.append((name, _kind(text, f"{name}={text}" if name else text)))
    names = [n for n, _ in pairs]
    if names.count(None) > 1:
        raise UsageError(
            "--output-kind was given more than one kind for all outputs.",
            "Give one bare --output-kind KIND, and NAME=KIND for the outputs that differ.",
        )
    dup = next((n for n in names if n is not None and names.count(n) > 1), None)
    if dup is not None:
        raise UsageError(f"--output-kind names the output '{dup}' twice.", "Give each output one kind.")
    return tuple(pairs)


def parse_labels(values: object) -> tuple[tuple[str | None, str], ...]:
    """``--labels`` values to ``(output name or None, file)`` pairs (``[NAME=]FILE``, or a mapping).

    A path that exists is a path even if it contains '=' (then no name can be given before it)."""
    if values is None:
        return ()
    if isinstance(values, Mapping):
        pairs = [(str(k), str(v)) for k, v in values.items()]
    else:
        items = [values] if isinstance(values, (str, Path)) else list(values)  # type: ignore[call-overload]
        pairs = []
        for item in items:
            if isinstance(item, (tuple, list)) and len(item) == 2:
                pairs.append((item[0], str(item[1])))
            elif isinstance(item, Path) or Path(str(item)).exists() or "=" not in str(item):
                pairs.append((None, str(item)))
            else:
                name, path = _split(str(item))
                pairs.append((name, path))
    names = [n for n, _ in pairs]
    if names.count(None) > 1 or any(n is not None and names.count(n) > 1 for n in names):
        raise UsageError(
            "--labels was given twice for the same output.",
            "Give --labels FILE once (one classifier output), or --labels NAME=FILE once per output.",
        )
    return tuple(pairs)


def read_labels(path: str) -> tuple[str, ...]:
    """One label per line (UTF-8; blank lines ignored). Empty or unreadable files are usage errors."""
    p = Path(path)
    hint = "Give a text file with one class label per line, in class-index order."
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError(f"No such labels file: {p}.", hint) from None
    except IsADirectoryError:
        raise UsageError(f"The labels file {p} is a folder.", hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"Cannot read the labels file {p}: {exc}.", hint) from exc
    labels = tuple(line.strip() for line in text.splitlines() if line.strip())
    if not labels:
        raise UsageError(f"The labels file {p} holds no labels.", hint)
    return labels


def _names_text(outputs: Sequence[OutputIdentity]) -> str:
    return ", ".join("/".join(dict.fromkeys(o.names)) or f"output_{o.index}" for o in outputs)


def _find(outputs: Sequence[OutputIdentity], name: str, option: str) -> OutputIdentity:
    for o in outputs:
        if name in o.names:
            return o
    raise UsageError(
        f"{option} names the output '{name}', but the model's outputs are: {_names_text(outputs)}.",
        f"Use one of those names in {option} NAME=...",
    )


def resolve_output_kinds(
    outputs: Sequence[OutputIdentity],
    kinds: Sequence[tuple[str | None, OutputKind]] = (),
    labels: Sequence[tuple[str | None, str]] = (),
) -> list[KindDecision]:
    """One decision per output, in order: option, name, labels, default. Raises UsageError for a
    name that matches no output, labels for an output that is not a classifier, or a labels file
    whose count differs from the output's classes (its last axis)."""
    explicit: dict[int, OutputKind] = {}
    for name, kind in kinds:
        if name is None:
            continue
        explicit[_find(outputs, name, "--output-kind").index] = kind
    for_all = next((kind for name, kind in kinds if name is None), None)
    decided: dict[int, tuple[OutputKind, KindSource]] = {}
    for o in outputs:
        if o.index in explicit:
            decided[o.index] = (explicit[o.index], KindSource.OPTION)
        elif for_all is not None:
            decided[o.index] = (for_all, KindSource.OPTION)
        else:
            by_name = next((k for k in (kind_from_name(n) for n in o.names) if k is not None), None)
            if by_name is not None:
                decided[o.index] = (by_name, KindSource.NAME)

    labelled: dict[int, tuple[str, int]] = {}
    for name, path in labels:
        if name is not None:
            target = _find(outputs, name, "--labels")
        elif len(outputs) == 1:
            target = outputs[0]
        else:
            classifiers = [o for o in outputs if decided.get(o.index, (None,))[0] is OutputKind.CLASSIFICATION]
            if len(classifiers) != 1:
                raise UsageError(
                    f"--labels {path} does not say which output it is for: the model has {len(outputs)} "
                    f"outputs ({_names_text(outputs)}).",
                    "Name it: --labels NAME=FILE.",
                )
            target = classifiers[0]
        kind, source = decided.get(target.index, (OutputKind.CLASSIFICATION, KindSource.LABELS))
        if kind not in (OutputKind.CLASSIFICATION, OutputKind.PROBABILITIES):
            why = "--output-kind" if source is KindSource.OPTION else "its name"
            raise UsageError(
                f"--labels {path} was given for the output '{target.name}', which {why} makes "
                f"{'an' if kind is OutputKind.EMBEDDING else 'a'} {kind.value} output; labels belong to classifiers.",
                f"Drop --labels, or add --output-kind {target.name}=classification.",
            )
        classes = target.shape[-1] if target.shape else 1
        count = len(read_labels(path))
        if count != classes:
            raise UsageError(
                f"The labels file {path} has {count} labels, but the output '{target.name}' has {classes} "
                f"classes (the last axis of its shape {list(target.shape)}).",
                "Give one label per class, one per line, in class-index order.",
            )
        decided[target.index] = (kind, source)
        labelled[target.index] = (path, count)

    result = []
    for o in outputs:
        kind, source = decided.get(o.index, (OutputKind.REGRESSION, KindSource.DEFAULT))
        path, count = labelled.get(o.index, (None, None))
        result.append(KindDecision(kind, source, None if path is None else LabelsFile(path, count)))
    return result
