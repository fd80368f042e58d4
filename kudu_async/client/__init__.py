"""client subsystem of kudu_async."""
