"""The master: replicated catalog, tserver registry, re-replication; imports consensus, tablet, server and below."""
