"""PyTorch to LiteRT flatbuffer bytes, and the record of where each operator came from."""
