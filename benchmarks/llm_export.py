"""Language models (--task text-generation): edge-export against litert-torch's own export_hf on
the same tiny decoders (testing_language_models: Llama, Qwen3, Gemma 3; 2 layers, hidden 64,
vocabulary 192, prefill 32, cache 128), each run in its own process.

edge-export: one float export (litert-torch's generative export, through the TensorFlow-import
workaround), then every recipe (none, fp16, dynamic-int8, int4 blockwise 32) applied to that float
flatbuffer, packaged and checked: the seconds of each step, .tflite/.litertlm bytes, teacher-forced
max |dlogit|, mean KL and token agreement, LiteRT-LM greedy text against transformers' generate()
(3 prompts x 16 tokens) and LiteRT-LM CPU prefill/decode tokens/s (1 thread, timed by speed.measure_speed).
litert-torch: export_hf.export(folder, out, prefill_lengths=[32], cache_length=128) with its
default recipe (dynamic_wi8_afp32) and with quantization_recipe="none": seconds, .litertlm bytes,
and whether its .litertlm's greedy text equals transformers' (run by the same LiteRT-LM runtime).

    nice python benchmarks/llm_export.py [--families llama,qwen3,gemma3] [--out benchmarks/results/llm_export]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PREFILL, CACHE, NEW_TOKENS = 32, 128, 16
PROMPTS = ("the quick brown fox", "hello world, this is a tiny", "one two three four five six")
RECIPES = ("none", "fp16", "dynamic-int8", "int4")


def _peak_rss_mib() -> float:
    from edge_export.llm.measure import peak_rss_bytes

    return round(peak_rss_bytes() / (1 << 20), 1)


def _context(folder: Path, work: Path):
    from edge_export.llm.options import LanguageModelOptions
    from edge_export.llm.run import prepare, reference_context

    options = LanguageModelOptions(prefill_lengths=(PREFILL,), cache_length=CACHE, max_new_tokens=NEW_TOKENS, prompts=PROMPTS, block_size=32)
    src, tokenizer, template, meta = prepare(str(folder), work, PROMPTS, options)
    return reference_context(src, tokenizer, template, meta, PROMPTS, options, work)


def job_edge_export(folder: Path, work: Path) -> dict:
    from edge_export.llm.export import export_float_flatbuffer
    from edge_export.llm.run import check_recipe
    from edge_export.llm.speed import measure_speed, speed_prompts

    from edge_export.llm.litert_torch_compat import import_export_hf

    work.mkdir(parents=True, exist_ok=True)
    import_export_hf()  # imported before the clock starts, as for export_hf below
    start = time.perf_counter()
    float_tflite = export_float_flatbuffer(folder, (PREFILL,), CACHE).data
    export_s = time.perf_counter() - start
    start = time.perf_counter()
    ctx = _context(folder, work)
    reference_s = time.perf_counter() - start
    rows = []
    for recipe in RECIPES:
        start = time.perf_counter()
        result = check_recipe(recipe, float_tflite, ctx)
        a = result.attempt
        speed = measure_speed(str(result.package), speed_prompts(ctx.tokenizer, PROMPTS, PREFILL), NEW_TOKENS)
        rows.append({
            "recipe": recipe, "check_seconds": round(time.perf_counter() - start, 2), "tflite_bytes": len(result.tflite),
            "litertlm_bytes": len(result.litertlm), "max_abs_logit_diff": a.max_abs_logit_diff, "mean_kl": a.mean_kl,
            "token_agreement": a.token_agreement, "identical_texts": a.identical_texts, "passed": a.passed,
            "prefill_tokens_per_second": speed.prefill_tokens_per_second, "decode_tokens_per_second": speed.decode_tokens_per_second,
            "kv_cache_bytes": result.kv_cache_bytes,
        })
    return {"float_export_seconds": round(export_s, 2), "reference_seconds": round(reference_s, 2), "recipes": rows, "peak_rss_mib": _peak_rss_mib()}


def job_export_hf(folder: Path, work: Path, recipe: str | None) -> dict:
    from edge_export.llm.litert_torch_compat import import_export_hf
    from edge_export.llm.parity import runtime_texts
    from edge_export.llm.speed import measure_speed, speed_prompts

    export_hf = import_export_hf()
    work.mkdir(parents=True, exist_ok=True)
    out = work / "export_hf"
    kwargs = {} if recipe is None else {"quantization_recipe": recipe}
    start = time.perf_counter()
    export_hf.export(str(folder), str(out), prefill_lengths=[PREFILL], cache_length=CACHE, **kwargs)
    seconds = time.perf_counter() - start
    litertlm = next(out.rglob("*.litertlm"))
    ctx = _context(folder, work / "ctx")
    texts = runtime_texts(str(litertlm), PROMPTS, NEW_TOKENS)
    decode_tps = measure_speed(str(litertlm), speed_prompts(ctx.tokenizer, PROMPTS, PREFILL), NEW_TOKENS).decode_tokens_per_second
    identical = sum(t == r.text for t, r in zip(texts, ctx.refs))
    return {"recipe": recipe or "default (dynamic_wi8_afp32)", "seconds": round(seconds, 2), "litertlm_bytes": litertlm.stat().st_size,
            "identical_texts": identical, "prompts": len(PROMPTS), "decode_tokens_per_second": decode_tps, "peak_rss_mib": _peak_rss_mib()}


def _run_job(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, "--job", *args], capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: dict) -> str:
    """The Markdown tables of docs/BENCHMARKS.md from the JSON results."""
    lines = ["| family | tool | recipe | export s | check s | .tflite KiB | .litertlm KiB | max abs Δlogit | mean KL | token agreement | text = transformers | prefill tok/s | decode tok/s | peak RSS MiB |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for family, row in results.items():
        ee = row["edge_export"]
        for r in ee.get("recipes", []):
            lines.append(
                f"| {family} | edge-export | {r['recipe']} | {ee['float_export_seconds'] if r['recipe'] == 'none' else '(same)'} | {r['check_seconds']} | "
                f"{r['tflite_bytes'] / 1024:.1f} | {r['litertlm_bytes'] / 1024:.1f} | {r['max_abs_logit_diff']:.3g} | {r['mean_kl']:.3g} | "
                f"{r['token_agreement']:.3f} | {r['identical_texts']}/{len(PROMPTS)} | {r['prefill_tokens_per_second']:,.0f} | {r['decode_tokens_per_second']:,.0f} | {ee['peak_rss_mib']} |")
        for h in row["export_hf"]:
            if "error" in h:
                lines.append(f"| {family} | export_hf | error: {h['error']} |")
                continue
            lines.append(f"| {family} | litert-torch export_hf | {h['recipe']} | {h['seconds']} | – | – | {h['litertlm_bytes'] / 1024:.1f} | – | – | – | "
                         f"{h['identical_texts']}/{h['prompts']} | – | {h['decode_tokens_per_second']:,.0f} | {h['peak_rss_mib']} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default="llama,qwen3,gemma3")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "llm_export"))
    parser.add_argument("--job", nargs="+")
    parser.add_argument("--table", action="store_true", help="print the Markdown table of --out's JSON")
    args = parser.parse_args()
    if args.table:
        print(table(json.loads(Path(args.out + ".json").read_text())))
        return
    if args.job:  # a child: one tool on one model
        kind, folder, work = args.job[:3]
        result = job_edge_export(Path(folder), Path(work)) if kind == "edge-export" else job_export_hf(Path(folder), Path(work), None if args.job[3] == "default" else args.job[3])
        print(json.dumps(result))
        return
    from testing_language_models import build_decoder

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in args.families.split(","):
            folder = build_decoder(family, Path(tmp) / family)
            row = {"edge_export": _run_job(["edge-export", str(folder), str(Path(tmp) / f"{family}-ee")])}
            row["export_hf"] = [_run_job(["export-hf", str(folder), str(Path(tmp) / f"{family}-hf-{r}"), r]) for r in ("default", "none")]
            results[family] = row
            print(family, json.dumps(row), flush=True)
    Path(args.out + ".json").write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
