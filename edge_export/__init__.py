"""edge-export: PyTorch to LiteRT with host-proven parity."""

__version__ = "0.1.0"
