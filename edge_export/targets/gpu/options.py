"""The gpu target's options (``GpuOptions``): an ExportOptions keyword and an ``export`` flag each,
refused with any other target."""

from __future__ import annotations

from dataclasses import dataclass

from ...errors import UsageError
from ...option_fields import option
from ..registry import TargetOptions

__all__ = ["GpuOptions"]


@dataclass(frozen=True)
class GpuOptions(TargetOptions):
    gpu_precision: str | None = option(  # None: not given, fp16 (``precision``)
        None, "--gpu-precision", metavar="PRECISION", panel="Target: gpu",
        help="gpu: the precision the app runs the GPU delegate at: fp16 (the delegate's default; a failed float16 precision check is exit 1) or fp32 (the app forces float32; the check is reported only).")

    def __post_init__(self) -> None:
        if self.gpu_precision is not None and self.gpu_precision not in ("fp16", "fp32"):
            raise UsageError(f"--gpu-precision {self.gpu_precision} is not known.", "Use --gpu-precision fp16 (the delegate's default) or fp32.")

    @property
    def precision(self) -> str:
        """The precision the app runs the delegate at: as given, else the delegate's default."""
        return self.gpu_precision or "fp16"
