"""The `kudu` command line (Kudu's tool: ksck, tables, tablets, rebalance, loadgen...); imports client, common, rpc."""
