"""diagnosis.locate_failure on LiteRT converter-pass errors: the MLIR location is the source line,
the text after "error:" the reason, and a standard-library frame is never "where it failed"."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

from edge_export.conversion.litert import _hint_for
from edge_export.conversion.diagnosis import locate_failure


@contextlib.contextmanager
def _library_context():
    yield


def _raised_in_a_standard_library_wrapper(message: str) -> BaseException:
    @contextlib.contextmanager
    def wrapper():
        yield

    try:
        with wrapper():
            raise ValueError(message)
    except ValueError as exc:
        return exc
    raise AssertionError("not raised")


def test_a_converter_pass_error_names_the_source_line_and_the_reason(tmp_path):
    source = tmp_path / "modeling_thing.py"
    source.write_text("def f(x):\n    return (x[:, 0] + x[:, 1]) / 2\n")
    path = "/very/long/site-packages/transformers/models/" * 6 + "modeling_thing.py"
    message = (
        f"Failed to run converter passes: {path}:2:0: error: 'tfl.reshape' op quantization parameters "
        "violate the same scale constraint: !quant.uniform<i8:f32, 0.02:-7> vs. !quant.uniform<i8:f32, 0.04:-7>"
    )
    loc = locate_failure(_raised_in_a_standard_library_wrapper(message))
    assert loc.source == "modeling_thing.py:2"
    assert loc.reason.startswith("LiteRT's converter: 'tfl.reshape' op quantization parameters violate the same scale")
    assert "0.04:-7>" in loc.reason  # the path no longer eats the 300 characters
    assert loc.code is None  # that path does not exist here

    hint = _hint_for(loc, tracing=False)
    assert "converter passes refused" in hint and "no LiteRT lowering" not in hint

    # the file exists, but a path in a message can come from a model's metadata: it is not read
    real = message.replace(path, str(source))
    loc = locate_failure(_raised_in_a_standard_library_wrapper(real))
    assert loc.source == "modeling_thing.py:2" and loc.code is None

    # the code comes from the traced graph's own stack traces
    trace = f'File "{source}", line 2, in f\n    return (x[:, 0] + x[:, 1]) / 2\n'
    node = SimpleNamespace(op="placeholder", meta={"stack_trace": trace})
    loc = locate_failure(_raised_in_a_standard_library_wrapper(real), SimpleNamespace(graph=SimpleNamespace(nodes=[node])))
    assert loc.source == "modeling_thing.py:2" and loc.code == "return (x[:, 0] + x[:, 1]) / 2"


def test_a_standard_library_frame_is_not_the_failing_source():
    """litert-torch calls its passes through a contextlib decorator: the innermost frame outside the
    installed packages was contextlib.py:81, and the error said the conversion failed there."""
    namespace: dict = {}
    exec(compile("def passes(message):\n    raise ValueError(message)\n", "/env/site-packages/lib/core.py", "exec"), namespace)
    decorated = _library_context()(namespace["passes"])
    try:
        decorated("Failed to run converter passes: something")
    except ValueError as exc:
        loc = locate_failure(exc)
    assert loc.source is not None and loc.source.startswith("test_diagnosis.py:"), loc.source
    assert loc.reason == "Failed to run converter passes: something"
