"""Counting the calls that use a C handle right now, so that close() can
refuse while one runs: freeing the handle under a running call (another
thread) would be a use after free there (Model.close() during a tokenize in
another thread had crashed the process)."""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

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

    def _close_unused(self, what: str) -> None:
        """Releases self._h; InvalidArgument while a call uses it."""
        from ._lib import ffi
        with self._users_lock:
            if self._users:
                raise InvalidArgument(f"{what} is in use by a running call (in another thread)")
            if self._h is not None:
                ffi.release(self._h)
                self._h = None
