"""Scenarios of PT2E run beside (pt2e_beside.py), each in a fresh Python process: a fork is only made
in a process that has converted no model yet (its converter threads make a fork unsafe), and a
pytest worker has converted many. ``python beside_scenarios.py NAME [FLOAT.tflite]`` prints one
JSON line.

The float model is QuantCNN's conversion: read from FLOAT.tflite when given (the suite passes the
session's, the same bytes, so each scenario does not convert it again), else converted in a child
process (run_isolated) so this process stays forkable; the run with PT2E at its turn, which converts
in this process, comes after the one beside."""

from __future__ import annotations

import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(__file__))
from quantization_models import CNN_SPEC, QuantCNN, make  # noqa: E402

from edge_export.config import QuantBackend, QuantizeMode  # noqa: E402
from edge_export.processes.isolation import run_isolated  # noqa: E402
from edge_export.quantization import CalibrationSet, ParityTarget, QuantizationRequest, quantize_model, synthetic_calibration  # noqa: E402
from edge_export.quantization.budget import TimeBudget  # noqa: E402
from edge_export.quantization.pt2e_beside import PT2EBeside, start_pt2e_beside  # noqa: E402

EXAMPLE = (torch.zeros(CNN_SPEC.shape),)


def _attempts(result) -> list:
    return [[a.backend, a.ok, a.sqnr_db, a.fully_integer, a.error] for a in result.attempts]


def _reaped(beside: PT2EBeside) -> bool:
    try:
        os.waitpid(beside._run.pid, os.WNOHANG)
    except ChildProcessError:
        return beside._run.ended
    return False


def _run(cnn, float_bytes, calibration, target, budget_s=None, **options) -> dict:
    observer = options.get("pt2e_observer", "histogram")
    beside = start_pt2e_beside(cnn, EXAMPLE, QuantizeMode.INT8, calibration, backend=QuantBackend.AUTO,
                               parity_samples=16, observer=observer)
    assert isinstance(beside, PT2EBeside), "no child started"
    start = time.monotonic()
    budget = None if budget_s is None else TimeBudget(budget_s)  # from here: the imports before do not count
    with beside:
        result = quantize_model(cnn, EXAMPLE, QuantizationRequest(
            QuantizeMode.INT8, calibration=calibration, target=target, **options,
        ), float_model_bytes=float_bytes, budget=budget, pt2e_beside=beside)
    seconds = time.monotonic() - start
    out = {"attempts": _attempts(result), "backend": result.backend, "reason": result.reason, "reaped": _reaped(beside),
           "seconds": seconds, "skipped": list(budget.skipped) if budget else []}
    if os.environ.get("BESIDE_COMPARE"):
        at_turn = quantize_model(cnn, EXAMPLE, QuantizationRequest(
            QuantizeMode.INT8, calibration=calibration, target=target, **options,
        ), float_model_bytes=float_bytes)
        out["at_turn"] = {"attempts": _attempts(at_turn), "backend": at_turn.backend, "reason": at_turn.reason}
    return out


def _skewed(n: int) -> CalibrationSet:
    base = synthetic_calibration([CNN_SPEC], n=n, seed=1)
    return CalibrationSet((tuple(a * 0.05 for a in base.samples[0]), *base.samples[1:]), "skewed synthetic", False)


def _float_bytes(cnn, float_file: str | None) -> bytes:
    if float_file:
        with open(float_file, "rb") as f:
            return f.read()
    from edge_export.conversion.litert import convert_module

    return run_isolated(convert_module, cnn, EXAMPLE, stage="float conversion", backend="litert-torch")


def main(name: str, float_file: str | None = None) -> dict:
    if name == "fail-fast":  # exports a model of its own
        return _fail_fast()
    cnn = make(QuantCNN)
    float_bytes = _float_bytes(cnn, float_file)
    calibration = synthetic_calibration([CNN_SPEC], n=16, seed=1)
    never = ParityTarget(min_sqnr_db=200.0)
    if name == "both":
        return _run(cnn, float_bytes, calibration, never, flatbuffer_observer="moving_average")
    if name == "target-met":
        return _run(cnn, float_bytes, calibration, ParityTarget(min_sqnr_db=20.0, min_cosine=0.99))
    if name == "early-look":
        return _run(cnn, float_bytes, _skewed(48), never, pt2e_observer="moving_average")
    if name == "budget":
        return _run(cnn, float_bytes, synthetic_calibration([CNN_SPEC], n=40, seed=1), never, budget_s=6.0,
                    flatbuffer_observer="moving_average")  # PT2E far above it: no early stop races the budget
    if name == "error":
        from edge_export.errors import QuantizationError
        from edge_export.quantization import pt2e

        def fail(*args, **kwargs):
            raise QuantizationError("PT2E could not quantize the model: test failure")

        pt2e.calibrate_pt2e = fail  # before the fork: the child has it
        return _run(cnn, float_bytes, calibration, never)
    if name == "crash":  # the environment names the child's stage (isolation.CRASH_HOOK_ENV)
        return _run(cnn, float_bytes, calibration, never)
    raise SystemExit(f"unknown scenario {name}")


class HugePool(torch.nn.Module):
    """As in test_quantization_bounded: a PAD output (1 x 2216 x 2216 x 128) no LiteRT tensor can hold."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 128, 3, padding=1)
        self.pool = torch.nn.ZeroPad2d(1100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x)).flatten(1)


def _fail_fast() -> dict:
    """The export's float check fails: its error, the PT2E child started beside it reaped, nothing written."""
    import tempfile
    from pathlib import Path

    import edge_export
    from edge_export.errors import EdgeExportError
    from edge_export.quantization import pt2e_beside

    started = []
    real = pt2e_beside.start_pt2e_beside
    pt2e_beside.start_pt2e_beside = lambda *a, **k: started.append(real(*a, **k)) or started[-1]
    out = Path(tempfile.mkdtemp())
    start = time.monotonic()
    try:
        edge_export.export(HugePool().eval(), example_inputs=(torch.randn(1, 3, 16, 16),), output=out / "m.tflite", quantize="int8")
        exit_code = 0
    except EdgeExportError as exc:
        exit_code = exc.exit_code
    return {"exit_code": exit_code, "started": [isinstance(b, PT2EBeside) for b in started],
            "reaped": all(_reaped(b) for b in started if b is not None), "written": [p.name for p in out.iterdir()],
            "seconds": time.monotonic() - start}


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:3])))
