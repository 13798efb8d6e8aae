"""The shell every run has, written once: export, validate, validate --test-vectors and the
language-model task all use it.

    plan:     every output path, checked apart from every input before any work
    folders:  the output folders made as they are needed, and removed again when the run fails
    body:     the run's stages, in a confined child when the model is an untrusted archive, with
              the libraries' chatter captured; the artifacts it returns may go only where planned
    commit:   every artifact written together, or none (write.write_run, atomic_files.ArtifactSet)

A failed or interrupted run leaves nothing behind: no artifact, no folder it made.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..output.atomic_files import check_artifact_paths, check_outputs_apart, check_writable_folder, remove_created_folders

Labelled = Sequence[tuple[str, Path]]  # (what the user calls it, its path): "--junit", "the model"


@dataclass
class RunShell:
    """One run's outputs and the folders it made on the way."""

    outputs: list[tuple[str, Path]]
    created: list[Path] = field(default_factory=list)

    def make_folders(self, *paths: Path | str) -> None:
        """Each path's folder exists and is writable (made if missing: undone if the run fails)."""
        for path in paths:
            check_writable_folder(Path(path), self.created)

    def run(
        self, model: Any, trust_pickle: bool, show_libraries: bool, clock: Any, body: Callable[..., Any], args: tuple,
        commit: Callable[[Any, list], Any], may_write: Labelled | None = None,
    ) -> Any:
        """``body(*args)`` -> (report, files), then ``commit(report, files)``: the body confined
        when ``model`` is an untrusted archive, the libraries' output captured unless
        ``show_libraries``; each file the body returns must be one of ``may_write`` (default: every
        planned output), else nothing is written."""
        from ..loading.sources import needs_confinement
        from ..processes.library_output import quiet_libraries
        from ..processes.sandbox import run_for_model
        from ..reports.model import RunReport

        with quiet_libraries(show_libraries):
            report, files = run_for_model(needs_confinement(model, trust_pickle), clock, body, *args, report_type=RunReport)
            check_artifact_paths(files, self.outputs if may_write is None else may_write)
            return commit(report, files)


@contextmanager
def run_shell(outputs: Labelled, inputs: Labelled) -> Iterator[RunShell]:
    """Plan the run's outputs against its inputs (a clash is a UsageError before any work), and
    undo the folders it made when the body fails."""
    check_outputs_apart(list(outputs), list(inputs))
    shell = RunShell(list(outputs))
    try:
        yield shell
    except BaseException:
        remove_created_folders(shell.created)
        raise
