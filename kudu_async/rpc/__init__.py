"""rpc subsystem of kudu_async."""
