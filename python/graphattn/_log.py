# SPDX-License-Identifier: Apache-2.0
"""graphattn's messages to people through the ``logging`` module, logger ``"graphattn"``.

libgraphattn's warnings (a cache directory it cannot use, a remote cache server that went
down) and debug lines (each precompiled kernel's tier and time) are handed to this logger
instead of being printed on stderr, so an engine's logging configuration decides where they go.

GRAPHATTN_LOG_LEVEL (debug, info, warning, error or off; case does not matter) sets the level
of the library, its tools and this logger alike. Unset, the library sends info and above and the
logger keeps the level the application gives it (Python's default shows warnings). Set, and with
no handler configured anywhere, the logger gets one that writes to stderr, so that e.g. debug
lines show without any logging setup.
"""

import atexit
import ctypes
import logging
import os

from . import _lib

logger = logging.getLogger("graphattn")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "warn": logging.WARNING, "error": logging.ERROR, "off": logging.CRITICAL + 10}
# The C levels (graphattn.h): 10 debug, 20 info, 30 warning, 40 error -- the same numbers as
# logging's.
_HANDLER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p)


def level_from_env():
    """logging's level for GRAPHATTN_LOG_LEVEL, or None when it is unset or empty. A value that
    is not a level's name raises ValueError naming it and the allowed ones."""
    text = os.environ.get("GRAPHATTN_LOG_LEVEL", "")
    if not text:
        return None
    level = _LEVELS.get(text.lower())
    if level is None:
        raise ValueError("GRAPHATTN_LOG_LEVEL %r is not a log level; supported: debug, info, "
                         "warning, error or off" % text)
    return level


def _forward(level, message, _user):
    try:
        logger.log(level, message.decode("utf-8", "replace"))
    except Exception:  # never let an exception unwind into the C library
        pass


_c_handler = _HANDLER_TYPE(_forward)  # kept alive for as long as the library may call it
_lib.lib.graphattn_set_log_handler.argtypes = [_HANDLER_TYPE, ctypes.c_void_p]


def _uninstall():
    _lib.lib.graphattn_set_log_handler(_HANDLER_TYPE(), None)


def install():
    """Sets the logger's level from GRAPHATTN_LOG_LEVEL and routes the library's messages to
    it (done once, at import)."""
    try:
        level = level_from_env()
    except ValueError as e:
        level = None
        logger.warning("graphattn: %s; using the application's logging level", e)
    if level is not None:
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler()
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger.addHandler(handler)
    _lib.lib.graphattn_set_log_handler(_c_handler, None)
    atexit.register(_uninstall)  # the callback must not outlive the interpreter


install()
