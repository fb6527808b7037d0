"""oslo's errors: one exception class per oslo_status.

The SWIG wrapper (bindings/oslo.i) calls make(status, message) on the thread
where the C call failed, with the message already copied out of oslo's
thread-local last error, and raises what it returns.
"""

import builtins
import enum


class Status(enum.IntEnum):
    """oslo_status (include/oslo.h). Values are stable; new ones are appended."""

    OK = 0
    INVALID_ARGUMENT = 1
    OUT_OF_MEMORY = 2
    BACKEND_UNAVAILABLE = 3
    COMM = 4
    TIMEOUT = 5
    IO = 6
    FORMAT = 7
    SHAPE = 8
    DTYPE = 9
    CONFIG = 10
    NOT_SUPPORTED = 11
    INTERNAL = 12


class Error(Exception):
    """A failed oslo call. `status` is the oslo.Status (or the int, for a
    status newer than this package), `message` oslo's message naming the
    problem."""

    status = None

    def __init__(self, message, status=None):
        super().__init__(message)
        self.message = message
        if status is not None:
            try:
                self.status = Status(status)
            except ValueError:
                self.status = int(status)

    def __str__(self):
        name = self.status.name if isinstance(self.status, Status) else self.status
        return f"{name}: {self.message}"

    def __reduce__(self):
        return (make, (int(self.status) if self.status is not None else -1, self.message))


class InvalidArgumentError(Error, ValueError):
    status = Status.INVALID_ARGUMENT


class OutOfMemoryError(Error, MemoryError):
    status = Status.OUT_OF_MEMORY


class BackendUnavailableError(Error):
    status = Status.BACKEND_UNAVAILABLE


class CommError(Error):
    status = Status.COMM


class TimeoutError(Error, builtins.TimeoutError):  # noqa: A001 - as the status; also the built-in
    status = Status.TIMEOUT

    def __new__(cls, message, status=None):
        # OSError would take two arguments as (errno, strerror).
        return builtins.OSError.__new__(cls, message)


class IOError(Error, builtins.OSError):  # noqa: A001 - as the status; also an OSError
    status = Status.IO

    def __new__(cls, message, status=None):
        # OSError would take two arguments as (errno, strerror).
        return builtins.OSError.__new__(cls, message)


class FormatError(Error, ValueError):
    status = Status.FORMAT


class ShapeError(Error, ValueError):
    status = Status.SHAPE


class DTypeError(Error, TypeError):
    status = Status.DTYPE


class ConfigError(Error, ValueError):
    status = Status.CONFIG


class NotSupportedError(Error, NotImplementedError):
    status = Status.NOT_SUPPORTED


class InternalError(Error):
    status = Status.INTERNAL


_BY_STATUS = {
    cls.status: cls
    for cls in (InvalidArgumentError, OutOfMemoryError, BackendUnavailableError, CommError,
                TimeoutError, IOError, FormatError, ShapeError, DTypeError, ConfigError,
                NotSupportedError, InternalError)
}


def make(status, message):
    """The exception for a failed status (Error itself for an unknown one)."""
    cls = _BY_STATUS.get(status, Error)
    return cls(message, status)
