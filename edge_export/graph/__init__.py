"""What the exported graph records, below the passes that read and write it and the conversion
that runs them: where each node and operator came from in the user's model (``provenance``), the
channels-last plan of the inputs and outputs (``channels_last``), and the rewrites applied
(``applied_rewrites``, the report's record)."""
