"""consensus subsystem of kudu_async."""
