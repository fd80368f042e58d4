"""testing subsystem of kudu_async."""
