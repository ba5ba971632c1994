# SPDX-License-Identifier: Apache-2.0
"""The package's exceptions.

Failures reported by the library (bad configuration, a tensor it cannot use, a driver or NVRTC
failure) raise :class:`GraphattnError`, which carries the C ABI's status and its last-error text;
an NVRTC compile failure raises its subclass :class:`CompileError`. Mistakes caught in Python
before the library is called (a wrong type, an unknown name) raise ``TypeError`` or
``ValueError`` naming the argument, its value and what is allowed.
"""

# graphattn_status_t (include/graphattn/graphattn.h)
OK = 0
ERROR = 1
ERROR_INVALID_ARGUMENT = 2
ERROR_COMPILE = 3
ERROR_OUT_OF_MEMORY = 4
ERROR_BUFFER_TOO_SMALL = 5
ERROR_INTERNAL = 6

STATUS_NAMES = {
    OK: "GRAPHATTN_OK",
    ERROR: "GRAPHATTN_ERROR",
    ERROR_INVALID_ARGUMENT: "GRAPHATTN_ERROR_INVALID_ARGUMENT",
    ERROR_COMPILE: "GRAPHATTN_ERROR_COMPILE",
    ERROR_OUT_OF_MEMORY: "GRAPHATTN_ERROR_OUT_OF_MEMORY",
    ERROR_BUFFER_TOO_SMALL: "GRAPHATTN_ERROR_BUFFER_TOO_SMALL",
    ERROR_INTERNAL: "GRAPHATTN_ERROR_INTERNAL",
}


class GraphattnError(RuntimeError):
    """A failure reported by libgraphattn.

    Attributes:
        message: the library's last-error text (names the bad value and what is allowed).
        status: the graphattn_status_t code (an int; ``status_name`` spells it).
    """

    def __init__(self, message, status=ERROR):
        super().__init__(message)
        self.message = message
        self.status = int(status)

    @property
    def status_name(self):
        return STATUS_NAMES.get(self.status, "status %d" % self.status)

    def __str__(self):
        return "%s (%s)" % (self.message, self.status_name)


class CompileError(GraphattnError):
    """NVRTC rejected a kernel; ``message`` holds its log, the options and the spec."""

    def __init__(self, message, status=ERROR_COMPILE):
        super().__init__(message, status)


def error_for_status(status, message):
    """The exception for a failed call: CompileError for GRAPHATTN_ERROR_COMPILE."""
    cls = CompileError if status == ERROR_COMPILE else GraphattnError
    return cls(message or "graphattn call failed without a message", status)
