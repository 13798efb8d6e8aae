"""The Coral Edge TPU target: ``checks`` (what the compiler will map), ``rewrites`` (what the exporter
changes so it maps), ``compiler`` (running ``edgetpu_compiler`` and libedgetpu), ``target`` (the plugin)."""

from . import target as _target  # noqa: F401  (registers the plugin)
