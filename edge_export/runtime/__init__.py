"""Running a flatbuffer on the host: the LiteRT interpreter, and host latency."""
