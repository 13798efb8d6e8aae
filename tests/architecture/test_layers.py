"""The package's layers (issue 37): each subpackage and root module of ``edge_export`` sits in one
layer, and no module imports from a layer above its own: lazy imports inside functions and those
under ``TYPE_CHECKING`` count (the import walk of ``test_import_cycles.py``). Packages form no
import loop either, with the same imports counted.

The order is what the code needs, bottom to top:

- the vocabulary (version, errors, the pinned set, config's enums) and the plugin registries
  (``plugins/``: targets, their options and the report sections they and the language-model task
  declare, so that options and reports read them without importing a plugin);
- output (sanitisers, atomic files, JSON, terminal), processes (children, sandbox, memory);
- the flatbuffer, what a graph records (``graph/``: provenance, channels-last plan, applied
  rewrites), the passes over both, and the conversion that runs them;
- the LiteRT runtime, the model sources (``loading/``), the parity validators, quantization (which
  measures with the validators), reports (which render all of the above);
- the artifacts written beside a model (metadata, test vectors, tensor-name maps: they read
  reports and validators), the options (checked by quantization, validators and artifacts, and
  reading the targets' declarations from ``plugins/``), the targets (which take the options);
- the stages of the chain, the language-model task (built on the stages), the API and the
  commands over it, the CLI.

A new subpackage or root module fails ``test_every_module_has_a_layer`` until it is given one.
Plugin discovery (``plugins/target_registry.py`` importing the target modules by computed name) is
not an import statement: it is how plugins register, from the top down into the registry.
"""

from __future__ import annotations

from test_import_cycles import cycles, import_graph

LAYERS: tuple[frozenset[str], ...] = tuple(frozenset(layer.split()) for layer in (
    "version errors constraints quantize_modes config option_fields",  # option_fields: the options' field metadata (issue 37, point 1)
    "plugins",
    "output",
    "processes",
    "flatbuffer",
    "graph",
    "passes",
    "conversion",
    "runtime",
    "loading",
    "validators",
    "quantization",
    "reports",
    "artifacts",
    "options",
    "targets",
    "stages",
    "llm",
    "api inspection",
    "cli cli_flags cli_tools __main__ edge_export",
))


def _unit(module: str) -> str:
    """The subpackage or root module ``module`` belongs to (``edge_export`` for the package's face)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def _layer_of() -> dict[str, int]:
    return {unit: rank for rank, layer in enumerate(LAYERS) for unit in layer}


def climbs(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module from a layer above its own, as "importer -> imported"."""
    layer = _layer_of()
    return sorted(
        f"{module} -> {dep}"
        for module, deps in graph.items()
        for dep in deps
        if layer[_unit(dep)] > layer[_unit(module)]
    )


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The import graph with each subpackage and root module as one node."""
    packages: dict[str, set[str]] = {_unit(m): set() for m in graph}
    for module, deps in graph.items():
        packages[_unit(module)].update(_unit(d) for d in deps if _unit(d) != _unit(module))
    return packages


def test_every_module_has_a_layer():
    known = _layer_of()
    missing = sorted({_unit(m) for m in import_graph()} - set(known))
    assert not missing, f"give these a layer in LAYERS: {missing}"
    assert sum(len(layer) for layer in LAYERS) == len(known), "a unit is in two layers"


def test_no_module_imports_from_a_higher_layer():
    found = climbs(import_graph())
    assert not found, "imports from a higher layer:\n" + "\n".join(found)


def test_no_package_level_import_loop():
    found = cycles(package_graph(import_graph()))
    assert not found, "package import loops:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_checks_can_fail():
    """A lazy climb (reports reading a target module) is found, and so is the loop it closes."""
    graph = import_graph()
    graph["edge_export.reports.markdown"] = {*graph["edge_export.reports.markdown"], "edge_export.targets.base"}
    assert "edge_export.reports.markdown -> edge_export.targets.base" in climbs(graph)
    assert any({"reports", "targets"} <= set(c) for c in cycles(package_graph(graph)))
