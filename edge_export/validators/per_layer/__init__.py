"""Per-layer parity in three stages: ``capture`` (both sides' values), ``matching`` (which
flatbuffer tensor holds which module's output, one named rule per function) and ``measurement``
(SQNR and cosine per row, the first jump, the gate). The entry point is
``edge_export.validators.layers.per_layer_parity``."""
