"""Raft replication: the sans-IO core, the WAL, the asyncio replica driver, tablet copy; imports common, rpc, fs."""
