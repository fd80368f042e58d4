"""kudu-python's ``kudu.errors`` module: the exception hierarchy (shared by client and servers)."""

from kudu_async.common.errors import (
    KuduAborted,
    KuduAlreadyPresent,
    KuduBadStatus,
    KuduException,
    KuduIllegalState,
    KuduIncomplete,
    KuduInvalidArgument,
    KuduIOError,
    KuduNetworkError,
    KuduNotAuthorized,
    KuduNotFound,
    KuduNotSupported,
    KuduNotTheLeader,
    KuduRemoteError,
    KuduRuntimeError,
    KuduServiceUnavailable,
    KuduTimedOut,
)

__all__ = [
    "KuduAborted", "KuduAlreadyPresent", "KuduBadStatus", "KuduException", "KuduIOError", "KuduIllegalState",
    "KuduIncomplete", "KuduInvalidArgument", "KuduNetworkError", "KuduNotAuthorized", "KuduNotFound",
    "KuduNotSupported", "KuduNotTheLeader", "KuduRemoteError", "KuduRuntimeError", "KuduServiceUnavailable",
    "KuduTimedOut",
]
