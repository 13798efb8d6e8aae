"""The Coral Edge TPU target: ``checks`` (what the compiler will map: the partition), ``rules`` (each
operator's published requirements), ``mapping`` (the result in the compiler's vocabulary),
``rewrites`` (what the exporter changes so it maps), ``compiler`` (running ``edgetpu_compiler`` and
libedgetpu), ``report`` (its report sections), ``target`` (the plugin)."""

from . import target as _target  # noqa: F401  (registers the plugin)
