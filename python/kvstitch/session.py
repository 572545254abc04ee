"""Session: one inference context (kvs_context): generate, stream, warm.

Thread rules: a Model and a Cache are shared by any number of threads; a
Session is used by one call at a time. A second call entering a busy
Session (from another thread, or a generate inside an unfinished stream)
raises SessionBusy instead of corrupting the context. The GIL is released
while the library computes (cffi drops it around every C call), so
Sessions on several threads run in parallel.
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Sequence, Union

from ._errors import Closed, ContextFull, InvalidArgument, SessionBusy, check
from ._inuse import NoCopy
from ._lib import INT_MAX, MAX_THREADS, bool_arg, c_float_arg, c_text, cstr, ffi, int_arg, lib, listed, real_arg, utf8
from ._result import (GenerateResult, WarmResult, result_from_c, stop_reason_of,
                      warm_from_docs_report, warm_from_report)
from .cache import Cache, kv_type_of
from .model import Model
from .segments import CSegments, Document, Question, Segment, System, document_blocks, is_segment_list
from .stream import Stream

Prompt = Union[str, Sequence[int], Sequence[Mapping[str, str]], Sequence[Segment]]


# One reuse parameter struct holding the repair (newer headers), or a
# separate kvs_repair_params for kvs_generate_segments (older ones).
_UNIFIED_REUSE = "repair" in {name for name, _ in ffi.typeof("kvs_reuse_params").fields}


def _prefix_params(a: Mapping[str, Any]):
    rp = lib.kvs_reuse_default_params()
    if a["reuse"] is not None:
        mode = ffi.new("kvs_reuse_mode *")
        check(lib.kvs_reuse_mode_parse(c_text(a["reuse"], "reuse"), mode))
        rp.mode = mode[0]
    rp.store = int(a["store"])
    return ffi.new("kvs_reuse_params *", rp)


def _segment_params(a: Mapping[str, Any]):
    """reuse names the repair strategy here (as `kvstitch generate --doc`)."""
    rep = lib.kvs_repair_default_params()
    if a["reuse"] is not None:
        mode = ffi.new("kvs_repair_mode *")
        name = a["reuse"]
        # "prefix" (a plain prompt's default) is `full` with documents, as the
        # CLI's --reuse prefix --doc (it had been an unknown strategy here)
        check(lib.kvs_repair_mode_parse(c_text("full" if name == "prefix" else name, "reuse"), mode))
        rep.mode = mode[0]
    if a["recompute_ratio"] is not None:
        if rep.mode not in (lib.KVS_REPAIR_CACHEBLEND, lib.KVS_REPAIR_QUERY):  # (it had been dropped without a word)
            raise InvalidArgument(f"recompute_ratio= goes with reuse='query' (the default) or 'cacheblend', "
                                  f"not reuse={a['reuse']!r}")
        rep.recompute_ratio = a["recompute_ratio"]
    if not _UNIFIED_REUSE:
        return ffi.new("kvs_repair_params *", rep)
    rp = lib.kvs_reuse_default_params()
    rp.store = int(a["store"])
    rp.repair = rep
    rp.use_baked = int(a["baked"])
    recal = a["recalibrate"]
    if recal is not None and recal is not False:
        if "recal" not in {name for name, _ in ffi.typeof("kvs_reuse_params").fields}:
            raise InvalidArgument("recalibrate= needs a newer libkvstitch")
        t, s = (0.9, 0.9) if recal is True else recal
        rp.recal.temperature, rp.recal.scale = float(t), float(s)
    return ffi.new("kvs_reuse_params *", rp)


def _check_reuse_name(name: Any) -> None:
    """reuse= names a prefix reuse mode or a repair strategy."""
    text = c_text(name, "reuse")
    if lib.kvs_reuse_mode_parse(text, ffi.new("kvs_reuse_mode *")) == lib.KVS_OK:
        return
    check(lib.kvs_repair_mode_parse(text, ffi.new("kvs_repair_mode *")))


class Session(NoCopy):
    """A context of n_ctx tokens on a Model, optionally with a Cache."""

    def __init__(self, model: Model, cache: Cache | None = None, n_ctx: int = 0,
                 threads: int | None = None, n_batch: int = 0, kv_type: str | None = None,
                 allow_beyond_train: bool = False):
        """n_ctx: 0 = the model's trained length (capped at 8192); threads:
        None = the Model's default (0 = all cores); kv_type: the Cache's, or
        "f16" without a cache; allow_beyond_train: an n_ctx above the model's
        trained context length (the CLI's --ctx-beyond-train: the output
        degrades there unless the model's RoPE scaling covers it)."""
        if not isinstance(model, Model):
            raise InvalidArgument(f"Session needs a Model, got {type(model).__name__}")
        if cache is not None and not isinstance(cache, Cache):  # (before cache.model: AttributeError)
            raise InvalidArgument(f"cache must be a Cache or None, got {type(cache).__name__}")
        if cache is not None and cache.model is not model:
            raise InvalidArgument("Session: the cache belongs to another Model")
        if cache is not None:  # refused here, not at the first call (they had been)
            if cache._h is None:
                raise Closed("Session: the cache was closed")
            if kv_type is not None and kv_type_of(kv_type) != kv_type_of(cache.kv_type):
                raise InvalidArgument(f"Session: kv_type {kv_type!r} differs from the cache's {cache.kv_type!r}")
        p = lib.kvs_context_default_params()
        p.n_ctx = int_arg(n_ctx, "n_ctx", 0, INT_MAX)
        p.n_threads = model.threads if threads is None else int_arg(threads, "threads", 0, MAX_THREADS)
        p.n_batch = int_arg(n_batch, "n_batch", 0, INT_MAX)
        p.kv_type = kv_type_of(kv_type or (cache.kv_type if cache else "f16"))
        p.allow_beyond_train = int(bool_arg(allow_beyond_train, "allow_beyond_train"))
        # The library polls the context before each batch of a forward pass,
        # each generated token and each layer of a repair, on the calling
        # thread (kvs_context_set_should_stop). On the main thread the poll
        # is Python code, where a pending Ctrl-C is raised: it stops the
        # call, which raises the KeyboardInterrupt once it returns (a Ctrl-C
        # had waited for the whole prefill: seconds for a long prompt).
        # A stream's call (another thread) polls its own flag in C (no GIL a
        # token; closing the stream sets it); other threads need no poll. The
        # list is the callback's, not self's: no cycle keeps a Session alive.
        pending: list[BaseException] = []
        self._stop_pending = pending

        def keep_going(user):
            return 0

        def stop_for(kind, value, tb):
            pending.append(value)
            return 1
        self._poll = self._flag_poll = None
        if hasattr(lib, "kvs_context_set_should_stop"):  # newer libraries
            self._poll = ffi.callback("kvs_stop_callback", keep_going, onerror=stop_for)
            self._flag_poll = ffi.addressof(lib, "kvs_stop_when_set")
        out = ffi.new("kvs_context **")
        self._busy = threading.Lock()
        # the stream whose call holds the Session ([cancelled]), None: a
        # stream closed or dropped (a break out of its loop) ends its call at
        # its next token or prefill batch, and the next call waits for that
        # (it had raised SessionBusy); a close after its call ended changes
        # only its own, released, state
        self._holder: list | None = None
        with model._using() as mh:
            check(lib.kvs_context_new(mh, p, out))
            self._h = ffi.gc(out[0], lib.kvs_context_free)
            # while the model is in use: a Model.close() in another thread sees
            # the call or this child, never neither (it had freed the model
            # between the two, and the next generate crashed)
            model._children.add(self)
        self.model, self.cache = model, cache
        self.n_ctx = lib.kvs_context_n_ctx(self._h)

    # --- one call at a time ---------------------------------------------------
    def _acquire(self) -> None:
        if self._h is None:
            raise Closed("the session was closed")
        holder = self._holder
        if not self._busy.acquire(blocking=False) and not (holder and holder[0] and self._busy.acquire(timeout=30)):
            raise SessionBusy("this Session is running another call (one Session per thread; "
                              "finish or close a stream before the next call)")

    def close(self) -> None:
        """Frees the context now (otherwise when the Session is garbage). A
        second close does nothing, as Model's and Cache's."""
        if self._h is None:
            return
        self._acquire()
        try:
            h, self._h = self._h, None  # first: see InUse._close_unused
            ffi.release(h)
            self.model._children.discard(self)  # closed: no longer holds the model
        finally:
            self._busy.release()

    def _arm(self, flag: Any = None) -> None:
        """Before a call that may run a forward pass: the flag poll on flag
        (a stream's), else the Python poll on the main thread, else none."""
        self._stop_pending.clear()
        if self._poll is None:
            return
        if flag is not None:
            lib.kvs_context_set_should_stop(self._h, self._flag_poll, flag)
        elif threading.current_thread() is threading.main_thread():
            lib.kvs_context_set_should_stop(self._h, self._poll, ffi.NULL)
        else:
            lib.kvs_context_set_should_stop(self._h, ffi.NULL, ffi.NULL)

    def _raise_pending(self) -> None:
        """Raises what a poll or a token callback caught (a KeyboardInterrupt:
        the call stopped for it), once."""
        e = self._stop_pending[0]
        self._stop_pending.clear()
        raise e

    def _checked(self, status: int) -> None:
        """check(status) of a call that may have been stopped by a poll: what
        stopped it is raised instead of the status."""
        if self._stop_pending:
            self._raise_pending()
        check(status)

    # --- generate -------------------------------------------------------------
    def generate(self, prompt: Prompt, max_tokens: int = 128, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, min_p: float = 0.0, repeat_penalty: float = 1.0,
                 presence_penalty: float = 0.0, frequency_penalty: float = 0.0,
                 stop: Sequence[str] | None = None, seed: int = 0,
                 documents: Sequence[str | Document] | None = None, system: str | None = None,
                 chat: bool | None = None, reuse: str | None = None,
                 recompute_ratio: float | None = None, store: bool = True, logprobs: int = 0,
                 logits: bool = False, add_bos: bool = True, baked: bool = True,
                 recalibrate: bool | tuple[float, float] | None = None) -> GenerateResult:
        """Generates from prompt: a text, token ids, chat messages
        ([{"role", "content"}]) or blocks ([System, Document..., Question]).
        documents / system with a text prompt make blocks of it.

        reuse: for plain prompts "prefix" (default with a cache: the longest
        cached prefix, bit-identical to a cold run) or "none"; for documents
        the repair strategy: "query" (default: the moved tokens the question
        attends to most), "cacheblend", "selective", "firstk", "none" or
        "full" (a cold prefill's bits; "prefix" means it too, as the CLI's). recompute_ratio: the share of moved
        tokens recomputed (query, cacheblend). baked: move a document's baked
        KV (warm(..., doc_set=True)) when cached (default), else its plain
        KV. recalibrate: APE's attention recalibration of the question and
        the output over the moved documents: True (temperature 0.9, scale
        0.9) or (temperature, scale), each 0.1..4. temperature <= 0: greedy. logprobs:
        how many (id, logprob) pairs of the first position to return.
        logits: also return the first position's raw logits (first_logits,
        n_vocab float32 as bytes: what bit-exactness is checked on)."""
        self._acquire()
        try:
            return self._run(self._build(locals()), None)
        finally:
            self._busy.release()

    def stream(self, prompt: Prompt, **kw: Any) -> Stream:
        """Like generate, but returns a Stream that yields text pieces as they
        are generated; stream.result holds the GenerateResult once it ends.
        Closing the stream early (or leaving its `with` block) stops
        generation. The Session is busy until the stream ends or is closed."""
        self._acquire()
        try:
            # built once, here: argument errors raise on this thread, and an
            # iterator given as documents= is read once (a second build had
            # found it empty and dropped the documents)
            a = self._build(dict(kw, prompt=prompt))
        except BaseException:
            self._busy.release()
            raise
        # close() before the first token stops the prefill at its next batch
        # (the flag poll); after it the token callback stops the generation,
        # which ends as "callback" with its result
        flag, token_seen = ffi.new("int *"), [False]

        state = [False]  # cancelled
        self._holder = state

        def cancel() -> None:
            state[0] = True
            if not token_seen[0]:
                # atomic: the poll reads it on the stream's thread (a plain
                # store had been a data race, ThreadSanitizer)
                if hasattr(lib, "kvs_stop_flag_set"):
                    lib.kvs_stop_flag_set(flag, 1)
                else:  # an older library
                    flag[0] = 1

        def release() -> None:
            self._holder = None
            self._busy.release()
        return Stream(lambda on_token: self._run(a, on_token, flag, token_seen), release, cancel)

    # --- internals ------------------------------------------------------------
    _DEFAULTS = dict(max_tokens=128, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0,
                     repeat_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
                     stop=None, seed=0, documents=None, system=None,
                     chat=None, reuse=None, recompute_ratio=None, store=True, logprobs=0,
                     logits=False, add_bos=True, baked=True, recalibrate=None)

    def _build(self, kw: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(kw) - set(self._DEFAULTS) - {"prompt", "self"}
        if unknown:
            raise TypeError(f"unknown argument(s): {', '.join(sorted(unknown))}")
        a = dict(self._DEFAULTS, **{k: v for k, v in kw.items() if k != "self"})
        # checked here so the message names this API's arguments (the C
        # library would name its own fields, n_predict and n_top_logprobs)
        for name, top in (("max_tokens", 2**31 - 1), ("logprobs", 2**31 - 1), ("seed", 2**64 - 1),
                          ("top_k", 2**31 - 1)):
            a[name] = int_arg(a[name], name, 0, top)  # (2**40 had raised cffi's OverflowError)
        for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty"):
            a[name] = c_float_arg(real_arg(a[name], name), name,  # a str or None had raised cffi's TypeError
                                  zero_ok=name not in ("top_p", "repeat_penalty"))
        for name in ("presence_penalty", "frequency_penalty"):  # the CLI's and the server's range (OpenAI's)
            if not -2.0 <= a[name] <= 2.0:  # (any finite value had been taken)
                raise InvalidArgument(f"{name} must be in [-2, 2], as the CLI and the server take it, got {a[name]!r}")
        if a["recompute_ratio"] is not None:
            a["recompute_ratio"] = real_arg(a["recompute_ratio"], "recompute_ratio")
            if not 0.0 <= a["recompute_ratio"] <= 1.0:  # here: a C float had made 1e300 "inf" in the message
                raise InvalidArgument(f"recompute_ratio must be in [0, 1], got {a['recompute_ratio']!r}")
        recal = a["recalibrate"]
        if not (recal is None or isinstance(recal, bool) or
                (isinstance(recal, (tuple, list)) and len(recal) == 2 and
                 all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in recal))):
            raise InvalidArgument(f"recalibrate must be True, False, None or (temperature, scale), got {recal!r}")
        if isinstance(recal, (tuple, list)) and not all(0.1 <= x <= 4 for x in recal):
            # checked on every prompt (a plain one had taken (9, 9) without a word; 10**400 raised
            # OverflowError)
            raise InvalidArgument(f"recalibrate's temperature and scale must each be in 0.1..4, got {tuple(recal)!r}")
        # one stop string may come alone, as OpenAI's stop does (a str had been
        # taken as its characters, each a stop string)
        if isinstance(a["stop"], str):
            a["stop"] = [a["stop"]]
        elif a["stop"] is not None:
            if isinstance(a["stop"], (bytes, bytearray)):  # (its items had been named as ints)
                raise InvalidArgument(f"stop must be a str or a list of str, got {type(a['stop']).__name__}")
            a["stop"] = listed(a["stop"], "stop", "a str or a list of str")
        if isinstance(a["documents"], (str, bytes, Mapping)):
            raise InvalidArgument("documents must be a list of texts or Documents, not one "
                                  f"{type(a['documents']).__name__} (it had become one document a character, "
                                  "or a dict its keys)")
        if a["documents"] is not None:
            a["documents"] = listed(a["documents"], "documents", "a list of texts or Documents")
        for name in ("store", "logits", "add_bos", "baked"):
            a[name] = bool_arg(a[name], name)
        if a["chat"] is not None:
            a["chat"] = bool_arg(a["chat"], "chat")
        if a["reuse"] is not None and self.cache is None:  # (ignored there: a typo went unseen)
            _check_reuse_name(a["reuse"])
        prompt = a["prompt"]
        if a["system"] is not None and a["documents"] is None and (not isinstance(prompt, str) or
                                                                  a["chat"] is False):
            # it had been dropped without a word
            raise InvalidArgument("system= goes with a text prompt in chat (or with documents=); "
                                  "for chat messages put it first in the messages")
        if a["system"] is not None and a["documents"] is None and self.cache is None:
            # no cache to keep the system prompt's KV in: a plain chat prompt
            # (it had said "documents need a Session with a Cache")
            prompt = [{"role": "system", "content": a["system"]}, {"role": "user", "content": prompt}]
            a["system"] = None
        if a["documents"] is not None or (isinstance(prompt, str) and a["system"] is not None
                                          and a["chat"] is not False):
            if not isinstance(prompt, str):
                raise InvalidArgument("documents=/system= go with a text prompt (the question)")
            blocks = ([System(a["system"])] if a["system"] is not None else []) + \
                document_blocks(a["documents"]) + \
                [Question(prompt)]
            prompt = blocks
        if is_segment_list(prompt):
            if self.cache is None:
                raise InvalidArgument("documents need a Session with a Cache")
            a["segments"] = CSegments(prompt, chat=a["chat"] is not False)
        else:
            if a["recompute_ratio"] is not None:  # (it had been dropped without a word)
                raise InvalidArgument("recompute_ratio= goes with documents (the share of their moved tokens "
                                      "recomputed); this prompt has none")
            if a["recalibrate"] not in (None, False):  # (likewise)
                raise InvalidArgument("recalibrate= goes with documents (the question's attention to their "
                                      "moved KV); this prompt has none")
            a["tokens"] = self._tokens(prompt, a["chat"], a["add_bos"])
        return a

    def _tokens(self, prompt: Any, chat: bool | None, add_bos: bool) -> list[int]:
        if isinstance(prompt, str):
            if chat:
                prompt = [{"role": "user", "content": prompt}]
            else:
                return self.model.tokenize(prompt, add_bos=add_bos)
        if isinstance(prompt, (list, tuple)) and prompt and isinstance(prompt[0], Mapping):
            if chat is False:  # (they had been rendered as chat anyway)
                raise InvalidArgument("chat=False with chat messages: messages are laid out by the chat "
                                      "template; give a text for a plain prompt")
            text = self.model.render_chat(prompt, add_generation_prompt=True)
            return self.model.tokenize(text, add_bos=add_bos, special=True)
        if isinstance(prompt, (list, tuple)) and prompt and \
                not any(isinstance(t, (str, bytes, Mapping)) for t in prompt):
            # each an integer (numpy's too; not a bool), in int32's range:
            # 2**40 had raised cffi's OverflowError naming nothing
            if chat:  # (ignored without a word)
                raise InvalidArgument("chat=True with token ids: ids run as given; render chat messages "
                                      "with model.render_chat and tokenize them instead")
            return [int_arg(t, f"prompt[{i}]", 0, 2**31 - 1) for i, t in enumerate(prompt)]
        raise InvalidArgument("prompt: expected a str, token ids, chat messages or "
                              "[System, Document..., Question] blocks (non-empty)")

    def _run(self, a: Mapping[str, Any], on_token: Callable[[int, bytes], bool] | None,
             stop_flag: Any = None, token_seen: list | None = None) -> GenerateResult:
        gp = lib.kvs_generate_default_params()
        gp.n_predict = a["max_tokens"]
        s = gp.sampling
        s.temperature, s.top_k, s.top_p, s.min_p = a["temperature"], a["top_k"], a["top_p"], a["min_p"]
        s.repeat_penalty, s.seed = a["repeat_penalty"], a["seed"]
        s.presence_penalty, s.frequency_penalty = a["presence_penalty"], a["frequency_penalty"]
        gp.sampling = s
        keep = [ffi.new("char[]", c_text(x, "a stop string")) for x in a["stop"] or []]
        stops = ffi.new("char *[]", keep) if keep else ffi.NULL
        gp.stop, gp.n_stop = stops, len(keep)
        gp.n_top_logprobs = a["logprobs"]
        cancelled, interrupted = [False], self._stop_pending
        self._arm(stop_flag)

        # A callback where there is work for it: on_token, or (without the
        # context's should_stop poll, an older library) a Ctrl-C to see:
        # Python code on the calling thread every token, where the
        # KeyboardInterrupt is raised; the generation then stops and it is
        # raised once the call returns (without one, a Ctrl-C waited for the
        # whole generation, 10 s for 3000 tokens, and its result was lost).
        def trampoline(user, token, piece, n):
            if token_seen is not None:
                token_seen[0] = True
            if on_token is None:
                return 0
            stop_now = on_token(token, ffi.unpack(piece, n) if n else b"")
            cancelled[0] = cancelled[0] or bool(stop_now)
            return int(bool(stop_now))

        def stop_on_error(kind, value, tb):
            if not isinstance(value, Exception):  # KeyboardInterrupt, SystemExit: raised after the call
                interrupted.append(value)
            return 1
        cb = None
        if on_token is not None or (self._poll is None and threading.current_thread() is threading.main_thread()):
            cb = ffi.callback("kvs_token_callback", trampoline, onerror=stop_on_error)
            gp.on_token = cb
        r = ffi.new("kvs_generate_result *")
        cache_h = self.cache._enter() if self.cache is not None else None
        try:
            if "segments" in a:
                status = lib.kvs_generate_segments(self._h, cache_h, a["segments"].c, ffi.addressof(gp),
                                                   _segment_params(a), r)
            else:
                toks = ffi.new("int32_t[]", a["tokens"])
                if cache_h is not None:
                    status = lib.kvs_generate_cached(self._h, cache_h, toks, len(a["tokens"]),
                                                     ffi.addressof(gp), _prefix_params(a), r)
                else:
                    status = lib.kvs_generate(self._h, toks, len(a["tokens"]), ffi.addressof(gp), r)
        finally:
            if self.cache is not None:
                self.cache._leave()
        if interrupted:  # a Ctrl-C (or another exception) in a poll or a token callback stopped it
            lib.kvs_generate_result_free(r)
            self._raise_pending()
        check(status)
        try:
            why = stop_reason_of(r, a["max_tokens"], self.n_ctx, cancelled[0], self.model._handle())
            return result_from_c(r, why, a["logits"])
        finally:
            lib.kvs_generate_result_free(r)

    # --- warm -----------------------------------------------------------------
    def warm(self, text: str | Sequence[int] | Sequence[Segment] | None = None,
             documents: Sequence[str | Document] | None = None, chat: bool | None = None,
             add_bos: bool = True, bake_with_neighbours: int = 0, doc_set: bool = False) -> WarmResult:
        """Caches KV without generating. A text (or token ids): its chunks, as
        a later generate(text + more) would reuse them (same add_bos), with
        KVBoost's WarmResult fields and the BPE border check. Documents
        (documents=[...] or blocks): each document's KV, as generate(...,
        documents=...) with the same chat layout reuses it (blocks' System and
        Question only lay the documents out: the question is not stored). With
        bake_with_neighbours=K or doc_set=True the documents are also baked:
        each computed again after the cached KV of its K most similar
        neighbours (doc_set: all the others) and stored as its baked entry,
        which generate(..., documents=...) moves instead of the plain one.
        chat (documents: True by default) lays documents out as a chat's; a
        text is warmed as given (lay a chat out with model.render_chat).
        doc_set and bake_with_neighbours go with documents only."""
        if self.cache is None:
            raise InvalidArgument("warm needs a Session with a Cache")
        add_bos, doc_set = bool_arg(add_bos, "add_bos"), bool_arg(doc_set, "doc_set")
        chat = None if chat is None else bool_arg(chat, "chat")
        # (0: no baking; the CLI's --bake-with-neighbours range, 1..255, else: a
        # document's origin records at most 255 neighbours)
        bake_with_neighbours = int_arg(bake_with_neighbours, "bake_with_neighbours", 0, 255)
        if documents is None and not is_segment_list(text):  # (each had been dropped without a word)
            if chat:
                raise InvalidArgument("chat=True lays out documents; a text is warmed as given "
                                      "(lay a chat out with model.render_chat(...) first)")
            if doc_set or bake_with_neighbours:
                raise InvalidArgument("doc_set / bake_with_neighbours bake documents: give documents=")
        chat = chat is not False
        self._acquire()
        try:
            cache_h = self.cache._enter()
        except BaseException:  # a closed cache: the Session stays usable (it had stayed busy for ever)
            self._busy.release()
            raise
        try:
            self._arm()
            if documents is not None and text is not None:  # the text had been dropped without a word
                raise InvalidArgument("warm takes a text (or blocks) or documents=, not both")
            if isinstance(documents, (str, bytes, Mapping)):  # as generate refuses it
                raise InvalidArgument("documents must be a list of texts or Documents, not one "
                                      f"{type(documents).__name__}")
            if documents is not None or is_segment_list(text):
                blocks = list(text) if is_segment_list(text) else \
                    document_blocks(documents)
                where = "segments" if documents is None else "documents"
                for i, b in enumerate(blocks):  # (it had been dropped: a successful warm that stored nothing)
                    if isinstance(b, Document) and b.cache is False:
                        raise InvalidArgument(f"{where}[{i}]: a Document(cache=False) is computed with the "
                                              "question every time: warm has nothing to store for it")
                seg = CSegments(blocks, chat=chat)
                rep = ffi.new("kvs_warm_docs_report *")
                if doc_set and bake_with_neighbours:
                    raise InvalidArgument("give doc_set=True or bake_with_neighbours=K, not both")
                k = -1 if doc_set else bake_with_neighbours
                st = lib.kvs_bake_docs(self._h, cache_h, seg.c, k, rep) if k else \
                    lib.kvs_warm_docs(self._h, cache_h, seg.c, rep)
                if st == lib.KVS_ERR_CONTEXT_FULL and not self._stop_pending and \
                        0 <= rep.too_long_doc < len(seg.doc_block):  # named by where the caller put it
                    where = "segments" if documents is None else "documents"
                    raise ContextFull(f"{where}[{seg.doc_block[rep.too_long_doc]}]: "
                                      f"{cstr(lib.kvs_last_error())}", st)
                self._checked(st)
                return warm_from_docs_report(rep, self.cache.stats()["chunk_tokens"])
            rep = ffi.new("kvs_warm_report *")
            if isinstance(text, str):
                data = utf8(text, "the text")
                flags = lib.KVS_TOKENIZE_ADD_BOS if add_bos else 0
                self._checked(lib.kvs_warm_text(self._h, cache_h, data, len(data), flags, rep))
            else:
                toks = self._tokens(text, False, add_bos)
                self._checked(lib.kvs_warm(self._h, cache_h, ffi.new("int32_t[]", toks), len(toks), rep))
            return warm_from_report(rep)
        finally:
            self.cache._leave()
            self._busy.release()

    def __repr__(self) -> str:
        return f"kvstitch.Session(n_ctx={self.n_ctx}, cache={self.cache is not None})"
