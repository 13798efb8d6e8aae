"""Structure-aware fuzzing of the bounded tokenizer check (edge_export/llm/tokenizer_check.py):
mutants of a tiny model's tokenizer.json, tokenizer_config.json and chat template
(tests/llm/model_folder_mutations.py: JSON fields retyped or removed, bytes cut or changed, broken
and hostile templates, and with --hostile the looping and memory-hungry templates too), each
checked the way `edge-export MODEL --task text-generation` checks a folder: the confined, time- and
memory-limited child loads the tokenizer, renders the template and tokenizes the prompts; when it
accepts, this process loads the tokenizer again and reads its package metadata, as the export does.

    .venv/bin/python benchmarks/tokenizer_fuzz.py [--cases 1000] [--seed 3] [--time-limit 5] [--hostile]

A case fails the run when anything but an exit-2 EdgeExportError comes out, or when it takes longer
than its time limit plus 10 s (a hang the bound missed). Prints one row per mutation kind (accepted /
refused) and the totals; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "llm")]

_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _pipeline_check(folder: Path, check) -> str:
    """'accepted' or 'refused' as the export's first stage would end; raises on anything else."""
    from edge_export.errors import EdgeExportError
    from edge_export.llm.loading import load_tokenizer
    from edge_export.llm.packaging import package_metadata
    from edge_export.llm.tokenizer_check import check_tokenizer_bounded

    try:
        template = check_tokenizer_bounded(folder, check)
        tokenizer = load_tokenizer(folder)
        package_metadata(tokenizer, json.loads((folder / "config.json").read_text()), 128, template)
    except EdgeExportError as exc:
        if exc.exit_code != 2:
            raise
        return "refused"
    return "accepted"


def _case(i: int, kind: str, files: dict[str, bytes], base: Path, tmp: Path, check, limit: float) -> str | None:
    folder = tmp / f"case{i}"
    folder.mkdir()
    shutil.copy2(base / "config.json", folder / "config.json")
    for name, data in files.items():
        (folder / name).write_bytes(data)
    started = time.monotonic()
    try:
        outcome = _pipeline_check(folder, check)
    except Exception as exc:  # noqa: BLE001 - the failure this benchmark looks for
        outcome = f"FAILED {type(exc).__name__}: {exc}"[:300]
    if time.monotonic() - started > limit + 10:
        outcome = f"FAILED took {time.monotonic() - started:.1f} s"
    shutil.rmtree(folder, ignore_errors=True)
    return outcome


def _mutants(originals: dict[str, bytes], rng: random.Random, hostile: bool):
    from model_folder_mutations import TEMPLATE_MUTANTS, mutate_tokenizer_files

    if hostile and rng.random() < 0.05:
        name = rng.choice(("loop", "huge_string"))
        return f"template:{name}", {**originals, "chat_template.jinja": TEMPLATE_MUTANTS[name].encode()}
    return mutate_tokenizer_files(originals, rng)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=5.0)
    parser.add_argument("--hostile", action="store_true", help="also the looping and memory-hungry templates (each costs its limit)")
    args = parser.parse_args()
    os.environ["EDGE_EXPORT_TOKENIZER_TIME_LIMIT"] = str(args.time_limit)
    os.environ.setdefault("EDGE_EXPORT_TOKENIZER_MEMORY_LIMIT", "1024")
    from llm_settings import CACHE, NEW_TOKENS, PREFILL, PROMPTS
    from testing_language_models import build_decoder

    from edge_export.llm.options import LanguageModelOptions
    from edge_export.llm.run import check_prompt_lengths

    options = LanguageModelOptions(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS)

    def check(tokenizer):
        return check_prompt_lengths(tokenizer, PROMPTS, options)

    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures, started = [], time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        base = build_decoder("llama", Path(tmp) / "llama")
        originals = {name: (base / name).read_bytes() for name in _FILES}
        rng = random.Random(args.seed)
        for i in range(args.cases):
            kind, files = _mutants(originals, rng, args.hostile)
            outcome = _case(i, kind, files, base, Path(tmp), check, args.time_limit)
            rows[kind][outcome if outcome in ("accepted", "refused") else "failed"] += 1
            if outcome not in ("accepted", "refused"):
                failures.append((i, kind, outcome))
    print(f"{'mutation':32} {'accepted':>9} {'refused':>9} {'failed':>7}")
    for kind in sorted(rows):
        print(f"{kind:32} {rows[kind]['accepted']:9d} {rows[kind]['refused']:9d} {rows[kind]['failed']:7d}")
    total = sum(rows.values(), collections.Counter())
    print(f"{'total':32} {total['accepted']:9d} {total['refused']:9d} {total['failed']:7d}")
    print(f"{args.cases} cases (seed {args.seed}, time limit {args.time_limit:g} s) in {time.monotonic() - started:.1f} s")
    for failure in failures[:20]:
        print("FAILED case", *failure)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
