"""The one place edge-export works around litert-torch's generative export (``export_hf``).

litert-torch 0.10.0 cannot import ``litert_torch.generative.export_hf`` without TensorFlow: the
package imports every model extension at import time, and one unrelated to text models
(``model_ext/bonsai_flux2/bonsai_flux2.py``) does ``from tensorflow.lite.python import
schema_py_generated``. Upstream: litert-torch issue 971 (closed as stale, unfixed in 0.10.0).
edge-export never installs TensorFlow, so :func:`import_export_hf` serves that one module from
``ai_edge_litert.schema_py_generated`` (the same generated flatbuffer schema, shipped with LiteRT)
for the duration of the import only.

Why "for the duration of the import only": a ``tensorflow`` module left in ``sys.modules`` changes
other libraries' behaviour (torch._dynamo's trace rules and transformers look for it and treat it
as a real TensorFlow), and a stub put there before ``torch._dynamo`` is imported breaks dynamo's
start-up (``tensorflow.__spec__ is None``). So torch._dynamo and litert_torch are imported first,
the stub modules are given real specs, and they are removed again once ``export_hf`` is loaded.

``tests/llm/test_llm_litert_torch_compat.py`` checks that a plain import still fails for this
reason: when upstream fixes it, that test fails and this module can go.
"""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any

__all__ = ["TENSORFLOW_SCHEMA_MODULE", "import_export_hf", "plain_import_error"]

TENSORFLOW_SCHEMA_MODULE = "tensorflow.lite.python.schema_py_generated"
_PACKAGES = ("tensorflow", "tensorflow.lite", "tensorflow.lite.python")
_EXPORT_MODULE = "litert_torch.generative.export_hf.export"


def _stub_package(name: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = []  # a package, so that the submodule import resolves
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    return module


def import_export_hf() -> Any:
    """``litert_torch.generative.export_hf.export``, imported without TensorFlow installed."""
    if _EXPORT_MODULE in sys.modules:
        return sys.modules[_EXPORT_MODULE]
    import torch._dynamo  # noqa: F401  before any stub: dynamo inspects sys.modules at import
    import litert_torch  # noqa: F401
    from ai_edge_litert import schema_py_generated

    names = (*_PACKAGES, TENSORFLOW_SCHEMA_MODULE)
    if any(name in sys.modules for name in names):  # a real TensorFlow (or someone's stub): use it
        import importlib

        return importlib.import_module(_EXPORT_MODULE)
    for name in _PACKAGES:
        sys.modules[name] = _stub_package(name)
    sys.modules[TENSORFLOW_SCHEMA_MODULE] = schema_py_generated
    sys.modules["tensorflow.lite.python"].schema_py_generated = schema_py_generated
    try:
        import importlib

        return importlib.import_module(_EXPORT_MODULE)
    finally:
        for name in names:
            sys.modules.pop(name, None)


def plain_import_error() -> str | None:
    """The error a plain ``import litert_torch.generative.export_hf.export`` raises in a fresh
    interpreter without TensorFlow, or None when it imports (upstream fixed issue 971). Runs a
    child process so the check never disturbs this interpreter's modules."""
    import subprocess

    code = f"import {_EXPORT_MODULE}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    if done.returncode == 0:
        return None
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit status {done.returncode}"
