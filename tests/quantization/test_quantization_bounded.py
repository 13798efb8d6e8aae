"""Quantization that ends (issue 21): a float model that cannot become a valid, runnable flatbuffer
stops the export before any backend calibrates; NaN and Inf in rankings, SQNRs and costs never make
a search loop; ``--time-budget`` stops the whole stage, keeps the best model and says what was not
tried; long stages show their steps in a terminal and nothing more on pipes."""

from __future__ import annotations

import json
import math
import time

import pytest
import torch
from cli_harness import read_report, run_cli_in_pty, validate_report
from torch import nn

from edge_export import export
from edge_export.errors import ConversionError
from edge_export.quantization.budget import SLOW_STEP_ENV, TimeBudget

NAN, INF = math.nan, math.inf

pytestmark = pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")


# --- fail fast: the float model is checked once, before any backend --------------------------------


class HugePool(nn.Module):
    """A padding far larger than its input: litert-torch writes a PAD whose output
    (1 x 2216 x 2216 x 128, 2.5 GB) no LiteRT tensor can hold. (An average pool whose window covers
    its input, the first form of this model, is rewritten as a mean since issue 24.)"""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 128, 3, padding=1)
        self.pool = nn.ZeroPad2d(1100)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.conv(x)).flatten(1)


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.head = nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).mean(dim=(2, 3)))


@pytest.fixture
def backend_calls(monkeypatch):
    """The stages quantize_model runs in child processes (each backend's calibration and its
    parity run) and PT2E's calibration calls, recorded as they start."""
    import edge_export.quantization.candidates as candidates
    from edge_export.quantization import pt2e

    calls: list[str] = []
    real_isolated, real_pt2e = candidates.run_isolated, pt2e.calibrate_pt2e

    def isolated(fn, *args, stage, **kwargs):
        calls.append(stage)
        return real_isolated(fn, *args, stage=stage, **kwargs)

    def calibrate(*args, **kwargs):
        calls.append("pt2e calibration")
        return real_pt2e(*args, **kwargs)

    monkeypatch.setattr(candidates, "run_isolated", isolated)
    monkeypatch.setattr(pt2e, "calibrate_pt2e", calibrate)
    return calls


@pytest.mark.slow
def test_a_float_model_no_tensor_can_hold_stops_before_any_backend_calibrates(tmp_path, backend_calls):
    from edge_export.errors import EdgeExportError

    with pytest.raises(EdgeExportError) as caught:
        export(HugePool().eval(), example_inputs=(torch.randn(1, 3, 16, 16),), output=tmp_path / "pool.tflite", quantize="int8")
    message = str(caught.value)
    assert caught.value.exit_code == 3
    assert "2216, 2216" in message and "pool" in message  # the shape and the module it came from
    assert "truncated" not in message  # the converter wrote it: not a damaged file
    assert backend_calls == []
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_float_model_litert_cannot_run_stops_before_any_backend_calibrates(tmp_path, backend_calls, monkeypatch, run_cli):
    """The run half of the check, through the crash hook (a model that converts and verifies but
    whose run kills LiteRT): exit 3 with one paragraph, no backend started."""
    from edge_export.processes.isolation import CRASH_HOOK_ENV

    src = tmp_path / "net.pt2"
    example = (torch.randn(1, 3, 8, 8),)
    torch.export.save(torch.export.export(SmallNet().eval(), example), src)
    monkeypatch.setenv(CRASH_HOOK_ENV, "run of the float model")
    result = run_cli(src, "-o", tmp_path / "out" / "net.tflite", "--quantize", "int8")
    assert result.exit_code == 3, result.stderr
    assert "LiteRT cannot run the float model" in result.stderr and "No quantization backend was run" in result.stderr
    assert "Traceback" not in result.stderr
    assert backend_calls == []
    assert not (tmp_path / "out").exists()


# --- NaN and Inf in the rankings and searches ---------------------------------------------------------


def _layer(rank: int, op_index: int, sqnr_db: float):
    from edge_export.quantization.sensitivity import LayerSensitivity

    return LayerSensitivity(rank, op_index, "CONV_2D", f"t{op_index}", f"m{op_index}", "Conv2d", None, sqnr_db)


@pytest.mark.parametrize(
    "sqnrs",
    [
        [NAN, 12.0, 12.5, 30.0],  # a NaN anchor: looped forever before (no operator is near NaN)
        [12.0, NAN, 12.4, NAN, 30.0],
        [NAN, NAN, NAN],
        [-INF, 12.0, INF, NAN, INF],
    ],
)
def test_promotion_order_places_every_operator_once_whatever_the_sensitivities(sqnrs):
    from edge_export.quantization.mixed_precision import promotion_order

    ranking = [_layer(i + 1, 10 + i, s) for i, s in enumerate(sqnrs)]
    costs = {10 + i: c for i, c in enumerate([5.0, NAN, 1.0, INF, 2.0][: len(sqnrs)])}
    order = promotion_order(ranking, costs, band_db=1.0)
    assert sorted(layer.op_index for layer in order) == [layer.op_index for layer in ranking]
    # a NaN sensitivity is a band of its own: it goes after everything ranked above it (and
    # whatever their bands pulled ahead), never before it
    placed = [layer.op_index for layer in order]
    for position, layer in enumerate(ranking):
        if math.isnan(layer.sqnr_db):
            assert all(placed.index(x.op_index) < placed.index(layer.op_index) for x in ranking[:position])


def test_near_operators_still_share_a_band_beside_a_nan_one():
    from edge_export.quantization.mixed_precision import promotion_order

    ranking = [_layer(1, 1, NAN), _layer(2, 2, 12.0), _layer(3, 3, 12.5)]
    assert [x.op_index for x in promotion_order(ranking, {1: 9, 2: 5, 3: 1})] == [1, 3, 2]


def _attempt(backend: str, sqnr: float, integer: bool = True):
    from edge_export.quantization.selection import BackendAttempt

    return BackendAttempt(backend=backend, ok=True, fully_integer=integer, sqnr_db=sqnr, cosine=0.99)


@pytest.mark.parametrize(
    ("sqnrs", "kept"),
    [
        ((NAN, 25.0), 1),  # NaN ranks below every number
        ((25.0, NAN), 0),
        ((INF, 25.0), 0),  # round(inf) raised OverflowError before
        ((INF, INF), 0),  # equal: the first
        ((-INF, 25.0), 1),
        ((NAN, NAN), 0),
    ],
)
def test_choose_attempt_ranks_nan_and_inf(sqnrs, kept):
    from edge_export.quantization.selection import choose_attempt

    best, reason = choose_attempt([_attempt("flatbuffer", sqnrs[0]), _attempt("pt2e", sqnrs[1])], require_full_integer=False)
    assert best == kept and reason


def test_the_fully_integer_preference_survives_infinities():
    from edge_export.quantization.selection import choose_attempt

    best, _ = choose_attempt([_attempt("flatbuffer", INF, integer=False), _attempt("pt2e", INF)], require_full_integer=False)
    assert best == 1  # equal parity: the fully integer one
    best, _ = choose_attempt([_attempt("flatbuffer", INF, integer=False), _attempt("pt2e", 25.0)], require_full_integer=False)
    assert best == 0  # infinitely better is more than the preference's 1 dB


def test_a_nan_sqnr_never_meets_a_target_nor_settles_a_lowering():
    from edge_export.quantization.selection import ParityTarget, lowering_not_needed

    assert not ParityTarget(min_sqnr_db=20.0).met_by(_attempt("flatbuffer", NAN))
    assert ParityTarget(min_sqnr_db=20.0).met_by(_attempt("flatbuffer", INF))
    assert lowering_not_needed(10.0, [_attempt("flatbuffer", NAN)]) is None
    assert lowering_not_needed(NAN, [_attempt("flatbuffer", 30.0)]) is None  # unknown: lower and measure
    assert lowering_not_needed(10.0, [_attempt("flatbuffer", NAN), _attempt("flatbuffer", 30.0)]).sqnr_db == 30.0


def _check(sqnr: float, met: bool):
    from edge_export.quantization.mixed_precision import TargetCheck

    return TargetCheck(sqnr, 0.9, None, () if met else ("missed",))


@pytest.mark.parametrize("sqnr", [NAN, INF, -INF])
def test_the_prefix_search_is_bounded_whatever_the_candidates_read(sqnr):
    from edge_export.quantization.mixed_precision.prefix_search import search_prefixes as _search_prefixes
    from edge_export.quantization.promotion_steps import step_sizes as _groups

    measured: list[int] = []

    def measure(k: int):
        measured.append(k)
        return _check(sqnr, met=sqnr == INF and k >= 37)

    met_at, untried = _search_prefixes(measure, 100, TimeBudget(None), "float")
    assert untried is None
    assert len(measured) <= len(_groups(100)) + math.ceil(math.log2(100))
    assert met_at == (37 if sqnr == INF else None)


def test_a_spent_budget_stops_the_prefix_search_and_says_what_was_not_tried():
    from edge_export.quantization.mixed_precision.prefix_search import search_prefixes as _search_prefixes

    budget = TimeBudget(1e-9)
    time.sleep(0.001)
    met_at, untried = _search_prefixes(lambda k: pytest.fail("measured after the budget"), 50, budget, "int16")
    assert met_at is None and untried == "promoting more than 0 of 50 operators"
    assert budget.skipped == [untried]


def test_a_budget_spent_while_bisecting_keeps_the_prefix_that_met():
    from edge_export.quantization.mixed_precision.prefix_search import search_prefixes as _search_prefixes

    budget = TimeBudget(3600)

    def measure(k: int):
        if k == 14:  # the group that meets (8 single steps, then 2, 4): the budget ends here
            budget.started -= 7200
        return _check(30.0, met=k >= 12)

    met_at, untried = _search_prefixes(measure, 40, budget, "float")
    assert met_at == 14 and "fewer promotions than 14" in untried


class VarianceNet(nn.Module):
    """A variance computed as E[y^2] - E[y]^2 of values near 10: the difference is small beside
    the means, so quantizing the mean of y alone makes it negative and its square root NaN."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)
        with torch.no_grad():
            self.fc.bias += 10.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        var = (y * y).mean(-1, keepdim=True) - y.mean(-1, keepdim=True) ** 2
        return self.head(y * torch.sqrt(var))


@pytest.mark.slow
def test_an_operator_whose_quantization_gives_nan_is_named_and_the_search_ends(tmp_path):
    result = export(
        VarianceNet().eval(), example_inputs=(torch.randn(1, 16),), output=tmp_path / "var.tflite",
        quantize="int8", quant_backend="flatbuffer", min_sqnr=30.0, mixed_precision="auto",
    )
    report = validate_report(json.loads(result.report_json_path.read_text()))
    assert result.exit_code == report["exit_code"]
    ranking = report["sensitivity"]["layers"]
    broken = [row for row in ranking if row["sqnr_db"] is None]  # NaN: null in the JSON
    assert broken and ranking[: len(broken)] == broken  # ranked first
    for row in broken:
        assert any(note.startswith(f"{row['opcode']} #{row['op_index']}") and "NaN" in note for note in report["sensitivity"]["notes"])
    markdown = result.report_md_path.read_text().replace("\\", "")  # Markdown escapes "#" and "()"
    assert f"{broken[0]['opcode']} #{broken[0]['op_index']}" in markdown and "not a number (NaN)" in markdown
    mixed = report["mixed_precision"]
    assert mixed["promoted"] and mixed["promoted"][0]["op_index"] == broken[0]["op_index"]


# --- the time budget and the progress line ------------------------------------------------------------


class OutlierChannelNet(nn.Module):
    """conv1 writes one channel 3000x larger than the others: int8 misses 30 dB and mixed precision
    has a search to run (as in test_quantization_mixed_precision.py)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.conv3 = nn.Conv2d(16, 16, 3, padding=1)
        self.head = nn.Linear(16, 10)
        with torch.no_grad():
            self.conv1.weight[0] *= 3000
            self.conv1.bias[0] *= 3000
            self.conv2.weight[:, 0] /= 3000

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(x))
        x = torch.relu(self.conv3(x))
        return self.head(x.mean(dim=(2, 3)))


# The stage needs at least 1 + 5 + 1 steps (quantize, a ranking step per operator, a search step):
# a budget of half that is spent whatever the machine's speed (8 s was a race with the search's end).
STEP_S, BUDGET_S = 1.0, 4.0


@pytest.mark.slow
def test_a_spent_budget_keeps_the_best_model_exits_by_parity_and_lists_what_was_skipped(tmp_path, monkeypatch):
    monkeypatch.setenv(SLOW_STEP_ENV, str(STEP_S))  # every step takes at least STEP_S
    steps: list[tuple[str, int, int]] = []
    result = export(
        OutlierChannelNet().eval(), example_inputs=(torch.randn(1, 3, 16, 16),), output=tmp_path / "net.tflite",
        quantize="int8", quant_backend="flatbuffer", min_sqnr=30.0, sensitivity=True, time_budget=BUDGET_S,
        on_progress=lambda label, i, n: steps.append((label, i, n)),
    )
    report = validate_report(json.loads(result.report_json_path.read_text()))
    budget = report["quantization"]["time_budget"]
    assert budget["seconds"] == BUDGET_S and budget["exhausted"] and budget["skipped"]
    # nothing starts once the budget is spent: at most one step ran past it
    assert len(steps) <= BUDGET_S / STEP_S + 1
    # the quantize stage fits; the ranking (a step per operator) and the search (a step per candidate) do not
    assert any("operators" in what or "sensitivity" in what for what in budget["skipped"]), budget["skipped"]
    # the best model found is the one written, and the exit code is its parity's
    assert result.tflite_path.exists()
    assert result.exit_code == report["exit_code"] == (0 if report["validation"]["status"] == "passed" else 1)
    markdown = result.report_md_path.read_text().replace("\\", "")  # Markdown escapes "(" and "."
    assert f"time budget {BUDGET_S:g} s" in markdown and f"not tried: {budget['skipped'][0]}" in markdown
    mixed = report.get("mixed_precision")
    if mixed is not None and mixed["steps"]:
        assert mixed["sqnr_db"] == max(step["sqnr_db"] for step in mixed["steps"]) or mixed["met"]


@pytest.fixture(scope="module")
def slow_search_source(tmp_path_factory):
    root = tmp_path_factory.mktemp("progress")
    torch.export.save(torch.export.export(OutlierChannelNet().eval(), (torch.randn(1, 3, 16, 16),)), root / "net.pt2")
    return root


CLI_ARGS = ("--quantize", "int8", "--quant-backend", "flatbuffer", "--min-sqnr", "30", "--time-budget", "120", "--no-latency")


@pytest.mark.slow
def test_a_terminal_sees_the_steps_of_the_search(slow_search_source, monkeypatch):
    monkeypatch.setenv(SLOW_STEP_ENV, "0.3")  # each step long enough for the spinner to draw it
    result = run_cli_in_pty("net.pt2", "-o", "tty/net.tflite", *CLI_ARGS, cwd=slow_search_source)
    report = read_report(slow_search_source / "tty" / "net.tflite")
    assert result.exit_code == report["exit_code"]
    assert "Ranking operators by sensitivity: step 1 of " in result.output
    assert " elapsed" in result.output and " left" in result.output  # an estimate once a step is done


@pytest.mark.slow
def test_a_pipe_gets_the_stage_lines_and_no_progress(slow_search_source, monkeypatch, run_cli):
    """In this process: run_cli's captured streams are files, no terminal, as a pipe (all the stage
    display asks: console.is_terminal), so only the terminal's test needs a process of its own."""
    monkeypatch.setenv(SLOW_STEP_ENV, "0.3")
    result = run_cli(slow_search_source / "net.pt2", "-o", slow_search_source / "pipe" / "net.tflite", *CLI_ARGS)
    report = read_report(slow_search_source / "pipe" / "net.tflite")
    assert result.exit_code == report["exit_code"]
    assert "• Quantizing (int8" in result.stderr
    assert "step 1 of" not in result.stderr + result.stdout and "elapsed" not in result.stderr + result.stdout
