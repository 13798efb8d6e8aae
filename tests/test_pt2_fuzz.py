"""A short run of the .pt2 fuzzer (benchmarks/pt2_fuzz.py; the 2,000-case run is in BENCHMARKS):
every mutation kind once through the real CLI, none running code, hanging or exiting 4."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.hostile  # untrusted input: in the default tier even where slow

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def clean_archive(tmp_path_factory) -> Path:
    """The archive both tests mutate, built here: the fuzzer need not start another torch process for it."""
    import hostile_archives

    return hostile_archives.build_clean(tmp_path_factory.mktemp("pt2-clean"))


@pytest.mark.slow
def test_short_fuzz_run_has_no_failures(clean_archive):
    command = [sys.executable, str(REPO / "benchmarks" / "pt2_fuzz.py"), "--cases", "9", "--seed", "3", "--timeout", "120"]
    proc = subprocess.run([*command, "--clean", str(clean_archive)], capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "9 cases" in proc.stdout and "failures: 0" in proc.stdout
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| mutation")]
    assert len(rows) == 9  # every mutation kind ran
    assert "exit 2" in proc.stdout  # refusals happened: the mutations reach the checks


def test_mutations_change_the_archive(clean_archive, tmp_path):
    import random

    import hostile_archives
    import pt2_mutations

    entries = hostile_archives.members(clean_archive)
    rng = random.Random(0)
    for kind, mutate in pt2_mutations.MUTATIONS.items():
        changed = sum(mutate(entries, rng, tmp_path / "m") != entries for _ in range(5))
        assert changed >= 3, kind
