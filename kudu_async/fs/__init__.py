"""Data and WAL directories, atomic file writes, block files and their cache, tablet metadata; imports only common."""
