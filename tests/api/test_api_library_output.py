"""The CLI, not the library, owns stdout and stderr (issue 9, item 5): a Python caller's streams are
left alone unless it asks for ``quiet_libraries=True``."""

from __future__ import annotations

import torch

import edge_export


class _Chatty(torch.nn.Module):
    """Prints from forward(), as libraries and user code do; torch.export runs forward() to trace."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        print("chatter from forward")
        return self.fc(x)


def test_python_api_leaves_streams_alone_unless_asked(tmp_path, capfd):
    torch.manual_seed(0)
    example = (torch.randn(1, 4),)
    capfd.readouterr()
    edge_export.export(_Chatty().eval(), example_inputs=example, output=tmp_path / "a.tflite", validate=False)
    out, _ = capfd.readouterr()
    assert "chatter from forward" in out

    result = edge_export.export(
        _Chatty().eval(), example_inputs=example, output=tmp_path / "b.tflite", validate=False, quiet_libraries=True
    )
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
    assert result.tflite_path.is_file()
