"""Result objects: GenerateResult (from kvs_generate_result) and WarmResult
(KVBoost's fields, from kvs_warm_report / kvs_warm_docs_report)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ._lib import cstr, ffi, lib, struct_dict

_RESULT_FIELDS = {name for name, _ in ffi.typeof("kvs_generate_result").fields}


@dataclass
class GenerateResult:
    """One generation. cached_tokens: prompt tokens served bit-exactly from
    a cached prefix; moved_tokens: document tokens whose KV was moved into
    place (from the cache, or computed by this request at their own
    positions: docs_computed); recomputed_tokens: those the repair strategy
    recomputed;
    live_tokens: prompt tokens computed by this request. first_logits (with
    generate(..., logits=True), else b""): the n_vocab float32 logits of the
    first generated position, as raw bytes (numpy.frombuffer(r.first_logits,
    numpy.float32)), for bit comparisons."""
    text: str
    tokens: list[int]
    stop_reason: str
    ttft_ms: float
    timings: dict[str, float]
    prompt_tokens: int
    live_tokens: int
    cached_tokens: int
    cache_hit_ratio: float
    moved_tokens: int = 0
    recomputed_tokens: int = 0
    docs_hit: int = 0
    docs_computed: int = 0
    docs_baked: int = 0      # of docs_hit, baked ones (Session.warm(..., doc_set=True))
    chunks_stored: int = 0
    first_logits: bytes = field(default=b"", repr=False)
    top_logprobs: list[tuple[int, float]] = field(default_factory=list)


def stop_reason_of(r, n_predict: int, n_ctx: int, cancelled: bool, model_h) -> str:
    if "stop_reason" in _RESULT_FIELDS:  # the library says it
        return cstr(lib.kvs_stop_reason_name(r.stop_reason))
    # Older headers without stop_reason: read it off the outcome.
    if cancelled:
        return "callback"
    if r.n_tokens >= n_predict:
        return "length"
    if r.n_tokens and lib.kvs_token_is_eog(model_h, r.tokens[r.n_tokens - 1]):
        return "eos"
    return "context" if r.n_prompt + r.n_tokens >= n_ctx else "stop"


def result_from_c(r, stop_reason: str, logits: bool) -> GenerateResult:
    """Copies what the caller needs out of a filled kvs_generate_result (the
    C result is freed right after by the caller)."""
    reuse = getattr(r, "reuse", None) if "reuse" in _RESULT_FIELDS else r
    docs = getattr(r, "docs", None) if "docs" in _RESULT_FIELDS else r
    has_reuse = reuse is not None and reuse != ffi.NULL
    has_docs = docs is not None and docs != ffi.NULL
    if "timings" in _RESULT_FIELDS:
        timings = struct_dict(r.timings)
    else:
        timings = {"prefill_ms": r.prefill_ms, "decode_ms": r.decode_ms,
                   "assemble_ms": r.assemble_ms}
    return GenerateResult(
        text=ffi.string(r.text).decode("utf-8", errors="replace") if r.text != ffi.NULL else "",
        tokens=list(ffi.unpack(r.tokens, r.n_tokens)) if r.n_tokens else [],
        stop_reason=stop_reason,
        ttft_ms=r.ttft_ms,
        timings=timings,
        prompt_tokens=r.n_prompt,
        live_tokens=r.n_live,
        cached_tokens=reuse.n_cached if has_reuse else 0,
        cache_hit_ratio=reuse.cache_hit_ratio if has_reuse else 0.0,
        moved_tokens=docs.n_moved if has_docs else 0,
        recomputed_tokens=docs.n_recomputed if has_docs else 0,
        docs_hit=docs.n_docs_hit if has_docs else 0,
        docs_computed=docs.n_docs_computed if has_docs else 0,
        docs_baked=getattr(docs, "n_docs_baked", 0) if has_docs else 0,
        chunks_stored=reuse.n_chunks_stored if has_reuse else 0,
        first_logits=bytes(ffi.buffer(r.first_logits, 4 * r.n_vocab))
        if logits and r.first_logits != ffi.NULL else b"",
        top_logprobs=[(r.top_ids[i], r.top_logprobs[i]) for i in range(r.n_top)],
    )


@dataclass
class WarmResult:
    """What warm stored, with KVBoost's WarmResult fields first. For a text:
    chunks of chunk_size tokens; for documents (segments) a document is the
    unit: chunks_stored = documents computed and stored now."""
    chunks_stored: int
    token_count: int
    chunk_size: int
    chunk_boundary_aligned: bool
    partial_tail_tokens: int
    alignment_warning: str | None
    chunks_existing: int = 0
    stable_tokens: int = 0   # tokens a continuing prompt is sure to share (BPE border check)
    cached_tokens: int = 0   # tokens whose KV was already cached
    computed_tokens: int = 0
    documents_cached: int = 0
    documents_computed: int = 0
    documents_baked: int = 0       # baked now (bake_with_neighbours / doc_set)
    documents_bake_cached: int = 0  # had a baked entry already (the first baking is kept)
    ms: float = 0.0
    raw: dict[str, Any] = field(default_factory=dict)


def warm_from_report(rep) -> WarmResult:
    warning = ffi.string(rep.warning).decode("utf-8", errors="replace")
    return WarmResult(
        chunks_stored=rep.n_stored, token_count=rep.n_tokens, chunk_size=rep.chunk_tokens,
        chunk_boundary_aligned=bool(rep.aligned), partial_tail_tokens=rep.partial_tail,
        alignment_warning=warning or None, chunks_existing=rep.n_existing,
        stable_tokens=rep.stable_tokens, cached_tokens=rep.n_cached,
        computed_tokens=rep.n_computed, ms=rep.ms,
        raw={k: v for k, v in struct_dict(rep).items() if k != "warning"})


def warm_from_docs_report(rep, chunk_tokens: int) -> WarmResult:
    return WarmResult(
        chunks_stored=rep.n_computed, token_count=rep.n_tokens, chunk_size=chunk_tokens,
        chunk_boundary_aligned=True, partial_tail_tokens=0, alignment_warning=None,
        chunks_existing=rep.n_cached, documents_cached=rep.n_cached,
        documents_computed=rep.n_computed, documents_baked=getattr(rep, "n_baked", 0),
        documents_bake_cached=getattr(rep, "n_bake_cached", 0), ms=rep.ms, raw=struct_dict(rep))
