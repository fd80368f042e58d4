"""The node shell both roles share: flags, lifecycle, admin HTTP app, logging; imports common, rpc, fs, consensus."""
