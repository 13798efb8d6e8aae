"""PT2E run in a child process beside the float conversion and the flatbuffer backend.

``auto`` tries the flatbuffer backend first and PT2E second. Run one after the other, a model PT2E
wins on paid for the float conversion and the flatbuffer backend before PT2E began: 1.5 to 2.4
times PT2E alone on the zoo's ViTs, EfficientNet and YOLOS (docs/BENCHMARKS.md 23.9). With a core
idle, PT2E now starts at the beginning of the quantized export, forked (``isolation.start_isolated``),
and the parent converts and runs the flatbuffer backend meanwhile. The parent still makes every
decision from what the child reports, with the same rules at the same points as before:

- after EARLY_LOOK_SAMPLES calibration samples and after the calibration, the child sends its
  simulated SQNR; when that reads too far below the flatbuffer result (selection.lowering_not_needed),
  the child is killed, where the sequential run would have stopped;
- it is killed when the flatbuffer result meets the export's parity target (PT2E not tried), when the
  float model fails its check (the export fails with that reason, as soon as before), when the time
  budget is spent, and on any error or Ctrl-C (``with``).

Without an idle core (``EDGE_EXPORT_PT2E_BESIDE``: ``auto``, the default, looks at the load
average), or in a process that already converted a model (its converter threads make a fork unsafe:
``_fork_is_safe``), nothing is forked and PT2E runs in this process at its turn, as before, after the float
model passed its check: running beside only pays when a core would otherwise wait. In the child
torch runs on one thread (two hang in libgomp after a fork), so its ranges can differ from the
two-thread run in the last float bits, as they do between machines with different core counts.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from ..config import QuantBackend, QuantizeMode
from ..processes.isolation import BackgroundRun, send_message, start_isolated

__all__ = ["BESIDE_ENV", "PT2EBeside", "start_pt2e_beside"]

# "yes": run PT2E beside; "no": never; "auto" (default): when a core is idle (1-minute load average at
# least 0.5 below the cores this process may use).
BESIDE_ENV = "EDGE_EXPORT_PT2E_BESIDE"
_CALIBRATION_LABEL = "Quantizing: PT2E calibration"


def _fork_is_safe() -> bool:
    """Whether this process has no threads but torch's OpenMP workers (and one an import starts).
    A converter run leaves XLA and MLIR thread pools behind (4 threads before the first conversion,
    19 after, in a test): a child forked beside them deadlocked on a lock one of them held (the PT2E
    lowering never returned). A second export in the same Python process therefore runs PT2E at its
    turn, as before."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:  # no /proc: not known to be safe
        return False
    import torch

    return threads <= torch.get_num_threads() + 2


def _core_idle() -> bool:
    setting = os.environ.get(BESIDE_ENV, "auto").strip().lower()
    if setting == "no" or not _fork_is_safe():
        return False
    if setting == "yes":
        return True
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return cores >= 2 and os.getloadavg()[0] <= cores - 0.5


def _pt2e_in_child(module: Any, example_inputs: tuple, mode: QuantizeMode, calibration: Any, parity_set: list,
                   observer: str, strict: bool, verbose: bool) -> bytes:
    """In the child: PT2E's calibration, its simulated SQNR sent after EARLY_LOOK_SAMPLES and at the
    end, then its lowering."""
    from functools import partial

    from ..processes.library_output import quiet_libraries
    from . import pt2e, selection

    with quiet_libraries(verbose):
        refs = selection.reference_outputs(module, parity_set)
        converted, quantizer = pt2e.calibrate_pt2e(
            module, example_inputs, mode, calibration, observer=observer, strict=strict, verbose=verbose,
            each_batch=_report_batch, after_batch=partial(_send_early_look, parity_set, refs),
        )
        send_message({"simulated": pt2e.simulated_sqnr(converted, parity_set, refs)})
        return pt2e.lower_pt2e(converted, quantizer, example_inputs, strict=strict, verbose=verbose)


def _report_batch(index: int, total: int) -> None:
    from .budget import TimeBudget

    TimeBudget(None).step(_CALIBRATION_LABEL, index, total)  # reaches the parent (send_progress)


def _send_early_look(parity_set: list, refs: list, prepared: Any, done: int, total: int) -> None:
    """The early look's simulated SQNR (pt2e.early_look_sqnr), sent for the parent to judge."""
    from . import pt2e

    simulated = pt2e.early_look_sqnr(prepared, done, total, parity_set, refs)
    if simulated is not None:
        send_message({"early": simulated, "done": done, "total": total})


class PT2EBeside:
    """The PT2E child of one quantized export (``start_pt2e_beside``); a context manager that kills
    it on the way out unless its model was collected."""

    def __init__(self, run: BackgroundRun, calibration_size: int) -> None:
        self._run, self._total = run, calibration_size
        self._seen = 0  # calibration samples it reported done

    def __enter__(self) -> PT2EBeside:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()

    def cancel(self) -> None:
        self._run.cancel()

    def model(self, attempts: list, budget: Any, target: Any, *, compete: bool, stoppable: bool) -> Any:
        """Its lowered model (bytes), or selection.NotLowered once a simulated SQNR shows it cannot beat ``attempts``
        (with ``compete``); TimeBudgetSpent when ``budget`` runs out first (with ``stoppable``: an
        earlier backend has a model). Its own errors are raised as run_isolated raises them."""
        from .budget import TimeBudgetSpent

        deadline = budget.deadline if stoppable else float("inf")
        try:
            for message in self._run.events(deadline):
                settled = self._judge(message, attempts, budget, target) if compete else self._progress(message, budget)
                if settled is not None:
                    self.cancel()
                    return settled
        except TimeoutError:
            self.cancel()
            raise TimeBudgetSpent(self._unfinished()) from None
        return self._run.result()

    def _progress(self, message: Any, budget: Any) -> None:
        if isinstance(message, list) and len(message) == 3:  # [label, index, total] from _report_batch
            self._seen = int(message[1])
            if budget.on_progress is not None:
                budget.on_progress(*message)
        return None

    def _judge(self, message: Any, attempts: list, budget: Any, target: Any) -> Any:
        """candidates._early_look's and _pt2e_model's decisions (selection.pt2e_settled), on the
        simulated SQNRs the child sends."""
        from . import selection

        if not isinstance(message, dict):
            return self._progress(message, budget)
        if "early" in message:
            simulated, margin, part_way = message["early"], selection.EARLY_LOOK_MARGIN_DB, f"{message['done']} of {message['total']}"
        else:
            simulated, margin, part_way = message.get("simulated"), selection.LOWERING_MARGIN_DB, None
        settled = None if simulated is None else selection.pt2e_settled(simulated, attempts, margin, target)
        return None if settled is None else selection.NotLowered(simulated, settled[0], part_way, settled[1])

    def _unfinished(self) -> str:
        if self._seen + 1 < self._total:
            return f"the rest of PT2E's calibration ({self._seen} of {self._total} samples run, not lowered)"
        return "PT2E's lowering (calibrated, not lowered)"


def start_pt2e_beside(module: Any, example_inputs: tuple, mode: QuantizeMode, calibration: Any, *,
                      backend: QuantBackend, parity_samples: int, observer: str, strict: bool = False,
                      verbose: bool = False) -> PT2EBeside | None:
    """PT2E forked for an ``auto`` int8 export that will run both backends, when a core is idle;
    None otherwise (then quantize_model runs PT2E itself at its turn, as before)."""
    from ..quantize_modes import mode_spec
    from .pt2e import pt2e_supports

    # auto runs both backends exactly then (quantization.backends_for); a first-success mode
    # (dynamic-int8) runs PT2E only when the flatbuffer backend fails
    if QuantBackend(backend) != QuantBackend.AUTO or mode_spec(mode).first_success or not pt2e_supports(mode):
        return None
    if not _core_idle():
        return None
    from ..processes.library_output import quiet_libraries

    with quiet_libraries(verbose):  # their imports print load warnings
        # imported before the fork (1.9 s), not in the child: the float conversion needs litert-torch here anyway
        for name in ("litert_torch", "torchao.quantization.pt2e.quantize_pt2e"):
            importlib.import_module(name)
    parity_set = calibration.samples[: max(1, parity_samples)]
    run = start_isolated(
        _pt2e_in_child, module, example_inputs, mode, calibration, parity_set, observer, strict, verbose,
        stage=f"{mode.value} quantization (PT2E)", backend="PT2E (torchao and litert-torch)",
    )
    return None if run is None else PT2EBeside(run, len(calibration))
