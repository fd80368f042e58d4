"""A tablet's storage: MVCC, MemRowSet, DiskRowSets, deltas, compaction, maintenance; imports common and fs."""
