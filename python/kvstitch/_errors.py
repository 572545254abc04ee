"""Exceptions: every failing C call raises a kvstitch.Error subclass chosen by
its kvs_status, carrying the status and the library's kvs_last_error() text
(which names the file, key, value or range that is wrong)."""
from __future__ import annotations

from ._lib import cstr, lib


class Error(Exception):
    """A kvstitch call failed. status: the C kvs_status (negative), or 0 for
    errors raised by the binding itself; message: kvs_last_error() text."""

    def __init__(self, message: str, status: int = 0):
        super().__init__(message)
        self.status = status
        self.message = message


class InvalidArgument(Error, ValueError):
    """KVS_ERR_INVALID_ARG: an argument is out of range or unknown."""


class Closed(InvalidArgument):
    """A Model, Cache or Session was used after its close(). A ValueError, as
    Python's own closed files raise; an InvalidArgument, as a closed Cache or
    Session had raised (a closed Model had raised the base Error, which no
    handler could tell from a failing C call)."""


class FileError(Error, OSError):
    """KVS_ERR_IO: opening, reading, writing or mapping a file failed."""


class FormatError(Error):
    """KVS_ERR_FORMAT: a file is malformed, truncated or hostile."""


class Unsupported(Error):
    """KVS_ERR_UNSUPPORTED: well-formed, but a feature kvstitch does not handle."""


class OutOfMemory(Error, MemoryError):
    """KVS_ERR_NOMEM."""


class NotFound(Error, LookupError):
    """KVS_ERR_NOT_FOUND: a key, tensor or entry does not exist."""


class ContextFull(Error):
    """KVS_ERR_CONTEXT_FULL: the tokens do not fit the session's context."""


class Utf8Error(Error, UnicodeError):
    """KVS_ERR_UTF8: the text is not valid UTF-8."""


class ModelMismatch(Error):
    """KVS_ERR_MODEL_MISMATCH: cache data belongs to another model."""


class CorruptCache(Error):
    """KVS_ERR_CORRUPT: a cache entry failed its checksum."""


class Interrupted(Error):
    """KVS_ERR_INTERRUPTED: a context's should_stop poll stopped the call (a
    Session raises the KeyboardInterrupt that stopped it instead)."""


class InternalError(Error):
    """KVS_ERR_INTERNAL and statuses this binding does not know."""


class SessionBusy(Error, RuntimeError):
    """A Session was entered by a second call while one was running (another
    thread, or a generate inside an unfinished stream). Use one Session per
    thread; Model and Cache may be shared."""


_BY_STATUS = {
    lib.KVS_ERR_INVALID_ARG: InvalidArgument,
    lib.KVS_ERR_IO: FileError,
    lib.KVS_ERR_FORMAT: FormatError,
    lib.KVS_ERR_UNSUPPORTED: Unsupported,
    lib.KVS_ERR_NOMEM: OutOfMemory,
    lib.KVS_ERR_NOT_FOUND: NotFound,
    lib.KVS_ERR_CONTEXT_FULL: ContextFull,
    lib.KVS_ERR_UTF8: Utf8Error,
    lib.KVS_ERR_MODEL_MISMATCH: ModelMismatch,
    lib.KVS_ERR_CORRUPT: CorruptCache,
}
if hasattr(lib, "KVS_ERR_INTERRUPTED"):  # newer libraries
    _BY_STATUS[lib.KVS_ERR_INTERRUPTED] = Interrupted


def check(status: int) -> int:
    """Raises the Error for a negative status (on the thread that made the
    call, where kvs_last_error() is kept); returns status otherwise."""
    if status < 0:
        detail = cstr(lib.kvs_last_error()) or cstr(lib.kvs_strerror(status))
        raise _BY_STATUS.get(status, InternalError)(detail, status)
    return status
