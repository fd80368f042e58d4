"""tserver subsystem of kudu_async."""
