"""common subsystem of kudu_async."""
