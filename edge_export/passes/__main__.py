"""``python -m edge_export.passes``: list the FX and flatbuffer passes."""

from __future__ import annotations

from . import describe_passes

if __name__ == "__main__":
    for kind, name, summary in describe_passes():
        print(f"{kind:<11} {name:<40} {summary}")
