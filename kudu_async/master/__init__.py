"""master subsystem of kudu_async."""
