"""``python -m edge_export.flatbuffer --write-layout``: write the verifier's schema layout from the
installed ai-edge-litert (after changing its pin)."""

from .schema_layout import main

if __name__ == "__main__":
    raise SystemExit(main())
