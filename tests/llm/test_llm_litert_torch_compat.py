"""The TensorFlow-import workaround (edge_export/llm/litert_torch_compat.py) is still needed, and
leaves no trace: when litert-torch fixes issue 971 the first test fails, and the workaround goes."""

from __future__ import annotations

import sys

import pytest

from edge_export.llm.litert_torch_compat import TENSORFLOW_SCHEMA_MODULE, import_export_hf, plain_import_error

pytestmark = pytest.mark.slow  # imports litert-torch's generative export (about 10 s)


def test_litert_torch_export_hf_still_needs_tensorflow_without_the_workaround():
    error = plain_import_error()
    assert error is not None, (
        "litert_torch.generative.export_hf imports without TensorFlow now (litert-torch issue 971 fixed): "
        "remove edge_export/llm/litert_torch_compat.py and import export_hf directly."
    )
    assert "tensorflow" in error


def test_the_workaround_imports_export_hf_and_leaves_no_tensorflow_module():
    export_hf = import_export_hf()
    assert callable(export_hf.export)
    assert not any(name == "tensorflow" or name.startswith("tensorflow.") for name in sys.modules)
    assert TENSORFLOW_SCHEMA_MODULE not in sys.modules
