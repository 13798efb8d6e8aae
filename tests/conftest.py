"""Shared fixtures: run the real CLI in-process. Helpers live in cli_harness.py and model_zoo.py."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # cli_harness, model_zoo
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # testing_models, shared with benchmarks/

from cli_harness import CliResult  # noqa: E402


def pytest_configure(config) -> None:
    """Under pytest-xdist (-n) the workers share the cores, so torch's OpenMP threads in one worker
    wait while another worker runs: spinning, as libgomp's threads do by default, burns the core the
    other worker needs (tests/passes took 297 test-seconds spinning, 199 sleeping, on 2 cores). And
    with as many workers as cores, a second OpenMP thread per worker only takes turns with the other
    worker's. The workers, and the processes they start, inherit both before they import torch. A
    value already set is kept."""
    if getattr(config.option, "numprocesses", None):
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    _materialize_cia_ops_once_per_registration_set()


def _materialize_cia_ops_once_per_registration_set() -> None:
    """Test speed only, in the test processes (and the children they fork; an `edge-export` process a
    test starts runs torch as users do). Every torch.export decomposition collects the
    CompositeImplicitAutograd ops, and for each of the ~35 op namespaces torch first looks up every
    op the C++ dispatcher registers for that key (``_materialize_cpp_cia_ops``, 806 getattr chains
    into torch.ops), five decompositions per litert-torch conversion. The lookup only creates the
    torch.ops attributes: once done for a set of registrations, doing it again changes nothing. So it
    is skipped while the registrations are the same (a new custom op changes them, and it runs again).
    Measured: 13% off the export-kinds and quantization-CLI test files."""
    import torch
    from torch._export import utils

    materialize = getattr(utils, "_materialize_cpp_cia_ops", None)
    if materialize is None or getattr(materialize, "once_per_registration_set", False):
        return  # another torch, or already in place
    done: dict[str, tuple] = {}

    def once() -> None:
        registrations = tuple(torch._C._dispatch_get_registrations_for_dispatch_key("CompositeImplicitAutograd"))
        if done.get("registrations") != registrations:
            materialize()
            done["registrations"] = registrations

    once.once_per_registration_set = True  # type: ignore[attr-defined]
    utils._materialize_cpp_cia_ops = once


@pytest.fixture
def run_cli(capfd):
    """Run `edge-export ARGS` in this process (the real CLI entry point) and capture its output."""
    from edge_export.cli import main

    def run(*args: str) -> CliResult:
        capfd.readouterr()
        try:
            main([str(a) for a in args])
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
        out, err = capfd.readouterr()
        return CliResult(code, out, err)

    return run


@dataclass(frozen=True)
class Artifacts:
    """The small CNN (model_zoo.small_cnn, a 1x3x16x16 example seeded 0) as a .pt2 and exported
    through the product's own path (edge_export.export, parity checked, reports written beside each
    .tflite): fp32, int8 (flatbuffer backend) and Edge TPU-ready int8 (no compiler here)."""

    source: Path
    fp32: Path
    int8: Path
    edgetpu: Path

    def copy_to(self, folder: Path) -> Artifacts:
        """The same files in ``folder``, with their reports: a test may write beside them."""
        copies = {}
        for name in ("source", "fp32", "int8", "edgetpu"):
            original: Path = getattr(self, name)
            for sibling in original.parent.glob(f"{original.stem}.*"):
                shutil.copy2(sibling, folder / sibling.name)
            copies[name] = folder / original.name
        return Artifacts(**copies)


@pytest.fixture(scope="session")
def built_artifacts(tmp_path_factory) -> Artifacts:
    """Built once per test run: the inspect/bench/validate/report tests read these instead of
    each exporting the same tiny model again (an export with parity takes seconds here). Under
    pytest-xdist the first worker to ask builds them in the run's shared temporary folder and the
    others wait for it and read the same files (tests write only to copies, see ``artifacts``)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return _build_artifacts(tmp_path_factory.mktemp("artifacts"))
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # this run's folder, above every worker's own
    folder = shared / "artifacts"
    with FileLock(str(shared / "artifacts.lock")):
        if not (folder / "built").exists():
            folder.mkdir(exist_ok=True)
            _build_artifacts(folder)
            (folder / "built").touch()
    return _artifacts_in(folder)


def _artifacts_in(folder: Path) -> Artifacts:
    return Artifacts(folder / "cnn.pt2", folder / "cnn.tflite", folder / "cnn_int8.tflite", folder / "cnn_edgetpu_ready.tflite")


def _build_artifacts(folder: Path) -> Artifacts:
    import torch

    import edge_export
    from model_zoo import small_cnn

    source = folder / "cnn.pt2"
    example = torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    torch.export.save(torch.export.export(small_cnn(), (example,)), source)
    built = _artifacts_in(folder)
    for output, options in (
        (built.fp32, {}),
        (built.int8, {"quantize": "int8", "quant_backend": "flatbuffer"}),
        (built.edgetpu, {"target": "edgetpu", "quant_backend": "flatbuffer"}),
    ):
        result = edge_export.export(source, output=output, **options)
        assert result.exit_code == 0, output
    return built


@pytest.fixture
def artifacts(built_artifacts, tmp_path) -> Artifacts:
    """The session's artifacts copied into this test's tmp_path."""
    return built_artifacts.copy_to(tmp_path)
