"""One tablet replica's storage (MemRowSet, DiskRowSets, MVCC, flushes and compactions); imports common and fs."""
