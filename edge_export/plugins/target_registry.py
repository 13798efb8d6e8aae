"""The registry of targets and of the options they declare, at the bottom of the layers.

Targets register themselves with ``register_target`` when their module is imported; the first
lookup imports every module of the ``edge_export.targets`` package once (plugin discovery, by
computed name: not an import of a higher layer), so a new target is one new module or subpackage
there. This module names no target and imports nothing of the chain, so ``options.py`` can route a
target's options to its class, and reports/ read the targets' sections, without climbing to
``targets/``.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass, fields
from typing import Any

from ..config import Target
from ..errors import UsageError

__all__ = [
    "TARGET_NAME_PATTERN", "TargetOptions", "target_options_classes", "get_target", "register_target",
    "registered_targets", "target_name", "unregister_target",
]

# The package whose modules register the targets (imported by name on first lookup).
TARGETS_PACKAGE = __package__.rpartition(".")[0] + ".targets"


@dataclass(frozen=True)
class TargetOptions:
    """The base of a target's options class (``TargetPlugin.options_class``), a frozen dataclass
    whose fields carry their flags (option_fields.option): ExportOptions takes each as a keyword,
    the CLI as a flag, and any other target refuses it. A field's default (None, False for a
    switch) means "not given"; a default the target applies is a property of the class."""

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def given(self) -> dict[str, Any]:
        """The options given: every field whose value is not its default."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) != f.default}


# ---- the registry -------------------------------------------------------------------------------

_REGISTRY: dict[str, Any] = {}
_discovered = False

# What a target may be called: a command-line value and a file-name part. The report schema's
# "target_name" has the same pattern, so a plugin target's report validates (a test checks they agree).
TARGET_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]*$"


def register_target(plugin: Any) -> Any:
    """Make ``plugin`` available as ``--target plugin.name`` in the API; returns it."""
    if not plugin.name:
        raise ValueError(f"{type(plugin).__name__} has no name")
    if not re.fullmatch(TARGET_NAME_PATTERN, plugin.name):
        raise ValueError(
            f"{type(plugin).__name__}.name {plugin.name!r} is not a target name: use lower-case letters, digits,"
            " '.', '_' and '-', starting with a letter or digit (the report schema's target_name pattern)"
        )
    existing = _REGISTRY.get(plugin.name)
    if existing is not None and type(existing) is not type(plugin):
        raise ValueError(f"target {plugin.name!r} is already registered by {type(existing).__name__}")
    _REGISTRY[plugin.name] = plugin
    return plugin


def unregister_target(name: str) -> None:
    _REGISTRY.pop(name, None)


def _discover() -> None:
    """Import every module of this package once: each target module registers its plugin."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    package = importlib.import_module(TARGETS_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{TARGETS_PACKAGE}.{info.name}")


def target_name(target: Target | str) -> str:
    return target.value if isinstance(target, Target) else str(target)


def registered_targets() -> dict[str, Any]:
    """Every target by name: the CLI's (the Target enum's order) first, then the others by name,
    whatever order their modules were imported in (errors list them in this order)."""
    _discover()
    builtin = {t.value: i for i, t in enumerate(Target)}
    return dict(sorted(_REGISTRY.items(), key=lambda item: (builtin.get(item[0], len(builtin)), item[0])))


def get_target(target: Target | str) -> Any:
    name = target_name(target)
    plugin = _REGISTRY.get(name)
    if plugin is None:
        _discover()
        plugin = _REGISTRY.get(name)
    if plugin is None:
        known = registered_targets()
        family = [n for n, p in known.items() if p.family and name.startswith(p.family)]
        # natural order: ethos-u55-32 before ethos-u55-128
        family.sort(key=lambda n: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", n)])
        if family:
            raise UsageError(
                f"--target {name} is not a known {known[family[0]].family} configuration.",
                f"Use one of: {', '.join(family)}.",
            )
        raise UsageError(f"--target {name} is not known.", f"Use one of: {', '.join(known)}.")
    return plugin


def target_options_classes() -> list[type]:
    """Every registered target's options class, once, in the targets' order (targets that share
    one, such as micro's with the Ethos-U targets, declare the same class)."""
    found: list[type] = []
    for plugin in registered_targets().values():
        if plugin.options_class is not None and plugin.options_class not in found:
            found.append(plugin.options_class)
    return found
