"""`edge-export inspect` and `edge-export bench` through the CLI."""

from __future__ import annotations

import json


def test_inspect_json_and_table(built_artifacts, run_cli):
    out = built_artifacts.fp32
    res = run_cli("inspect", out, "--json")
    assert res.exit_code == 0, res.stderr
    info = json.loads(res.stdout)
    assert info["size_bytes"] == out.stat().st_size
    assert info["inputs"][0]["shape"] == [1, 3, 16, 16] and info["inputs"][0]["dtype"] == "float32"
    assert info["fully_integer"] is False and info["min_runtime_version"]
    ops = {o["opcode"]: o["count"] for o in info["operators"]} if isinstance(info["operators"], list) else info["operators"]
    assert ops["CONV_2D"] == 2
    table = run_cli("inspect", out)
    assert table.exit_code == 0 and "CONV_2D" in table.stdout and "Min runtime version" in table.stdout


def test_inspect_integer_artifacts(built_artifacts, run_cli):
    for out in (built_artifacts.int8, built_artifacts.edgetpu):
        res = run_cli("inspect", out, "--json")
        assert res.exit_code == 0, res.stderr
        info = json.loads(res.stdout)
        assert info["fully_integer"] is True, out


def test_bench_json(built_artifacts, run_cli):
    out = built_artifacts.fp32
    res = run_cli("bench", out, "--runs", "5", "--warmup", "1", "--json")
    assert res.exit_code == 0, res.stderr
    rep = json.loads(res.stdout)
    assert rep["runs"] == 5 and rep["threads"] == 1
    assert len(rep["results"]) == 2 and all(r["median_ms"] > 0 for r in rep["results"])


def test_inspect_and_bench_reject_bad_files(tmp_path, built_artifacts, run_cli):
    out = built_artifacts.fp32
    cut = tmp_path / "cut.tflite"
    cut.write_bytes(out.read_bytes()[:200])
    for cmd in ("inspect", "bench"):
        res = run_cli(cmd, cut)
        assert res.exit_code == 2, (cmd, res.stderr)
        assert "flatbuffer" in res.stderr and "Traceback" not in res.stderr
    res = run_cli("inspect", tmp_path / "missing.tflite")
    assert res.exit_code == 2 and "No such file" in res.stderr
