"""The tablet server: replicas, their RPC services, the heartbeater; imports consensus, tablet, server and below."""
