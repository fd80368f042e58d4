"""spark subsystem of kudu_async."""
