"""Rewrites of the model, one pass per module: ``fx/`` changes the exported PyTorch graph before
conversion, ``flatbuffer/`` the converted LiteRT model (run by ``run_flatbuffer_passes``, which
packs once). ``python -m edge_export.passes`` lists them with what each does.
"""

from __future__ import annotations

__all__ = ["describe_passes"]


def describe_passes() -> list[tuple[str, str, str]]:
    """``(kind, name, first docstring line)`` of every pass, in module order."""
    import importlib
    import pkgutil

    found = []
    for kind in ("fx", "flatbuffer"):
        package = importlib.import_module(f"{__name__}.{kind}")
        for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
            if not info.name.endswith("_pass"):
                continue
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            function = getattr(module, info.name)
            summary = (module.__doc__ or function.__doc__ or "").strip().splitlines()[0]
            found.append((kind, info.name, summary))
    return found
