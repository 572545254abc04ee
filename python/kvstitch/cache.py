"""Cache: the chunk KV cache of one model (kvs_cache), in memory within a
byte budget, optionally persisted to a directory and shared through Redis."""
from __future__ import annotations

import os
from typing import Any

from ._errors import Closed, InvalidArgument, NotFound, check
from ._inuse import InUse, NoCopy
from ._lib import bool_arg, c_path, ffi, int_arg, lib, struct_dict, user_path, utf8
from .model import Model

KV_TYPES = {"f16": lib.KVS_KV_F16, "f32": lib.KVS_KV_F32, "q8": lib.KVS_KV_Q8}


def kv_type_of(name: str) -> int:
    if not isinstance(name, str) or name not in KV_TYPES:  # ([] had raised TypeError: unhashable)
        raise InvalidArgument(f"kv_type {name!r}: expected one of {', '.join(KV_TYPES)}")
    return KV_TYPES[name]


class Cache(InUse, NoCopy):
    """Prompt KV chunks of one model. Share one Cache across threads, each
    with its own Session: every method is safe concurrently, except that no
    call may run while the Cache is closed. Several processes may share a
    cache_dir. Keeps its Model alive."""

    def __init__(self, model: Model, budget_bytes: int = 0, cache_dir: str | os.PathLike | None = None,
                 chunk_tokens: int = 0, kv_type: str = "f16", fsync: bool = False, *,
                 redis_url: str | None = None, redis_cluster: str | None = None,
                 redis_password_file: str | os.PathLike | None = None, redis_timeout_ms: int = 0,
                 redis_codec: str | None = None, key_file: str | os.PathLike | None = None):
        """budget_bytes: memory for chunks (0 = 1/4 of RAM); cache_dir: persist
        entries there (created if missing); chunk_tokens: grid step (0 = 64);
        kv_type: "f16", "f32" or "q8" (8-bit), must match the Sessions using it. A "~" in
        cache_dir is the home directory (the README's example had failed).
        The shared Redis tier (below RAM and cache_dir; the CLI's --redis):
        redis_url "redis://[user[:password]@]host[:port][/db]" or redis_cluster
        "host:port[,host:port...]", not both; redis_password_file (else the URL's
        or $KVSTITCH_REDIS_PASSWORD); redis_timeout_ms per socket operation
        (0 = 50); redis_codec, how values are written: "raw" (None: the
        default), "zstd" or "shuffle-zstd" (~15% smaller f16 values, slower
        reads; every codec is read). Writes go out on a background thread:
        flush() waits for them; close() waits too (a bounded time).
        key_file (the CLI's --cache-key-file; README "Trust"): a secret key, the
        file's bytes with surrounding whitespace trimmed, at least 16 bytes.
        Entries written to cache_dir / Redis then carry an HMAC-SHA256 under
        it and are served only if it verifies; keyed and keyless caches (or
        two keys) never share entries and never remove each other's. An
        empty, too short or non-regular key file raises InvalidArgument, an
        unreadable one FileError (both name the file, never the key)."""
        if not isinstance(model, Model):
            raise InvalidArgument(f"Cache needs a Model, got {type(model).__name__}")
        p = lib.kvs_cache_default_params()
        p.budget_bytes = int_arg(budget_bytes, "budget_bytes", 0, 2**64 - 1)
        if cache_dir is not None:
            cache_dir = user_path(cache_dir, "cache_dir")
            if not cache_dir:
                raise InvalidArgument("cache_dir is empty: give a directory, or None for none")
        self._dir = ffi.new("char[]", c_path(cache_dir, "cache_dir")) if cache_dir is not None else ffi.NULL
        p.cache_dir = self._dir
        p.chunk_tokens = int_arg(chunk_tokens, "chunk_tokens", 0, 4096)  # the CLI's --chunk-tokens range (0: 64)
        p.kv_type = kv_type_of(kv_type)
        p.fsync = int(bool_arg(fsync, "fsync"))
        if redis_url is not None and redis_cluster is not None:
            raise InvalidArgument("give redis_url or redis_cluster, not both")
        self._redis = []  # the C strings, alive while the params are read
        for field, v in (("redis_url", redis_url), ("redis_cluster", redis_cluster)):
            if v is not None:
                if not isinstance(v, str) or not v or "\0" in v:
                    raise InvalidArgument(f"{field} must be a non-empty str without NUL, got {v!r}")
                self._redis.append(ffi.new("char[]", utf8(v, field)))  # (a surrogate: Utf8Error)
                setattr(p, field, self._redis[-1])
        if redis_password_file is not None:
            if redis_url is None and redis_cluster is None:
                raise InvalidArgument("redis_password_file goes with redis_url or redis_cluster")
            self._redis.append(ffi.new("char[]", c_path(user_path(redis_password_file, "redis_password_file"),
                                                        "redis_password_file")))
            p.redis_password_file = self._redis[-1]
        p.redis_timeout_ms = int_arg(redis_timeout_ms, "redis_timeout_ms", 0, 60000)
        if redis_timeout_ms and redis_url is None and redis_cluster is None:
            raise InvalidArgument("redis_timeout_ms goes with redis_url or redis_cluster")
        if redis_codec is not None:
            if redis_codec not in ("raw", "zstd", "shuffle-zstd"):
                raise InvalidArgument(f"redis_codec must be 'raw', 'zstd' or 'shuffle-zstd', got {redis_codec!r}")
            if redis_url is None and redis_cluster is None:
                raise InvalidArgument("redis_codec goes with redis_url or redis_cluster")
            self._redis.append(ffi.new("char[]", redis_codec.encode()))
            p.redis_codec = self._redis[-1]
        if key_file is not None:
            if cache_dir is None and redis_url is None and redis_cluster is None:
                raise InvalidArgument("key_file goes with cache_dir, redis_url or redis_cluster")
            self._redis.append(ffi.new("char[]", c_path(user_path(key_file, "key_file"), "key_file")))
            p.cache_key_file = self._redis[-1]
        out = ffi.new("kvs_cache **")
        self._init_in_use()  # calls and Sessions working on it right now (close() refuses then)
        with model._using() as mh:
            check(lib.kvs_cache_open(mh, p, out))
            self._h = ffi.gc(out[0], lib.kvs_cache_free)
            # while the model is in use: a Model.close() in another thread sees
            # the call or this child, never neither (it had freed the model
            # between the two)
            model._children.add(self)
        self.model = model
        self.kv_type = kv_type
        self.cache_dir = os.fsdecode(os.fspath(cache_dir)) if cache_dir is not None else None
        self._redis = None  # the library copied the strings

    def _handle(self):
        if self._h is None:
            raise Closed("the cache was closed")
        return self._h

    def stats(self) -> dict[str, Any]:
        """kvs_cache_stats as a dict (entries, resident, bytes, hits, misses,
        hit_tokens, evictions, disk_* counters ...)."""
        st = ffi.new("kvs_cache_stats *")
        with self._using() as h:
            lib.kvs_cache_get_stats(h, st)
        return struct_dict(st)

    def redis_why_down(self) -> str:
        """Why the Redis tier could not be used, in the server's words
        ("redis 127.0.0.1:6379: AUTH: WRONGPASS ...", "... a write was
        refused: NOAUTH ..."), what the CLI prints; "" when every node's last
        connect worked, or without Redis. A refusing Redis does not fail the
        calls (they run from RAM and the cache dir): this, and
        stats()["redis_put_errors"], say so."""
        buf = ffi.new("char[]", 512)
        with self._using() as h:
            lib.kvs_cache_redis_why_down(h, buf, 512)
        return ffi.string(buf).decode("utf-8", "replace")

    def clear(self, disk: bool = False) -> None:
        """Drops every chunk from memory; with disk=True also every entry
        file of the cache directory (of any model). Without, the directory's
        entries stay listed (entries(), stats()) and are read again when used."""
        with self._using() as h:
            check(lib.kvs_cache_clear(h, int(bool_arg(disk, "disk"))))

    def flush(self, timeout: float = 10.0) -> bool:
        """Waits (at most timeout seconds) until the chunks queued for Redis
        are written or have failed; False if some were still queued. Then
        stats()["redis_put_errors"] and ["redis_put_dropped"] count every
        write before it. True at once without Redis."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 <= timeout <= 86400:
            raise InvalidArgument(f"timeout must be a number of seconds in [0, 86400], got {timeout!r}")
        with self._using() as h:
            return lib.kvs_cache_flush(h, int(timeout * 1000)) == lib.KVS_OK

    def entries(self) -> list[dict[str, Any]]:
        """Every chunk of the cache, in memory or in cache_dir (kvs_cache_ls,
        as `kvstitch cache ls`): dicts of kvs_cache_entry's fields (keys as
        hex, tokens as a list, kv_type and origin as names), in no order."""
        out: list[dict[str, Any]] = []

        def one(user, e):
            d = {}
            for name, _ in ffi.typeof(e).item.fields:
                v = getattr(e, name)
                if name == "tokens":
                    v = list(ffi.unpack(v, e.n_tok)) if e.n_tok > 0 and v != ffi.NULL else []
                elif name == "origin":
                    v = ffi.string(v).decode() if v != ffi.NULL else ""
                elif name == "kv_type":
                    v = ffi.string(lib.kvs_kv_type_name(v)).decode()
                elif isinstance(v, ffi.CData):  # the char[65] keys
                    v = ffi.string(v).decode()
                d[name] = v
            out.append(d)
            return 0
        cb = ffi.callback("kvs_cache_entry_fn", one)
        with self._using() as h:
            check(lib.kvs_cache_ls(h, cb, ffi.NULL))
        return out

    def sync(self) -> int:
        """Indexes entries other processes wrote since open; returns how many."""
        n = ffi.new("int *")
        with self._using() as h:
            check(lib.kvs_cache_sync(h, n))
        return n[0]

    @property
    def fingerprint(self) -> str:
        """The model fingerprint every key is rooted in (64 hex digits)."""
        hx = ffi.new("char[65]")
        with self._using() as h:
            lib.kvs_cache_fingerprint_hex(h, hx)
        return ffi.string(hx).decode()

    def close(self) -> None:
        """Frees the cache now (files stay). Refused while a call (a Session's
        generate/warm, stats, ...) uses it."""
        self._close_unused("the cache")
        self.model._children.discard(self)  # closed: no longer holds the model

    def __repr__(self) -> str:
        return f"kvstitch.Cache({self.model.path!r}, cache_dir={self.cache_dir!r})"


def prune_dir(cache_dir: str | os.PathLike, max_bytes: int = 0, older_than_s: int = 0,
              keep_unreachable: bool = False) -> dict[str, int]:
    """Reclaims space in a cache directory of any model (kvs_cache_dir_prune,
    as `kvstitch cache prune`): unreachable entries (unless keep_unreachable),
    stale temporary files and stale junk (an entry's name without its magic,
    untouched for an hour), entries not used for older_than_s seconds, then
    the least recently used down to max_bytes (0: no bound). Only the
    cache's own files are touched. Returns the report (removed,
    removed_bytes, unreachable_removed, tmp_removed, entries, bytes,
    junk_removed, junk_bytes)."""
    d = user_path(cache_dir, "cache_dir")  # a NUL, a lone surrogate or a wrong type named (isdir had called
    # it a missing directory)
    if not os.path.isdir(d):  # as `kvstitch cache prune` (it had reported an empty directory)
        raise NotFound(f"cache_dir {os.fsdecode(d)!r}: no such directory", lib.KVS_ERR_NOT_FOUND)
    p = ffi.new("kvs_cache_prune_params *")
    p.max_bytes = int_arg(max_bytes, "max_bytes", 0, 2**64 - 1)
    p.older_than_s = int_arg(older_than_s, "older_than_s", 0, 2**63 - 1)
    p.keep_unreachable = int(bool_arg(keep_unreachable, "keep_unreachable"))  # ("no" had been True)
    r = ffi.new("kvs_cache_prune_report *")
    check(lib.kvs_cache_dir_prune(c_path(d, "cache_dir"), p, r))
    return struct_dict(r)
