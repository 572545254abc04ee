"""Model: a loaded GGUF file (kvs_model), its tokenizer and chat template."""
from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

from ._errors import Closed, InvalidArgument, check
from ._inuse import InUse, NoCopy
from ._lib import MAX_THREADS, bool_arg, c_path, c_text, cstr, ffi, int_arg, lib, listed, utf8


@dataclass(frozen=True)
class ModelInfo:
    """What kvs_model_get_info reports (architecture, sizes, tokenizer)."""
    path: str
    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int
    n_ctx_train: int
    n_vocab: int
    n_params: int
    tokenizer_model: str
    chat_template_family: str
    bos_id: int
    eos_id: int
    raw: Mapping[str, Any]  # every field of kvs_model_info, strings decoded


class Model(InUse, NoCopy):
    """A GGUF model, mmapped read-only. Immutable once loaded: share one Model
    across threads freely. Caches and Sessions keep their Model alive."""

    def __init__(self, handle, path: str, threads: int):
        self._init_in_use()
        self._h = handle
        self.path = path
        self.threads = threads  # default thread count of the Sessions made from it
        self._children: "weakref.WeakSet[Any]" = weakref.WeakSet()

    @classmethod
    def load(cls, path: str | bytes | os.PathLike, threads: int = 0, vocab_only: bool = False,
             chat_template: str | None = None) -> "Model":
        """Loads a GGUF file. threads: default for Sessions (0 = all cores).
        chat_template: the template family every chat layout of this model
        uses ("chatml", "qwen3", "llama3", "llama2", "gemma"; None: the one
        the file's tokenizer.chat_template names), for a file without one.
        Raises FileError / FormatError / Unsupported / InvalidArgument naming
        what is wrong."""
        threads = int_arg(threads, "threads", 0, MAX_THREADS)  # the CLI's bound (1000 threads had taken 55 s for 4 tokens)
        c = c_path(path, "the model path")
        path = os.fsdecode(c)
        params = lib.kvs_model_default_params()
        params.vocab_only = int(bool_arg(vocab_only, "vocab_only"))
        family = ffi.new("char[]", c_text(chat_template, "chat_template")) if chat_template is not None else ffi.NULL
        params.chat_template = family  # (copied by the load)
        out = ffi.new("kvs_model **")
        check(lib.kvs_model_load(c, params, out))
        return cls(ffi.gc(out[0], lib.kvs_model_free), path, threads)

    def close(self) -> None:
        """Frees the model now (otherwise when it is garbage). Refused while a
        Cache or Session made from it is open, or a call on it runs."""
        def children() -> str | None:  # asked under the lock a Session's / Cache's creation holds
            n = len(self._children)
            return f"{self.path}: {n} caches/sessions still use this model" if n else None
        self._close_unused(f"{self.path}: the model", children)

    def _handle(self):
        if self._h is None:
            raise Closed(f"{self.path}: the model was closed")
        return self._h

    @property
    def info(self) -> ModelInfo:
        c = ffi.new("kvs_model_info *")
        with self._using() as h:
            lib.kvs_model_get_info(h, c)
        raw = {}
        for name, field in ffi.typeof("kvs_model_info").fields:
            v = getattr(c, name)
            raw[name] = cstr(v) if field.type.cname == "char *" else v
        return ModelInfo(**{k: raw[k] for k in ModelInfo.__dataclass_fields__ if k != "raw"}, raw=raw)

    @property
    def n_vocab(self) -> int:
        with self._using() as h:
            return lib.kvs_vocab_size(h)

    def tokenize(self, text: str, add_bos: bool = True, special: bool = False) -> list[int]:
        """Token ids of text. add_bos: as the vocabulary asks (SmolLM2 asks for
        none); special: recognise control tokens such as <|im_start|>."""
        if not isinstance(text, str):  # bytes had raised AttributeError
            raise InvalidArgument(f"tokenize takes a str, got {type(text).__name__}")
        data = utf8(text, "the text")
        # (a truthiness test had taken add_bos=None and special="x")
        flags = (lib.KVS_TOKENIZE_ADD_BOS if bool_arg(add_bos, "add_bos") else 0) | \
                (lib.KVS_TOKENIZE_PARSE_SPECIAL if bool_arg(special, "special") else 0)
        n = ffi.new("int *")
        cap = len(data) + 8  # enough for any text but hostile vocabularies: then retried
        with self._using() as h:
            while True:
                buf = ffi.new("int32_t[]", cap)
                st = lib.kvs_tokenize(h, data, len(data), flags, buf, cap, n)
                if st != lib.KVS_ERR_BUFFER_TOO_SMALL:
                    check(st)
                    return list(ffi.unpack(buf, n[0]))
                cap = n[0]

    def detokenize(self, ids: Iterable[int], render_special: bool = False) -> str:
        """Text of ids (invalid UTF-8 sequences become U+FFFD)."""
        ids = listed(ids, "ids", "a list of token ids")
        d = ffi.new("kvs_detok **")
        cap = 256
        buf, n = ffi.new("char[]", cap), ffi.new("size_t *")
        parts = []
        with self._using() as h:  # the detokenizer reads the model's vocabulary
            check(lib.kvs_detok_new(h, int(bool_arg(render_special, "render_special")), d))  # ("y": ValueError)
            det = ffi.gc(d[0], lib.kvs_detok_free)
            try:
                for t in ids:  # ints only: int() had taken 1.7 and "65"; 2**40 raised naming nothing
                    check(lib.kvs_detok_push(det, int_arg(t, "token id", -2**31, 2**31 - 1), buf, cap, n))
                    parts.append(ffi.unpack(buf, n[0]))
                check(lib.kvs_detok_flush(det, buf, cap, n))
                parts.append(ffi.unpack(buf, n[0]))
            finally:
                ffi.release(det)
        return b"".join(parts).decode("utf-8", errors="replace")

    def render_chat(self, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True,
                    family: str | None = None) -> str:
        """messages ({"role", "content"}) laid out in the model's chat template."""
        messages = listed(messages, "messages", "a list of {'role', 'content'} mappings")
        keep = []
        for i, m in enumerate(messages):  # a missing key had raised KeyError
            if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
                raise InvalidArgument(f"messages[{i}] must be a mapping with 'role' and 'content', got {m!r:.80}")
            keep.append((c_text(m["role"], f"messages[{i}].role"), c_text(m["content"], f"messages[{i}].content")))
        msgs = ffi.new("kvs_chat_message[]", len(keep))
        owners = []
        for i, (role, content) in enumerate(keep):
            r, c = ffi.new("char[]", role), ffi.new("char[]", content)
            owners += [r, c]
            msgs[i].role, msgs[i].content = r, c
        out = ffi.new("char **")
        with self._using() as h:
            # ("" is a name the renderer refuses, not "the model's own": it had been taken so)
            check(lib.kvs_chat_render(h, c_text(family, "family") if family is not None else ffi.NULL,
                                      msgs, len(keep), int(bool_arg(add_generation_prompt, "add_generation_prompt")),
                                      out))
        try:
            return ffi.string(out[0]).decode("utf-8")
        finally:
            lib.kvs_free(out[0])

    def segment_tokens(self, blocks: Sequence[Any], chat: bool = True) -> list[int]:
        """The token sequence Session.generate runs for blocks ([System,
        Document..., Question]): a cold generate over exactly these tokens is
        the baseline that reuse="full" reproduces bit for bit."""
        from .segments import CSegments  # segments imports nothing of model
        seg = CSegments(listed(blocks, "blocks", "a list of System, Document and Question blocks"), chat=chat)
        toks, n = ffi.new("int32_t **"), ffi.new("int *")
        with self._using() as h:
            check(lib.kvs_segments_tokenize(h, seg.c, toks, n))
        try:
            return list(ffi.unpack(toks[0], n[0]))
        finally:
            lib.kvs_free(toks[0])

    def __repr__(self) -> str:
        return f"kvstitch.Model({self.path!r})"
