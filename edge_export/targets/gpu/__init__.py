"""The Android GPU delegate target: the plugin (``target``), the delegate's operator table
(``rules``), the op-by-op prediction (``checks``), the analyzer cross-check (``analyzer``), the
report section (``report``) and the float16 precision check (``precision``)."""

from . import target as _target  # noqa: F401  (registers the plugin)
