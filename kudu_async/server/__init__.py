"""server subsystem of kudu_async."""
