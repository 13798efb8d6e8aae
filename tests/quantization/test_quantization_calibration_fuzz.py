"""Random and hostile calibration folders (tests/image_mutations.py: truncated, bit-flipped and
mislabelled PNG/JPEG files, headers declaring huge images, empty files, folders and FIFOs named like
images, links out of the folder, dangling links) end in samples or a documented exit 2: never
another exception (a traceback and exit 4 in the CLI), a crash, a hang or a huge allocation. Read in
a worker process under an address-space limit; benchmarks/calibration_fuzz.py runs thousands."""

from __future__ import annotations

import collections
import random

from calibration_fuzz_worker import run_worker
from image_mutations import make_case

CASES = 120


def test_mutated_calibration_folders_end_in_samples_or_exit_2(tmp_path):
    rng = random.Random(20261203)
    folders, kinds = [], {}
    for i in range(CASES):
        folder = tmp_path / f"case{i:03d}"
        kinds[str(folder)] = make_case(folder, tmp_path / "outside", rng)
        folders.append(str(folder))

    results, failures, peak_mib = run_worker(folders, ("--memory-mib", "1536"), timeout=120)

    assert not failures, "a worker died:\n" + "\n".join(failures)
    assert len(results) == CASES
    bugs = {f: (r, kinds[f]) for f, r in results.items() if r[0] not in ("ok", "exit2")}
    assert not bugs, bugs
    slow = {f: (r, kinds[f]) for f, r in results.items() if r[1] > 5.0}
    assert not slow, slow
    assert peak_mib < 1024, peak_mib  # resident size of the worker at its largest
    counts = collections.Counter(r[0] for r in results.values())
    # Meaningful only with both: folders that still calibrate and folders refused.
    assert counts["ok"] > CASES // 10 and counts["exit2"] > CASES // 3, counts
