"""Fixtures for the Edge TPU tests. The helpers and fixtures live in edgetpu_helpers.py: a uniquely
named module, because several test folders have a conftest.py and `from conftest import` would clash."""

from edgetpu_helpers import fake_compiler_dir, small_cnn_int8  # noqa: F401  (fixtures)
