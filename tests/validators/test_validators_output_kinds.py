"""Output kinds: every way a kind is decided, and the checks each kind gets, on arrays whose answers
are known (no model is converted here)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edge_export.config import DEFAULT_THRESHOLDS, OutputKind, QuantizeMode, Thresholds
from edge_export.errors import UsageError
from edge_export.validators.output_kinds import (
    KindDecision,
    KindSource,
    OutputIdentity,
    kind_from_name,
    parse_labels,
    parse_output_kinds,
    resolve_output_kinds,
)
from edge_export.validators.parity import compare_outputs
from edge_export.output.serialize import to_json_value

C, E, R = OutputKind.CLASSIFICATION, OutputKind.EMBEDDING, OutputKind.REGRESSION


def _outs(*names_shapes):
    return [OutputIdentity(i, names, shape) for i, (names, shape) in enumerate(names_shapes)]


def _decide(outputs, kinds=(), labels=()):
    return [(d.kind, d.source) for d in resolve_output_kinds(outputs, parse_output_kinds(kinds), parse_labels(labels))]


# ---- how a kind is decided ---------------------------------------------------------------------


def test_names_say_classification_or_embedding_and_nothing_else_does():
    for name in ("logits", "Scores", "probs", "probabilities", "class_logits", "start_logits"):
        assert kind_from_name(name) is C, name
    for name in ("embedding", "embeddings", "pooler_output", "last_hidden_state", "sentence_embedding", "features", "image_embeds"):
        assert kind_from_name(name) is E, name
    for name in ("output_0", "boxes", "depth", "", None):
        assert kind_from_name(name) is None, name


def test_default_is_regression_whatever_the_shape():
    # [1, 1000] is exactly the shape of class logits, and of an embedding: no guess from it
    assert _decide(_outs((("output_0",), (1, 1000)))) == [(R, KindSource.DEFAULT)]


def test_name_decides_from_the_report_name_or_the_pytorch_key():
    outs = _outs((("logits",), (1, 10)), (("output_1", "pooler_output"), (1, 64)), (("output_2",), (1, 3)))
    assert _decide(outs) == [(C, KindSource.NAME), (E, KindSource.NAME), (R, KindSource.DEFAULT)]


def test_option_for_all_then_named_option_overrides_it_and_beats_the_name():
    outs = _outs((("logits",), (1, 10)), (("output_1",), (1, 64)))
    assert _decide(outs, "embedding") == [(E, KindSource.OPTION), (E, KindSource.OPTION)]
    assert _decide(outs, ["embedding", "output_1=regression"]) == [(E, KindSource.OPTION), (R, KindSource.OPTION)]
    assert _decide(outs, {"output_1": "classification"}) == [(C, KindSource.NAME), (C, KindSource.OPTION)]


def test_labels_mark_a_classifier_and_must_match_its_classes(tmp_path):
    ten = tmp_path / "ten.txt"
    ten.write_text("\n".join(f"class {i}" for i in range(10)) + "\n\n")  # a trailing blank line is fine
    single = _outs((("output_0",), (1, 10)))
    (decision,) = resolve_output_kinds(single, (), parse_labels(str(ten)))
    assert (decision.kind, decision.source, decision.labels_count) == (C, KindSource.LABELS, 10)
    assert to_json_value(decision)["labels"] == {"file": str(ten), "count": 10}
    two = _outs((("output_0",), (1, 10)), (("output_1",), (1, 4)))
    assert _decide(two, labels=f"output_0={ten}") == [(C, KindSource.LABELS), (R, KindSource.DEFAULT)]
    # an option still comes first: the labels are checked against it, not deciding
    assert _decide(single, "classification", str(ten)) == [(C, KindSource.OPTION)]
    # unnamed labels go to the one output a name or option already makes a classifier
    named = _outs((("logits",), (1, 10)), (("embedding",), (1, 4)))
    assert _decide(named, labels=str(ten)) == [(C, KindSource.NAME), (E, KindSource.NAME)]


@pytest.mark.parametrize(
    "outputs, kinds, labels_text, message",
    [
        (((("output_0",), (1, 10)),), (), "a\nb\nc\n", "has 3 labels, but the output 'output_0' has 10 classes"),
        (((("output_0",), (1, 10)),), (), "\n \n", "holds no labels"),
        (((("embedding",), (1, 10)),), (), "x\n" * 10, "its name makes an embedding"),
        (((("output_0",), (1, 10)),), "regression", "x\n" * 10, "--output-kind makes a regression"),
        (((("output_0",), (1, 10)), (("output_1",), (1, 10))), (), "x\n" * 10, "does not say which output"),
    ],
)
def test_bad_labels_are_usage_errors(tmp_path, outputs, kinds, labels_text, message):
    path = tmp_path / "labels.txt"
    path.write_text(labels_text)
    with pytest.raises(UsageError, match=message):
        resolve_output_kinds(_outs(*outputs), parse_output_kinds(kinds), parse_labels(str(path)))


def test_bad_kind_options_are_usage_errors(tmp_path):
    outs = _outs((("output_0",), (1, 10)))
    with pytest.raises(UsageError, match="'logits' is not a kind of output"):
        parse_output_kinds("logits")
    with pytest.raises(UsageError, match="'y=vector': 'vector' is not a kind"):
        parse_output_kinds("y=vector")
    with pytest.raises(UsageError, match="more than one kind for all"):
        parse_output_kinds(["embedding", "regression"])
    with pytest.raises(UsageError, match="twice"):
        parse_output_kinds(["a=embedding", "a=regression"])
    with pytest.raises(UsageError, match="the model's outputs are: output_0"):
        resolve_output_kinds(outs, parse_output_kinds("logits=classification"))
    with pytest.raises(UsageError, match="No such labels file"):
        resolve_output_kinds(outs, (), parse_labels(str(tmp_path / "missing.txt")))


def test_export_options_parse_and_check_kind_options_early(tmp_path):
    from edge_export.api import ExportOptions
    from edge_export.stages.paths import check_side_outputs as _check_side_outputs

    options = ExportOptions.from_keywords(output_kinds=("embedding", "logits=classification"), min_top5=0.9)
    assert options.parity.output_kinds == ((None, E), ("logits", C))
    assert options.thresholds().min_top5 == 0.9
    with pytest.raises(UsageError, match="--min-neighbour-agreement 2"):
        ExportOptions.from_keywords(min_neighbour_agreement=2)
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(UsageError, match="holds no labels"):
        _check_side_outputs(ExportOptions.from_keywords(labels=str(empty)))


# ---- the checks each kind gets -----------------------------------------------------------------

INT8 = DEFAULT_THRESHOLDS[QuantizeMode.INT8]


def _compare(ref, out, kind, thresholds=INT8, scale=None):
    """One output over len(ref) samples."""
    decision = KindDecision(kind, KindSource.OPTION)
    return compare_outputs(
        [[r] for r in ref], [[o] for o in out], names=["y"], thresholds=thresholds, runtime="t",
        output_scales=[scale], kinds=[decision],
    )


def _checks(result):
    return {c.metric: c for c in result.outputs[0].checks}


def test_classification_gets_top1_and_top5_with_ten_classes():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((8, 1, 10))
    out = ref.copy()
    out[:4, 0, :] = ref[:4, 0, ::-1]  # 4 of 8 samples now rank classes backwards
    res = _compare(ref, out, C)
    checks = _checks(res)
    assert set(checks) == {"sqnr_db", "cosine", "top1_agreement", "top5_agreement"}
    assert checks["top1_agreement"].value == pytest.approx(0.5) and checks["top1_agreement"].passed is False
    assert to_json_value(res.outputs[0])["kind"] == "classification"
    # fewer than 10 classes: no top-5, and it is not applicable (null) rather than not computable
    small = _compare(ref[:, :, :4], ref[:, :, :4], C)
    assert "top5_agreement" not in _checks(small) and small.outputs[0].metrics["top5_agreement"] is None
    assert small.passed and small.outputs[0].not_computable == {}


def test_the_same_array_as_regression_gets_no_top1():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((8, 1, 10))
    res = _compare(ref, ref + 0.001 * rng.standard_normal(ref.shape), R)
    assert set(_checks(res)) == {"sqnr_db"}
    assert res.outputs[0].metrics["top1_agreement"] is None and res.passed


def test_regression_gates_rel_l2_and_error_steps_when_asked():
    ref = np.array([[[3.0, 4.0]]])
    out = np.array([[[3.0, 4.5]]])  # rel L2 0.1, SQNR 20 dB, max error 0.5 = 2 steps of 0.25
    t = Thresholds(min_sqnr_db=19.0, max_rel_l2=0.05, max_error_steps=4)
    checks = _checks(_compare(ref, out, R, t, scale=0.25))
    assert checks["relative_l2_error"].value == pytest.approx(0.1) and checks["relative_l2_error"].passed is False
    assert checks["max_abs_error_steps"].value == pytest.approx(2.0) and checks["max_abs_error_steps"].passed
    assert checks["sqnr_db"].passed and "cosine" not in checks


def test_embedding_gets_worst_sample_cosine_and_neighbours_not_top1():
    rng = np.random.default_rng(1)
    ref = rng.standard_normal((8, 1, 64))
    good = _compare(ref, ref + 0.01 * rng.standard_normal(ref.shape), E)
    assert set(_checks(good)) == {"worst_sample_cosine", "neighbour_agreement"} and good.passed
    # one sample pointing elsewhere: the worst-sample cosine catches it
    bad_out = ref.copy()
    bad_out[3] = rng.standard_normal((1, 64))
    bad = _compare(ref, bad_out, E)
    assert bad.outputs[0].metrics["cosine"] > 0.8  # over all samples it looks fine
    assert _checks(bad)["worst_sample_cosine"].passed is False
    assert bad.worst().failed_checks[0] == "worst_sample_cosine" and bad.worst().kind == "embedding"


def test_one_sample_gives_no_neighbour_agreement_and_is_not_counted():
    ref = np.ones((1, 1, 8))
    res = _compare(ref, ref, E)
    check = _checks(res)["neighbour_agreement"]
    assert check.value is None and check.passed is None and "at least 3" in check.reason
    assert res.passed  # the worst-sample cosine passed; the missing metric is not a failure
    out = to_json_value(res.outputs[0])
    assert out["metrics"]["neighbour_agreement"] is None and "at least 3" in out["not_computable"]["neighbour_agreement"]
    assert any("neighbour_agreement not computable" in n for n in res.notes)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("kind", [C, E, R])
def test_nan_or_inf_fails_and_reports_no_number(bad, kind):
    ref = np.random.default_rng(2).standard_normal((4, 1, 10))
    out = ref.copy()
    out[2, 0, 5] = bad
    res = _compare(ref, out, kind, DEFAULT_THRESHOLDS[QuantizeMode.NONE])
    o = res.outputs[0]
    assert not res.passed and "LiteRT output contains NaN or Inf (1 of 40 values)" in o.error
    assert all(v is None for v in o.metrics.values())
    assert o.checks and all(c.passed is False and c.value is None for c in o.checks)
    text = json.dumps(to_json_value(res), allow_nan=False)  # no NaN or Infinity numbers anywhere
    assert '"sqnr_db": 200' not in text
    assert res.worst().sqnr_db is None


def test_nan_in_pytorch_output_fails_too():
    ref = np.ones((2, 1, 4))
    ref[0, 0, 0] = np.nan
    res = _compare(ref, np.ones((2, 1, 4)), R)
    assert not res.passed and "PyTorch output contains NaN" in res.outputs[0].error


def test_thresholds_per_kind():
    t = DEFAULT_THRESHOLDS[QuantizeMode.DYNAMIC_INT8]
    assert t.for_kind(C) == {"min_sqnr_db": 20.0, "min_cosine": 0.99, "min_top1": 0.75, "min_top5": 0.85, "min_expected_top1": 0.95}
    assert t.for_kind(E) == {"min_cosine": 0.99, "min_neighbour_agreement": 0.75}
    assert t.for_kind(R) == {"min_sqnr_db": 20.0}
    assert DEFAULT_THRESHOLDS[QuantizeMode.NONE].for_kind(R) == {"atol": 1e-4, "atol_relative": 2e-3, "min_sqnr_db": 60.0}


# ---- baseline and renderers use the same kinds ---------------------------------------------------


def _earlier(outputs):
    """A baseline: an earlier report's JSON."""
    return {"validation": {"status": "passed", "outputs": outputs}}


def _now(kind, metrics, not_computable=None):
    """This run's typed report, with one output ``e``."""
    from report_fixtures import report_with_outputs

    from edge_export.validators.parity import OutputParity

    output = OutputParity(0, "e", (4, 8), metrics, (), decision=KindDecision(kind, KindSource.OPTION), not_computable=not_computable or {})
    return report_with_outputs(output)


def test_baseline_flags_a_changed_kind_a_lost_metric_and_a_neighbour_drop():
    from edge_export.reports.baseline import compare_with_baseline

    base = {"name": "e", "kind": "embedding", "passed": True, "metrics": {"neighbour_agreement": 1.0, "worst_sample_cosine": 0.999}}
    same = _now(E, dict(base["metrics"]))
    assert compare_with_baseline(same, _earlier([base])) == []
    worse = _now(E, {"neighbour_agreement": 0.5, "worst_sample_cosine": 0.999})
    assert [r.metric for r in compare_with_baseline(worse, _earlier([base]))] == ["neighbour_agreement"]
    lost = _now(E, {"neighbour_agreement": None, "worst_sample_cosine": 0.999}, {"neighbour_agreement": "1 embedding vector"})
    (reg,) = compare_with_baseline(lost, _earlier([base]))
    assert reg.metric == "neighbour_agreement" and "cannot be computed now" in reg.message
    changed = _now(C, dict(base["metrics"]))
    (reg,) = compare_with_baseline(changed, _earlier([base]))
    assert reg.metric == "kind" and "--output-kind" in reg.message
    # a baseline written before kinds existed is compared metric by metric
    assert compare_with_baseline(same, _earlier([{k: v for k, v in base.items() if k != "kind"}])) == []


def test_markdown_and_junit_show_the_kind_and_what_was_not_computable():
    import dataclasses

    from report_fixtures import full_report

    from edge_export.reports.junit import render_junit
    from edge_export.reports.markdown import render_markdown

    ref = np.ones((1, 1, 8))
    report = dataclasses.replace(full_report(), validation=_compare(ref, ref, E), baseline=None, per_layer=None)
    md = render_markdown(report)
    assert "| <code>y</code> | embedding (option) | 1×8 |" in md
    # the note names the output, so it is Markdown-escaped like every model-supplied text
    assert "| n/c |" in md and "- y\\: neighbour\\_agreement not computable \\(1 embedding vector" in md
    assert "Thresholds (embedding): worst-sample cosine ≥ 0.99, neighbour agreement ≥ 0.75" in md
    xml = render_junit(report)
    assert 'name="output 0 y (embedding)"' in xml and "kind: embedding (decided by option)" in xml
    assert "neighbour_agreement: not computable" in xml


def test_pytorch_side_output_names_come_from_dict_keys_and_attributes():
    from collections import namedtuple

    import torch

    from edge_export.stages.load import output_keys as _output_keys

    t = torch.zeros(1)
    Out = namedtuple("Out", ["logits", "pooler_output"])
    assert _output_keys({"logits": t, "embedding": t}) == ["logits", "embedding"]
    assert _output_keys(Out(t, t)) == ["logits", "pooler_output"]
    assert _output_keys((t, [t])) == [None, None]
    assert _output_keys(t) == [None]
