"""Microcontroller targets: TFLite Micro (``target``; its kernels and op resolver in ``kernels``,
its rules and arena estimate in ``checks``, its host interpreter in ``runner``), its firmware bundle
(``bundle``, its self-test in ``bundle_selftest``), flash/RAM budgets (``budgets``), the CMSIS-NN rules (``cmsis_nn``) and the Arm
Ethos-U NPUs built on them (``ethosu``)."""

from . import ethosu as _ethosu  # noqa: F401  (registers the Ethos-U plugins)
from . import target as _target  # noqa: F401  (registers the micro plugin)
