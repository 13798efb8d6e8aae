"""Child processes: isolation of native code, the confined sandbox run, what a child may send back, memory limits, library chatter."""
