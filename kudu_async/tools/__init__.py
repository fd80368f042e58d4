"""The kudu-admin CLI (ksck, tables, tablets, rebalance, loadgen); imports client, common, rpc (Consensus calls)."""
