"""Documents in any order: blocks, cached documents moved into place, the
repair strategies; reuse="full" reproduces a cold run bit for bit."""
import kvstitch
from conftest import DOC_A, DOC_B, QUESTION

SYSTEM = "Answer from the passages."


def test_documents_in_any_order(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=1024)
    first = s.generate(QUESTION, system=SYSTEM, documents=[DOC_A, DOC_B], max_tokens=4, logits=True)
    assert first.docs_computed == 2 and first.docs_hit == 0
    swapped = s.generate(QUESTION, system=SYSTEM, documents=[DOC_B, DOC_A], max_tokens=4, logits=True)
    n_doc_tokens = len(model.tokenize(DOC_A, add_bos=False)) + len(model.tokenize(DOC_B, add_bos=False))
    assert swapped.docs_hit == 2 and swapped.docs_computed == 0
    assert swapped.moved_tokens == n_doc_tokens
    assert 0 < swapped.recomputed_tokens < n_doc_tokens   # query (the default): a share, not all
    assert swapped.cached_tokens > 0                      # the system turn: exact prefix
    none = s.generate(QUESTION, system=SYSTEM, documents=[DOC_B, DOC_A], max_tokens=4, logits=True, reuse="none")
    assert none.recomputed_tokens == 0 and none.moved_tokens == n_doc_tokens
    more = s.generate(QUESTION, system=SYSTEM, documents=[DOC_B, DOC_A], max_tokens=4, logits=True,
                      recompute_ratio=1.0)
    assert more.recomputed_tokens >= swapped.recomputed_tokens


def test_full_repair_is_cold_bits(model, cache):
    blocks = [kvstitch.System(SYSTEM), kvstitch.Document(DOC_B), kvstitch.Document(DOC_A),
              kvstitch.Question(QUESTION)]
    s = kvstitch.Session(model, cache, n_ctx=1024)
    s.generate(QUESTION, system=SYSTEM, documents=[DOC_A, DOC_B], max_tokens=1, logits=True)  # cache the docs
    full = s.generate(blocks, max_tokens=6, logits=True, reuse="full")
    cold = kvstitch.Session(model, n_ctx=1024).generate(model.segment_tokens(blocks), max_tokens=6, logits=True)
    assert full.first_logits == cold.first_logits and full.tokens == cold.tokens


def test_blocks_equal_documents_argument(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=1024)
    a = s.generate(QUESTION, system=SYSTEM, documents=[DOC_A, DOC_B], max_tokens=4, logits=True)
    b = s.generate([kvstitch.System(SYSTEM), kvstitch.Document(DOC_A), kvstitch.Document(DOC_B),
                    kvstitch.Question(QUESTION)], max_tokens=4, logits=True)
    assert a.prompt_tokens == b.prompt_tokens and b.docs_hit == 2


def test_warm_documents_then_generate(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=1024)
    w = s.warm(documents=[DOC_A, DOC_B])
    assert w.documents_computed == 2 and w.chunks_stored == 2 and w.token_count > 0
    assert s.warm(documents=[DOC_B, DOC_A]).documents_cached == 2
    r = s.generate(QUESTION, documents=[DOC_B, DOC_A], max_tokens=2, logits=True)
    assert r.docs_hit == 2 and r.docs_computed == 0


def test_uncached_document_is_live(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=1024)
    r = s.generate([kvstitch.Document(DOC_A), kvstitch.Document(DOC_B, cache=False),
                    kvstitch.Question(QUESTION)], max_tokens=2, logits=True)
    assert r.docs_computed == 1   # only the cached one became a cache entry
    r2 = s.generate([kvstitch.Document(DOC_A), kvstitch.Document(DOC_B, cache=False),
                     kvstitch.Question(QUESTION)], max_tokens=2, logits=True)
    assert r2.docs_hit == 1 and r2.docs_computed == 0


def test_reuse_prefix_with_documents_is_full(model, cache):
    """reuse="prefix" with documents is `full`, as the CLI's --reuse prefix
    --doc (it had been "unknown repair strategy")."""
    s = kvstitch.Session(model, cache, n_ctx=1024)
    a = s.generate(QUESTION, documents=[DOC_A, DOC_B], max_tokens=2, logits=True, reuse="prefix")
    b = s.generate(QUESTION, documents=[DOC_A, DOC_B], max_tokens=2, logits=True, reuse="full")
    assert a.first_logits == b.first_logits


def test_warm_refuses_an_uncached_document(model, cache):
    """warm has nothing to store for a Document(cache=False): refused, naming
    it (a successful warm had stored nothing)."""
    s = kvstitch.Session(model, cache, n_ctx=1024)
    for kw in ({"documents": [DOC_A, kvstitch.Document(DOC_B, cache=False)]},):
        try:
            s.warm(**kw)
            raise AssertionError("a Document(cache=False) was warmed")
        except kvstitch.InvalidArgument as e:
            assert "documents[1]" in str(e) and "cache=False" in str(e), e
    try:
        s.warm([kvstitch.Document(DOC_A), kvstitch.Document(DOC_B, cache=False), kvstitch.Question(QUESTION)])
        raise AssertionError("a Document(cache=False) among blocks was warmed")
    except kvstitch.InvalidArgument as e:
        assert "segments[1]" in str(e), e


def test_baked_documents(model):
    cache = kvstitch.Cache(model, budget_bytes=64 << 20)
    s = kvstitch.Session(model, cache, n_ctx=1024)
    w = s.warm(documents=[DOC_A, DOC_B], doc_set=True)
    assert w.documents_computed == 2 and w.documents_baked == 2
    assert s.warm(documents=[DOC_A, DOC_B], bake_with_neighbours=1).documents_bake_cached == 2
    baked = s.generate(QUESTION, documents=[DOC_B, DOC_A], max_tokens=2, logits=True, reuse="none")
    plain = s.generate(QUESTION, documents=[DOC_B, DOC_A], max_tokens=2, logits=True, reuse="none", baked=False)
    assert baked.docs_baked == 2 and plain.docs_baked == 0 and plain.docs_hit == 2
    assert baked.first_logits != plain.first_logits
    try:
        s.warm(documents=[DOC_A, DOC_B], doc_set=True, bake_with_neighbours=1)
        raise AssertionError("doc_set with bake_with_neighbours was accepted")
    except kvstitch.InvalidArgument:
        pass


def test_recalibrated_documents(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=1024)
    kw = dict(system=SYSTEM, documents=[DOC_B, DOC_A], max_tokens=3, logits=True, reuse="none")
    s.generate(QUESTION, **kw)  # cache the docs
    off = s.generate(QUESTION, **kw)
    on = s.generate(QUESTION, recalibrate=True, **kw)
    same = s.generate(QUESTION, recalibrate=(1.0, 1.0), **kw)
    assert same.first_logits == off.first_logits and on.first_logits != off.first_logits
    again = s.generate(QUESTION, **kw)  # it lasts for its request only
    assert again.first_logits == off.first_logits
    for bad in [(0.9, 0.0), (9.0, 1.0)]:
        try:
            s.generate(QUESTION, recalibrate=bad, **kw)
            raise AssertionError(f"recalibrate={bad} was accepted")
        except kvstitch.InvalidArgument:
            pass
