"""fs subsystem of kudu_async."""
