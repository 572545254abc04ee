"""Counting the calls that use a C handle right now, so that close() can
refuse while one runs: freeing the handle under a running call (another
thread) would be a use after free there (Model.close() during a tokenize in
another thread had crashed the process)."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable, Iterator

from ._errors import InvalidArgument


class InUse:
    """Mixin: the class has _handle() (raising once closed). _enter/_leave
    bracket a use; _using() is the same as a context manager; _close_unused
    frees the handle unless a use is running."""

    def _init_in_use(self) -> None:
        self._users = 0
        self._users_lock = threading.Lock()

    def _handle(self) -> Any:  # pragma: no cover - every user defines it
        raise NotImplementedError

    def _enter(self) -> Any:
        with self._users_lock:
            h = self._handle()
            self._users += 1
            return h

    def _leave(self) -> None:
        with self._users_lock:
            self._users -= 1

    @contextlib.contextmanager
    def _using(self) -> Iterator[Any]:
        h = self._enter()
        try:
            yield h
        finally:
            self._leave()

    def _close_unused(self, what: str, refuse: Callable[[], str | None] = lambda: None) -> None:
        """Releases self._h; InvalidArgument while a call uses it, or when
        refuse() (asked under the same lock as the calls' count) gives a
        reason."""
        from ._lib import ffi
        with self._users_lock:
            if self._users:
                raise InvalidArgument(f"{what} is in use by a running call (in another thread)")
            why = refuse()
            if why:
                raise InvalidArgument(why)
            if self._h is not None:
                # the handle goes first: a KeyboardInterrupt raised while the
                # C free runs (a Redis close waits up to its timeout) had left
                # it set, and the next call used freed memory
                h, self._h = self._h, None
                ffi.release(h)


class NoCopy:
    """Mixin: the object owns a C handle, which a copy would share (closing
    one freed it under the other: copy.copy(model).close() then a tokenize
    crashed the process). Copying and pickling raise TypeError."""

    def __copy__(self) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be copied: share the object itself")

    def __deepcopy__(self, memo: Any) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be copied: share the object itself")

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError(f"a {type(self).__name__} cannot be pickled: load it again in the other process")
