"""The GPU float16 precision check (``--target gpu``, issue 24) on the repository's test models.

    nice .venv/bin/python benchmarks/gpu_precision.py

For each model: the export's verdict and exit code, float32 parity's worst SQNR, the float16 run's
worst SQNR against PyTorch and what the check found, and the time of the check alone
(``check_gpu_precision`` on the exported model and 8 samples, the parity default).
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODELS = (
    ("small_cnn", (1, 3, 16, 16)),
    ("mobilenet_v2_like", (1, 3, 32, 32)),
    ("resnet_like", (1, 3, 32, 32)),
    ("transformer_encoder_like", (1, 16, 32)),
    ("float16_overflow_cnn", (1, 3, 16, 16)),
)


def main() -> None:
    import torch

    import edge_export
    import testing_models
    from edge_export.flatbuffer import load_flatbuffer
    from edge_export.targets.gpu.precision import check_gpu_precision

    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in MODELS:
            torch.manual_seed(0)
            module = getattr(testing_models, name)().eval()
            example = (torch.randn(*shape),)
            result = edge_export.export(module, example_inputs=example, output=Path(tmp) / f"{name}.tflite", target="gpu", quiet_libraries=True)
            check = result.run_report.target.gpu_precision
            worst = check.parity.worst() if check.parity is not None else None
            feeds = [[torch.randn(*shape).numpy()] for _ in range(8)]
            with torch.no_grad():
                references = [[module(torch.from_numpy(f[0])).numpy()] for f in feeds]
            model = load_flatbuffer(result.tflite_path)
            start = time.perf_counter()
            check_gpu_precision(model, feeds, references)
            seconds = time.perf_counter() - start
            finite = worst is not None and isinstance(worst.sqnr_db, float) and math.isfinite(worst.sqnr_db)
            level = f"{worst.sqnr_db:.1f} dB" if finite else "no finite SQNR"
            print(
                f"{name}: exit {result.exit_code}, float32 parity {result.run_report.validation.worst().sqnr_db:.1f} dB, "
                f"float16 {check.status} ({level}), {result.run_report.flatbuffer.num_operators} ops, check {seconds:.2f} s"
                + (f"; {'; '.join(check.findings())}" if check.findings() else ""),
                flush=True,
            )


if __name__ == "__main__":
    main()
