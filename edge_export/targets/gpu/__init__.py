"""The Android GPU delegate target: the op-by-op prediction and plugin (``target``) and the float16
precision check (``precision``)."""

from . import target as _target  # noqa: F401  (registers the plugin)
