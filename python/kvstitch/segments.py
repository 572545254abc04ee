"""Prompt blocks for non-prefix reuse (RAG), mellea's idea of marking the
cacheable blocks of a prompt: a list such as

    [kvstitch.System("Answer from the passages."),
     kvstitch.Document(passage_a), kvstitch.Document(passage_b),
     kvstitch.Question("When was the tower built?")]

is passed to Session.generate / Session.warm. Documents are cached by their
content and reused in any order (moved into place, then repaired); the
system block takes the exact-prefix path; the question is always computed.
A Document(cache=False) is live text: it is allowed only after the cached
documents and is computed with the question (kvs_segments has one live
tail), so its KV is never stored.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence, Union

from ._errors import InvalidArgument
from ._lib import bool_arg, c_text, ffi


@dataclass(frozen=True)
class System:
    """The system message (chat layout) or leading text."""
    text: str


@dataclass(frozen=True)
class Document:
    """A retrieved passage. cache=True: its KV is cached and reused wherever
    it appears; cache=False: computed every time, with the question."""
    text: str
    cache: bool = True


@dataclass(frozen=True)
class Question:
    """The live tail: the user's question."""
    text: str


Segment = Union[System, Document, Question]


def document_blocks(documents: Sequence[str | Document] | None) -> list[Document]:
    """documents= as Document blocks; an empty one is refused, naming it (it
    was skipped without a word, where the server answers 400 and the CLI
    refuses an empty --doc)."""
    blocks = [d if isinstance(d, Document) else Document(d) for d in documents or []]
    for i, d in enumerate(blocks):
        if not isinstance(d.text, str):  # named as passed (it had been the blocks' index, "segments[1]")
            raise InvalidArgument(f"documents[{i}]: a document must be a str or a Document of a str, "
                                  f"got {type(d.text).__name__}")
        if not d.text:
            raise InvalidArgument(f"documents[{i}] is empty")
    return blocks


def is_segment_list(prompt: object) -> bool:
    return isinstance(prompt, (list, tuple)) and len(prompt) > 0 and \
        all(isinstance(s, (System, Document, Question)) for s in prompt)


class CSegments:
    """A kvs_segments struct and the buffers it points to (kept alive here)."""

    def __init__(self, blocks: Sequence[Segment], chat: bool = True, doc_prefix: str | None = None):
        system, docs, live = None, [], []
        self.doc_block = []  # the index in blocks of each document of the struct
        for i, b in enumerate(blocks):
            if isinstance(b, (System, Document, Question)) and not isinstance(b.text, str):
                # None or bytes had raised naming nothing (and a System(None) was dropped)
                raise InvalidArgument(f"segments[{i}]: {type(b).__name__} text must be a str, "
                                      f"got {type(b.text).__name__}")
            if isinstance(b, System):
                if system is not None or docs or live:
                    raise InvalidArgument(f"segments[{i}]: System must come first, once")
                system = b.text
            elif isinstance(b, Document) and bool_arg(b.cache, f"segments[{i}].cache"):  # ("no" had been True)
                if live:
                    raise InvalidArgument(f"segments[{i}]: a cached Document after live text "
                                          "(Document(cache=False) or Question) is not supported: "
                                          "put cached documents first")
                docs.append(b.text)
                self.doc_block.append(i)
            elif isinstance(b, (Document, Question)):
                live.append(b.text)
            else:
                raise InvalidArgument(f"segments[{i}]: {type(b).__name__} is not a System, "
                                      "Document or Question")
        self.n_docs = len(docs)
        self._keep: list = []
        s = ffi.new("kvs_segments *")
        s.chat = int(bool_arg(chat, "chat"))
        s.system = self._str(system, "the system prompt")
        s.question = self._str("".join(live), "the question") if live else ffi.NULL
        s.doc_prefix = self._str(doc_prefix, "the document prefix")
        arr = ffi.new("char *[]", max(1, len(docs)))
        lens = ffi.new("size_t[]", max(1, len(docs)))
        for i, d in enumerate(docs):
            b = c_text(d, f"document {i}")  # (a lone surrogate had raised UnicodeEncodeError here)
            p = ffi.new("char[]", b)
            self._keep.append(p)
            arr[i], lens[i] = p, len(b)
        self._keep += [arr, lens]
        s.docs, s.doc_lens, s.n_docs = arr, lens, len(docs)
        self.c = s

    def _str(self, text: str | None, what: str):
        if text is None:
            return ffi.NULL
        p = ffi.new("char[]", c_text(text, what))
        self._keep.append(p)
        return p
