"""Cache: the chunk KV cache of one model (kvs_cache), in memory within a
byte budget and optionally persisted to a directory."""
from __future__ import annotations

import os
import threading
from typing import Any

from ._errors import check, InvalidArgument
from ._lib import ffi, lib, struct_dict
from .model import Model

KV_TYPES = {"f16": lib.KVS_KV_F16, "f32": lib.KVS_KV_F32}


def kv_type_of(name: str) -> int:
    if name not in KV_TYPES:
        raise InvalidArgument(f"kv_type {name!r}: expected one of {', '.join(KV_TYPES)}")
    return KV_TYPES[name]


class Cache:
    """Prompt KV chunks of one model. Share one Cache across threads, each
    with its own Session: every method is safe concurrently, except that no
    call may run while the Cache is closed. Several processes may share a
    cache_dir. Keeps its Model alive."""

    def __init__(self, model: Model, budget_bytes: int = 0, cache_dir: str | os.PathLike | None = None,
                 chunk_tokens: int = 0, kv_type: str = "f16", fsync: bool = False):
        """budget_bytes: memory for chunks (0 = 1/4 of RAM); cache_dir: persist
        entries there (created if missing); chunk_tokens: grid step (0 = 64);
        kv_type: "f16" or "f32", must match the Sessions using it."""
        p = lib.kvs_cache_default_params()
        p.budget_bytes = budget_bytes
        self._dir = ffi.new("char[]", os.fspath(cache_dir).encode()) if cache_dir else ffi.NULL
        p.cache_dir = self._dir
        p.chunk_tokens = chunk_tokens
        p.kv_type = kv_type_of(kv_type)
        p.fsync = int(fsync)
        out = ffi.new("kvs_cache **")
        check(lib.kvs_cache_open(model._handle(), p, out))
        self.model = model
        self.kv_type = kv_type
        self.cache_dir = os.fspath(cache_dir) if cache_dir else None
        self._h = ffi.gc(out[0], lib.kvs_cache_free)
        self._users = 0  # Sessions working on it right now (close() refuses then)
        self._users_lock = threading.Lock()
        model._children.add(self)

    def _handle(self):
        if self._h is None:
            raise InvalidArgument("the cache was closed")
        return self._h

    def _enter(self):
        with self._users_lock:
            h = self._handle()
            self._users += 1
            return h

    def _leave(self) -> None:
        with self._users_lock:
            self._users -= 1

    def stats(self) -> dict[str, Any]:
        """kvs_cache_stats as a dict (entries, resident, bytes, hits, misses,
        hit_tokens, evictions, disk_* counters ...)."""
        st = ffi.new("kvs_cache_stats *")
        lib.kvs_cache_get_stats(self._handle(), st)
        return struct_dict(st)

    def clear(self, disk: bool = False) -> None:
        """Drops every chunk from memory; with disk=True also every entry
        file of the cache directory (of any model)."""
        check(lib.kvs_cache_clear(self._handle(), int(disk)))

    def sync(self) -> int:
        """Indexes entries other processes wrote since open; returns how many."""
        n = ffi.new("int *")
        check(lib.kvs_cache_sync(self._handle(), n))
        return n[0]

    @property
    def fingerprint(self) -> str:
        """The model fingerprint every key is rooted in (64 hex digits)."""
        hx = ffi.new("char[65]")
        lib.kvs_cache_fingerprint_hex(self._handle(), hx)
        return ffi.string(hx).decode()

    def close(self) -> None:
        """Frees the cache now (files stay). Refused while a Session call uses it."""
        with self._users_lock:
            if self._users:
                raise InvalidArgument("the cache is in use by a running generate/warm")
            if self._h is not None:
                ffi.release(self._h)
                self._h = None

    def __repr__(self) -> str:
        return f"kvstitch.Cache({self.model.path!r}, cache_dir={self.cache_dir!r})"
