"""tools subsystem of kudu_async."""
