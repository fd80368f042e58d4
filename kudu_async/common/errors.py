"""Status codes and the exception hierarchy shared by every layer.

One exception class per status code, raised where the fact is known and mapped to RPC codes and HTTP
statuses here, in one place. Class names follow kudu-python (``KuduNotFound`` ...) so that code written
for it catches the same names.
"""

from __future__ import annotations

from typing import Any, ClassVar


class KuduException(Exception):
    """Root of every error kudu_async raises on purpose (kudu-python's name)."""


class KuduBadStatus(KuduException):
    """An error carrying a status code; the RPC layer carries it across the wire unchanged."""

    code: ClassVar[str] = "RUNTIME_ERROR"
    http_status: ClassVar[int] = 500

    def __init__(self, message: str = "", details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details: dict[str, Any] = dict(details or {})

    def to_dict(self) -> dict[str, Any]:
        """The wire form: ``{"code", "message", "details"}``."""
        return {"code": self.code, "message": self.message, "details": self.details}

    def __str__(self) -> str:
        return f"{self.code}: {self.message}" if self.message else self.code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r}, details={self.details!r})"


# --- Kudu's own status codes -------------------------------------------------------------------------


class KuduNotFound(KuduBadStatus):
    code = "NOT_FOUND"
    http_status = 404


class KuduCorruption(KuduBadStatus):
    code = "CORRUPTION"
    http_status = 500


class KuduNotSupported(KuduBadStatus):
    code = "NOT_SUPPORTED"
    http_status = 501


class KuduInvalidArgument(KuduBadStatus):
    code = "INVALID_ARGUMENT"
    http_status = 400


class KuduIOError(KuduBadStatus):
    code = "IO_ERROR"
    http_status = 500


class KuduAlreadyPresent(KuduBadStatus):
    code = "ALREADY_PRESENT"
    http_status = 409


class KuduRuntimeError(KuduBadStatus):
    code = "RUNTIME_ERROR"
    http_status = 500


class KuduNetworkError(KuduBadStatus):
    code = "NETWORK_ERROR"
    http_status = 502


class KuduIllegalState(KuduBadStatus):
    code = "ILLEGAL_STATE"
    http_status = 409


class KuduNotAuthorized(KuduBadStatus):
    code = "NOT_AUTHORIZED"
    http_status = 403


class KuduAborted(KuduBadStatus):
    code = "ABORTED"
    http_status = 409


class KuduRemoteError(KuduBadStatus):
    code = "REMOTE_ERROR"
    http_status = 502


class KuduServiceUnavailable(KuduBadStatus):
    """Overloaded or not ready: the caller backs off and retries."""

    code = "SERVICE_UNAVAILABLE"
    http_status = 503


class KuduTimedOut(KuduBadStatus):
    code = "TIMED_OUT"
    http_status = 504


class KuduUninitialized(KuduBadStatus):
    code = "UNINITIALIZED"
    http_status = 503


class KuduConfigurationError(KuduBadStatus):
    code = "CONFIGURATION_ERROR"
    http_status = 400


class KuduIncomplete(KuduBadStatus):
    code = "INCOMPLETE"
    http_status = 500


class KuduEndOfFile(KuduBadStatus):
    code = "END_OF_FILE"
    http_status = 500


class KuduCancelled(KuduBadStatus):
    code = "CANCELLED"
    http_status = 499


class KuduImmutable(KuduBadStatus):
    """A write tried to change a cell of an immutable column (Kudu's ``Status::Immutable``)."""

    code = "IMMUTABLE"
    http_status = 409


# --- RPC and server-level codes -----------------------------------------------------------------------


class KuduNotTheLeader(KuduBadStatus):
    """Sent by a replica (or master) that is not the leader; details may name the leader it knows."""

    code = "NOT_THE_LEADER"
    http_status = 421


class KuduNoSuchService(KuduBadStatus):
    code = "NO_SUCH_SERVICE"
    http_status = 404


class KuduNoSuchMethod(KuduBadStatus):
    code = "NO_SUCH_METHOD"
    http_status = 404


class KuduInvalidRequest(KuduBadStatus):
    """The request body could not be decoded or does not have the expected shape."""

    code = "INVALID_REQUEST"
    http_status = 400


class KuduRequestTooLarge(KuduBadStatus):
    code = "REQUEST_TOO_LARGE"
    http_status = 413


class KuduTabletNotRunning(KuduBadStatus):
    code = "TABLET_NOT_RUNNING"
    http_status = 503


class KuduTabletFailed(KuduBadStatus):
    code = "TABLET_FAILED"
    http_status = 500


# kudu-python compatibility aliases.
KuduError = KuduBadStatus


def _all_status_classes() -> dict[str, type[KuduBadStatus]]:
    found: dict[str, type[KuduBadStatus]] = {}
    todo: list[type[KuduBadStatus]] = [KuduBadStatus]
    while todo:
        cls = todo.pop()
        found.setdefault(cls.code, cls)
        todo.extend(cls.__subclasses__())
    found["RUNTIME_ERROR"] = KuduRuntimeError
    return found


STATUS_CLASSES: dict[str, type[KuduBadStatus]] = _all_status_classes()


def error_from_code(code: str, message: str = "", details: dict[str, Any] | None = None) -> KuduBadStatus:
    """Build the typed exception for a wire code; unknown codes become REMOTE_ERROR keeping the code."""
    cls = STATUS_CLASSES.get(code)
    if cls is None:
        merged = dict(details or {})
        merged["remote_code"] = code
        return KuduRemoteError(message, merged)
    return cls(message, details)


def error_from_dict(body: Any) -> KuduBadStatus:
    """Decode the wire form ``{"code", "message", "details"}``; a malformed one is itself an error."""
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        return KuduRemoteError(f"malformed error body from peer: {body!r:.200}")
    message = body.get("message", "")
    details = body.get("details") or {}
    if not isinstance(details, dict):
        details = {"details": details}
    return error_from_code(body["code"], str(message), details)
