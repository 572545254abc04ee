"""Session.generate and warm: results, bit-exact prefix reuse, stop
strings, chat messages, logprobs, sampling determinism."""
import math

import pytest

import kvstitch
from conftest import MANUAL, Q1, Q2


def test_generate_cold(model):
    s = kvstitch.Session(model, n_ctx=512)
    r = s.generate("The capital of France is", max_tokens=6, logits=True)
    assert r.stop_reason == "length" and len(r.tokens) == 6
    assert r.text and r.ttft_ms > 0 and r.prompt_tokens == r.live_tokens
    assert r.cached_tokens == 0 and len(r.first_logits) == 4 * model.n_vocab
    assert s.generate("The capital of France is", max_tokens=1).first_logits == b""  # opt-in


def test_prefix_reuse_is_bit_exact(model, cache):
    cold = kvstitch.Session(model, n_ctx=1024).generate(MANUAL + Q2, max_tokens=4, logits=True)
    s = kvstitch.Session(model, cache, n_ctx=1024)
    first = s.generate(MANUAL + Q1, max_tokens=4, logits=True)            # stores the manual's chunks
    assert first.cached_tokens == 0 and first.chunks_stored > 0
    warm = s.generate(MANUAL + Q2, max_tokens=4, logits=True)
    assert warm.cached_tokens > 100 and warm.live_tokens == warm.prompt_tokens - warm.cached_tokens
    assert math.isclose(warm.cache_hit_ratio, warm.cached_tokens / warm.prompt_tokens)
    assert warm.first_logits == cold.first_logits            # same bytes
    assert warm.tokens == cold.tokens and warm.text == cold.text
    none = s.generate(MANUAL + Q2, max_tokens=4, logits=True, reuse="none")
    assert none.cached_tokens == 0 and none.first_logits == cold.first_logits


def test_q8_kv_prefix_reuse_is_bit_exact(model):
    """The 8-bit KV cache: its own Cache (the Session takes its type), exact reuse."""
    cache = kvstitch.Cache(model, kv_type="q8")
    cold = kvstitch.Session(model, n_ctx=1024, kv_type="q8").generate(MANUAL + Q2, max_tokens=4, logits=True)
    s = kvstitch.Session(model, cache, n_ctx=1024)
    s.generate(MANUAL + Q1, max_tokens=4)
    warm = s.generate(MANUAL + Q2, max_tokens=4, logits=True)
    assert warm.cached_tokens > 100 and warm.first_logits == cold.first_logits
    f16 = kvstitch.Session(model, n_ctx=1024).generate(MANUAL + Q2, max_tokens=4, logits=True)
    assert f16.first_logits != cold.first_logits  # another KV type: close, not the same bits


def test_token_ids_prompt(model):
    s = kvstitch.Session(model, n_ctx=256)
    ids = model.tokenize("The capital of France is")
    assert s.generate(ids, max_tokens=3, logits=True).tokens == s.generate("The capital of France is", max_tokens=3, logits=True).tokens


def test_warm_result_and_reuse(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=1024)
    w = s.warm(MANUAL)
    assert isinstance(w, kvstitch.WarmResult)
    assert w.token_count == len(model.tokenize(MANUAL)) and w.chunk_size == 64
    assert w.chunks_stored == math.ceil(w.token_count / 64)
    assert w.chunk_boundary_aligned == (w.token_count % 64 == 0)
    assert w.partial_tail_tokens == w.token_count % 64
    # MANUAL ends with a space: BPE joins it to the next word, so the border is unstable
    assert w.alignment_warning and w.stable_tokens < w.token_count
    again = s.warm(MANUAL)
    assert again.chunks_stored == 0 and again.chunks_existing == w.chunks_stored
    r = s.generate(MANUAL + Q1, max_tokens=2, logits=True)
    assert r.cached_tokens >= w.stable_tokens


def test_stop_string(model):
    s = kvstitch.Session(model, n_ctx=512)
    free = s.generate("List three fruits:", max_tokens=24, logits=True)
    assert len(free.text) > 12
    stop = free.text[8:12]
    cut = s.generate("List three fruits:", max_tokens=24, logits=True, stop=[stop])
    assert cut.stop_reason == "stop" and cut.text == free.text[:free.text.index(stop)]


def test_chat_messages_and_eos(model):
    s = kvstitch.Session(model, n_ctx=512)
    msgs = [{"role": "user", "content": "Say OK and nothing else."}]
    r = s.generate(msgs, max_tokens=12, logits=True)
    assert r.text.strip() and r.stop_reason in ("eos", "length")
    ids = model.tokenize(model.render_chat(msgs), special=True)
    assert s.generate(ids, max_tokens=12, logits=True).tokens == r.tokens
    assert s.generate("Say OK and nothing else.", chat=True, max_tokens=12, logits=True).tokens == r.tokens


def test_logprobs(model):
    s = kvstitch.Session(model, n_ctx=256)
    r = s.generate("The capital of France is", max_tokens=1, logits=True, logprobs=5)
    assert len(r.top_logprobs) == 5
    lps = [lp for _, lp in r.top_logprobs]
    assert lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
    assert r.top_logprobs[0][0] == r.tokens[0]  # greedy takes the top one


def test_sampling_seed(model):
    s = kvstitch.Session(model, n_ctx=256)
    a = s.generate("Once upon a time", max_tokens=12, logits=True, temperature=0.9, seed=7)
    b = s.generate("Once upon a time", max_tokens=12, logits=True, temperature=0.9, seed=7)
    c = s.generate("Once upon a time", max_tokens=12, logits=True, temperature=0.9, seed=8)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_presence_and_frequency_penalties(model):
    s = kvstitch.Session(model, n_ctx=256)
    prompt = "one one one one one one one one"
    plain = s.generate(prompt, max_tokens=16)
    a = s.generate(prompt, max_tokens=16, frequency_penalty=2.0, presence_penalty=1.0)
    b = s.generate(prompt, max_tokens=16, frequency_penalty=2.0, presence_penalty=1.0)
    assert a.tokens == b.tokens and a.tokens != plain.tokens
    # no generated token repeats more than a penalty of 2 per use allows to win greedily
    assert max(a.tokens.count(t) for t in set(a.tokens)) < max(plain.tokens.count(t) for t in set(plain.tokens))


def test_cache_entries_and_prune_dir(model, tmp_path):
    # Cache.entries() lists what `kvstitch cache ls` lists; prune_dir bounds
    # a directory as `kvstitch cache prune` does (Python had neither).
    d = tmp_path / "kvs"
    c = kvstitch.Cache(model, budget_bytes=64 << 20, cache_dir=d)
    s = kvstitch.Session(model, c, n_ctx=1024)
    text = "The lighthouse keeper wrote down every ship that passed the rocks. " * 12
    w = s.warm(text, chat=False)
    es = c.entries()
    assert len(es) == w.chunks_stored > 0
    e0 = min(es, key=lambda e: e["pos0"])
    assert e0["pos0"] == 0 and e0["origin"] == "prefix" and e0["on_disk"] == 1 and e0["kv_type"] == "f16"
    assert e0["tokens"] == model.tokenize(text)[:e0["n_tok"]] and len(e0["prefix_key"]) == 64
    assert sum(e["n_tok"] for e in es) == len(model.tokenize(text))
    # clear() empties memory; the directory's entries stay listed (they had
    # gone from entries() and stats() while their files stayed)
    c.clear()
    assert len(c.entries()) == len(es) and c.stats()["resident"] == 0 and c.stats()["entries"] == len(es)
    s.close()
    c.close()
    r = kvstitch.prune_dir(d, max_bytes=1)
    assert r["removed"] == len(es) and r["entries"] == 0, r
    assert kvstitch.prune_dir(d)["removed"] == 0
    with pytest.raises(kvstitch.InvalidArgument, match="max_bytes"):
        kvstitch.prune_dir(d, max_bytes=-1)
    with pytest.raises(kvstitch.NotFound, match="no such directory"):  # it had reported an empty one
        kvstitch.prune_dir(tmp_path / "missing")


def test_cache_key_file(model, tmp_path):
    # key_file= (the CLI's --cache-key-file): a keyed cache reuses its own
    # entries bit-exactly; a keyless cache on the same directory reuses
    # none of them (and the keyed one none of its); bad key files raise,
    # naming the file.
    key = tmp_path / "key"
    key.write_text("  a-secret-cache-key-0123456789\n")
    d = tmp_path / "kvs"
    cold = kvstitch.Session(model, n_ctx=1024).generate(MANUAL + Q2, max_tokens=4, logits=True)

    def run(**kw):
        c = kvstitch.Cache(model, budget_bytes=64 << 20, cache_dir=d, **kw)
        s = kvstitch.Session(model, c, n_ctx=1024)
        r = s.generate(MANUAL + Q2, max_tokens=4, logits=True)
        s.close()
        c.close()
        return r

    first = run(key_file=key)
    assert first.cached_tokens == 0 and first.chunks_stored > 0
    warm = run(key_file=str(key))
    assert warm.cached_tokens > 100 and warm.first_logits == cold.first_logits and warm.tokens == cold.tokens
    n_keyed = len(list(d.glob("*.kvc")))
    keyless = run()
    assert keyless.cached_tokens == 0 and keyless.first_logits == cold.first_logits
    assert len(list(d.glob("*.kvc"))) == 2 * n_keyed  # nothing of the keyed cache removed
    assert run(key_file=key).cached_tokens == warm.cached_tokens

    (tmp_path / "short").write_text("0123456789abcde")
    (tmp_path / "empty").write_text(" \n")
    for name in ("short", "empty"):
        with pytest.raises(kvstitch.InvalidArgument, match=str(tmp_path / name)):
            kvstitch.Cache(model, cache_dir=d, key_file=tmp_path / name)
    with pytest.raises(kvstitch.FileError, match="missing"):
        kvstitch.Cache(model, cache_dir=d, key_file=tmp_path / "missing")
    with pytest.raises(kvstitch.InvalidArgument, match="key_file goes with"):
        kvstitch.Cache(model, key_file=key)


def test_cache_key_bad_mac_in_stats(model, tmp_path):
    # stats() mirrors kvs_cache_stats: entries forged without the key (KV
    # changed, checksums and header digests recomputed) are damaged
    # (disk_bad) and, of those, bad MACs (disk_bad_mac); the answer is the
    # cold one.
    import forge_entry
    key = tmp_path / "key"
    key.write_text("a-secret-cache-key-0123456789")
    d = tmp_path / "kvs"

    def run():
        c = kvstitch.Cache(model, budget_bytes=64 << 20, cache_dir=d, key_file=key)
        s = kvstitch.Session(model, c, n_ctx=1024)
        r = s.generate(MANUAL + Q2, max_tokens=4, logits=True)
        st = c.stats()
        s.close()
        c.close()
        return r, st

    first, st = run()
    assert st["disk_bad"] == st["disk_bad_mac"] == st["redis_bad_mac"] == 0
    for f in d.glob("*.kvc"):
        forge_entry.main("forge", str(f))
    again, st = run()
    assert again.cached_tokens == 0 and again.first_logits == first.first_logits
    assert st["disk_bad_mac"] == st["disk_bad"] >= 1 and st["redis_bad_mac"] == 0, st
