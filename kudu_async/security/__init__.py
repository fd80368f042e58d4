"""Security: who a caller is (identities), signed tokens and their keys, TLS and the cluster's CA.

Sans-IO throughout: keys, certificates and tokens are made and checked by method calls given the time;
the RPC layer and the nodes' shells carry them over the wire and keep them in the catalog.
"""
