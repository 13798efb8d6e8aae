"""``python -m edge_export`` is the ``edge-export`` command (for an interpreter whose scripts folder is not on PATH)."""

from .cli import main

main()
