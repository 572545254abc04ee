"""Stream: text pieces of a generation, as they are produced.

The library drives generation and calls back once per token; a worker
thread runs the call (without the GIL while it computes) and hands the
pieces over a queue, so iterating is plain Python and closing early stops
the library at the next token (the callback returns nonzero).
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

from ._result import GenerateResult

_END = object()


class Stream:
    """Iterate for the text pieces (str); .result is the GenerateResult once
    the iteration ended (stop_reason "callback" if closed early). Use as a
    context manager, or call close(), to stop early."""

    def __init__(self, run: Callable[[Callable[[int, bytes], bool]], GenerateResult],
                 release: Callable[[], None]):
        self.result: GenerateResult | None = None
        self._q: "queue.Queue[object]" = queue.Queue()
        self._stop = threading.Event()
        self._run, self._release = run, release
        self._thread = threading.Thread(target=self._work, name="kvstitch-stream", daemon=True)
        self._thread.start()

    def _on_token(self, token: int, piece: bytes) -> bool:
        if piece:
            self._q.put(piece.decode("utf-8", errors="replace"))
        return self._stop.is_set()

    def _work(self) -> None:
        try:
            self.result = self._run(self._on_token)
            self._q.put(_END)
        except BaseException as e:  # handed to the consumer, raised there
            self._q.put(e)
        finally:
            self._release()

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._thread is None:
            raise StopIteration
        item = self._q.get()
        if item is _END or isinstance(item, BaseException):
            self._thread.join()
            self._thread = None
            if isinstance(item, BaseException):
                raise item
            raise StopIteration
        return item  # type: ignore[return-value]

    @property
    def text(self) -> str:
        """The whole text (consumes the rest of the stream)."""
        return "".join(self)

    def close(self) -> None:
        """Stops generation (at the next token) and waits for the library call to end."""
        self._stop.set()
        try:
            for _ in self:
                pass
        except Exception:
            pass

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "_thread", None) is not None:
            self._stop.set()
