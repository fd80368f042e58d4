"""tablet subsystem of kudu_async."""
