"""The files written beside a model: metadata, test vectors, the tensor-name map, input and output names."""
