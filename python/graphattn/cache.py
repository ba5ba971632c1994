# SPDX-License-Identifier: Apache-2.0
"""The kernel cache: compiled kernels in memory and on disk, keyed by XXH3-128.

    cache = graphattn.cache.KernelCache(dir="/tmp/ga-cache")     # or default_cache()
    cache.precompile(["cache_write_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90"])
    cache.list(), cache.stats(), cache.dir

Precompiling needs no GPU (NVRTC only), so a build machine can warm a cache for a GPU fleet.
"""

import ctypes
import os
from typing import NamedTuple

from . import _lib, errors
from ._names import bool_arg, int_arg

ORIGINS = {0: "memory", 1: "disk", 2: "compiled", 3: "remote"}


class CacheStats(NamedTuple):
    """Counters since the cache was created."""
    memory_hits: int
    disk_hits: int
    misses: int
    compiles: int
    compile_failures: int
    repairs: int
    evictions: int
    compile_ms: float
    write_failures: int  # compiled kernels that could not be written to disk


class CacheEntry(NamedTuple):
    """One file of the cache directory."""
    key: str            # 32 hex digits
    spec: str           # canonical spec string ("" when the entry is bad)
    arch: int
    ok: bool            # header and checksums verify
    status: str         # "ok", "truncated", "bad-checksum", ...
    file_bytes: int
    last_used_ms: int   # Unix time in milliseconds
    compiled_at_ms: int


class PrecompileResult(NamedTuple):
    """What one precompile request did."""
    spec: str
    origin: object      # "memory", "disk", "compiled" or "remote"; None when not ok
    ms: float           # wall time of the request
    ok: bool
    error: str          # NVRTC's or the spec parser's first line(s) when not ok


class KernelCache(_lib.OwnedHandle):
    """A kernel cache (graphattn_cache_t).

    Args:
        dir: disk directory; None or "": $GRAPHATTN_CACHE_DIR, $XDG_CACHE_HOME/graphattn,
            ~/.cache/graphattn.
        use_disk: False keeps kernels in memory only.
        max_bytes: disk size bound; 0: $GRAPHATTN_CACHE_MAX_BYTES, else 2 GiB.
        lock_timeout_ms: how long to wait for another process's compile of the same kernel.
        dump_source: write each compiled source beside its entry.
        shared_dir: accept a directory a group shares (group-writable, setgid, never
            world-writable; also GRAPHATTN_CACHE_SHARED=1). Every member of the group can then
            plant GPU code this process runs. Otherwise the directory must be this user's (or
            root's) and writable by no one else, or the cache runs memory-only with a warning.
    """

    _DESTROY = "graphattn_cache_destroy"

    def __init__(self, dir=None, use_disk=True, max_bytes=0, lock_timeout_ms=60000,
                 dump_source=False, shared_dir=False):
        if dir is not None and not isinstance(dir, (str, os.PathLike)):
            raise TypeError("dir must be a str or path, got %r" % (dir,))
        opts = _lib.CacheOptions()
        _lib.lib.graphattn_cache_options_init(ctypes.byref(opts))
        self._dir_bytes = os.fsencode(dir) if dir else None  # kept alive for the call
        opts.dir = self._dir_bytes
        opts.use_disk = int(bool_arg("use_disk", use_disk))
        opts.max_bytes = int_arg("max_bytes", max_bytes, 0)
        opts.lock_timeout_ms = int_arg("lock_timeout_ms", lock_timeout_ms, 0)
        opts.dump_source = int(bool_arg("dump_source", dump_source))
        opts.shared_dir = int(bool_arg("shared_dir", shared_dir))
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib.graphattn_cache_create(ctypes.byref(opts), ctypes.byref(handle)))
        self._handle = handle
        self._owned = True

    @classmethod
    def _wrap_default(cls):
        self = cls.__new__(cls)
        handle = ctypes.c_void_p()
        _lib.check(_lib.lib.graphattn_cache_default(ctypes.byref(handle)))
        self._handle = handle
        self._owned = False
        return self

    @property
    def dir(self):
        """The disk directory, "" when the cache is memory-only."""
        return _lib.read_string(_lib.lib.graphattn_cache_dir, self._handle)

    def stats(self):
        s = _lib.CacheStats()
        s.struct_size = ctypes.sizeof(_lib.CacheStats)
        _lib.check(_lib.lib.graphattn_cache_stats(self._handle, ctypes.byref(s)))
        return CacheStats(s.memory_hits, s.disk_hits, s.misses, s.compiles,
                          s.compile_failures, s.repairs, s.evictions, s.compile_ms,
                          s.write_failures)

    def list(self):
        """The entries on disk, sorted by file name (none for a memory-only cache)."""
        count = ctypes.c_size_t(0)
        capacity = 0
        entries = None
        for _ in range(4):  # another process may add entries between the calls
            entries = (_lib.CacheEntry * max(capacity, 1))()
            status = _lib.lib.graphattn_cache_list(self._handle, entries, capacity,
                                                   ctypes.byref(count))
            if status == errors.ERROR_BUFFER_TOO_SMALL or count.value > capacity:
                capacity = count.value + 16
                continue
            _lib.check(status)
            break
        else:
            _lib.check(status)
        return [CacheEntry(e.key.decode(), e.spec.decode(), e.arch, bool(e.ok),
                           e.status.decode(), e.file_bytes, e.last_used_ms, e.compiled_at_ms)
                for e in entries[:count.value]]

    def precompile(self, specs, threads=0, raise_on_error=True):
        """Compiles (or finds) the kernels named by canonical spec strings, e.g.
        "decode_h128_b16_bf16_kvauto_g4_swa0_cap0_nhd_sm90", on `threads` workers (0: one per
        hardware thread). Needs no GPU. Returns one PrecompileResult per spec; when any failed
        and raise_on_error, raises GraphattnError (its message names the first failure, NVRTC's
        log included) whose ``results`` attribute holds them all."""
        if isinstance(specs, (str, bytes)):
            specs = [specs]
        specs = list(specs)
        for i, s in enumerate(specs):
            if not isinstance(s, str):
                raise TypeError("specs[%d] must be a spec string, got %r" % (i, s))
        threads = int_arg("threads", threads, 0)
        n = len(specs)
        encoded = [s.encode() for s in specs]
        arr = (ctypes.c_char_p * max(n, 1))(*encoded)
        results = (_lib.PrecompileResult * max(n, 1))()
        status = _lib.lib.graphattn_cache_precompile(self._handle, arr, n, threads, results)
        message = _lib.last_error() if status != errors.OK else ""
        out = [PrecompileResult(specs[i], ORIGINS.get(r.origin) if r.ok else None, r.ms,
                                bool(r.ok), r.error.decode("utf-8", "replace"))
               for i, r in enumerate(results[:n])]
        if status != errors.OK and raise_on_error:
            err = errors.error_for_status(status, message)
            err.results = out
            raise err
        return out

    def __repr__(self):
        try:
            where = self.dir or "memory only"
        except errors.GraphattnError:
            where = "?"
        return "KernelCache(%s%s)" % (where, "" if self._owned else ", default")


_default = None


def default_cache():
    """The process-wide cache that the library uses when none is given."""
    global _default
    if _default is None:
        _default = KernelCache._wrap_default()
    return _default
