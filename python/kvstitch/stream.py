"""Stream: text pieces of a generation, as they are produced.

The library drives generation and calls back once per token; a worker
thread runs the call (without the GIL while it computes) and hands the
pieces over a queue, so iterating is plain Python and closing early stops
the library at the next token (the callback returns nonzero), or during the
prefill at its next batch (the session's flag poll).
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterator

from ._errors import Interrupted
from ._inuse import NoCopy
from ._result import GenerateResult

_END = object()


def _work(q: "queue.Queue[object]", stop: threading.Event, box: list,
          run: Callable[[Callable[[int, bytes], bool]], GenerateResult], release: Callable[[], None]) -> None:
    """The worker thread: holds no reference to the Stream, so a Stream
    dropped mid-iteration (a `break` out of the loop) is collected and its
    __del__ stops generation at the next token (a bound-method target had
    kept it alive: the Session stayed busy until max_tokens)."""
    def on_token(token: int, piece: bytes) -> bool:
        if piece:
            q.put(piece.decode("utf-8", errors="replace"))
        return stop.is_set()
    try:
        box[0] = run(on_token)
        q.put(_END)
    except Interrupted as e:
        # the stream's own close() stopped the prefill: the loop just ends
        # (result None); from another thread the consumer had got the error
        q.put(_END if stop.is_set() else e)
    except BaseException as e:  # handed to the consumer, raised there
        q.put(e)
    finally:
        release()


class Stream(NoCopy):
    """Iterate for the text pieces (str); .result is the GenerateResult once
    the iteration ended (stop_reason "callback" if closed early; None if
    closed before the first token: the prefill was stopped). Use as a
    context manager, or call close(), to stop early. close() may come from
    another thread than the one iterating: that one then ends its loop."""

    def __init__(self, run: Callable[[Callable[[int, bytes], bool]], GenerateResult],
                 release: Callable[[], None], cancel: Callable[[], None] | None = None):
        """cancel (may be None): stops the call before its next token or
        batch (the prefill too), from any thread; close() calls it."""
        self._cancel = cancel
        self._box: list = [None]
        self._q: "queue.Queue[object]" = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = threading.Thread(
            target=_work, args=(self._q, self._stop, self._box, run, release), name="kvstitch-stream", daemon=True)
        self._thread.start()

    @property
    def result(self) -> GenerateResult | None:
        return self._box[0]

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._thread is None:
            raise StopIteration
        try:
            item = self._q.get()
        except BaseException:
            # Ctrl-C in a `for piece in stream` loop: the generation stops
            # here (the traceback keeps the stream alive, so its collection
            # had never stopped it: it decoded on, the Session busy)
            self.close()
            raise
        if item is _END or isinstance(item, BaseException):
            self._q.put(item)  # for any other consumer: every loop sees the end (one had blocked for ever)
            t = self._thread
            if t is not None:
                t.join()
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
        """Stops generation (at the next token) and waits for the library
        call to end. Pieces not read yet are dropped. (It had read them
        itself, racing a loop in another thread, which then waited for ever.)"""
        self._stop.set()
        if self._cancel is not None:
            self._cancel()
        t = self._thread
        if t is not None:
            t.join()
        self._thread = None

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        cancel = getattr(self, "_cancel", None)
        if cancel is not None:
            cancel()
