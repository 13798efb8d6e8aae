"""What leaves the process: atomic artifact writes, the sanitisers for text a model supplies, JSON values, the terminal."""
