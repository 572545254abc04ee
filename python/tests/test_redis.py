"""Cache(redis_url=...): two caches (as two processes: each its own RAM)
share chunks and documents through a real redis-server, started here on a
free loopback port and killed at the end; a Redis that is down costs the
cache, never the answer."""
import os

import pytest

import kvstitch
from conftest import DOC_A, DOC_B, MANUAL, Q1, QUESTION
from redis_server import free_port, redis_server


@pytest.fixture(scope="module")
def redis_url():
    with redis_server() as (_, port):
        yield "redis://127.0.0.1:%d" % port


def test_two_caches_share_chunks_and_documents(model, redis_url):
    a = kvstitch.Cache(model, budget_bytes=256 << 20, redis_url=redis_url + "/4")
    sa = kvstitch.Session(model, a, n_ctx=2048)
    ra = sa.generate(MANUAL + Q1, max_tokens=4, logits=True)
    da = sa.generate(QUESTION, documents=[DOC_A, DOC_B], max_tokens=4, logits=True)
    assert ra.cached_tokens == 0 and da.docs_computed == 2
    assert a.flush(10) is True
    st = a.stats()
    assert st["redis_puts"] > 0 and st["redis_put_errors"] == 0 and st["redis_put_dropped"] == 0, st
    sa.close()
    a.close()

    b = kvstitch.Cache(model, budget_bytes=256 << 20, redis_url=redis_url + "/4")  # RAM empty
    sb = kvstitch.Session(model, b, n_ctx=2048)
    rb = sb.generate(MANUAL + Q1, max_tokens=4, logits=True)
    # all but the last token (computed for the logits): the chunk the prompt
    # stops inside comes through its partial-chunk marker
    assert rb.cached_tokens == rb.prompt_tokens - 1, (rb.cached_tokens, rb.prompt_tokens)
    assert b.stats()["redis_partial_hits"] >= 1
    assert rb.tokens == ra.tokens and rb.first_logits == ra.first_logits
    db = sb.generate(QUESTION, documents=[DOC_A, DOC_B], max_tokens=4, logits=True)
    assert db.docs_computed == 0 and db.docs_hit >= 1, (db.docs_hit, db.docs_computed)
    assert db.tokens == da.tokens and db.first_logits == da.first_logits
    assert b.stats()["redis_hits"] > 0


def test_a_codec_writes_smaller_values_every_reader_reads(model, redis_url):
    put_bytes = {}
    for codec, db in (("raw", 6), ("shuffle-zstd", 7)):
        a = kvstitch.Cache(model, budget_bytes=256 << 20, redis_url=redis_url + "/%d" % db, redis_codec=codec)
        sa = kvstitch.Session(model, a, n_ctx=2048)
        ra = sa.generate(MANUAL + Q1, max_tokens=2, logits=True)
        assert a.flush(10) is True
        put_bytes[codec] = a.stats()["redis_put_bytes"]
        sa.close()
        a.close()
    assert 0 < put_bytes["shuffle-zstd"] < put_bytes["raw"], put_bytes
    b = kvstitch.Cache(model, budget_bytes=256 << 20, redis_url=redis_url + "/7")  # writes raw, reads any
    rb = kvstitch.Session(model, b, n_ctx=2048).generate(MANUAL + Q1, max_tokens=2, logits=True)
    assert rb.cached_tokens == rb.prompt_tokens - 1 and rb.first_logits == ra.first_logits and rb.tokens == ra.tokens


def test_clear_lists_the_directory_again_never_redis(model, redis_url, tmp_path):
    # clear() re-lists the cache dir's entries; it had scanned the shared
    # Redis too (every chunk other processes wrote, listed as this cache's)
    # and raised where Redis was down
    d = tmp_path / "d"
    c = kvstitch.Cache(model, budget_bytes=64 << 20, cache_dir=d, redis_url=redis_url + "/4")  # db 4: others' chunks
    s = kvstitch.Session(model, c, n_ctx=1024)
    s.warm("The ferry leaves the north pier at dawn and returns by noon. " * 6, chat=False)
    assert c.flush(10) is True
    files = [f for f in os.listdir(d) if f.endswith(".kvc")]
    c.clear()
    assert len(c.entries()) == len(files) > 0, (len(c.entries()), len(files))
    s.close()
    c.close()
    dead = kvstitch.Cache(model, budget_bytes=64 << 20, cache_dir=tmp_path / "e",
                          redis_url="redis://127.0.0.1:%d" % free_port(), redis_timeout_ms=20)
    dead.clear()  # no Redis to reach: no error
    dead.close()


def test_redis_down_costs_the_cache_not_the_answer(model):
    cold = kvstitch.Session(model, kvstitch.Cache(model, budget_bytes=64 << 20), n_ctx=2048)
    want = cold.generate(MANUAL + Q1, max_tokens=4, logits=True)
    c = kvstitch.Cache(model, budget_bytes=64 << 20, redis_url="redis://127.0.0.1:%d" % free_port(),
                       redis_timeout_ms=20)
    got = kvstitch.Session(model, c, n_ctx=2048).generate(MANUAL + Q1, max_tokens=4, logits=True)
    assert got.tokens == want.tokens and got.first_logits == want.first_logits
    c.flush(5)
    st = c.stats()
    assert st["redis_errors"] + st["redis_put_dropped"] + st["redis_put_errors"] > 0, st


def test_redis_argument_mistakes(model, tmp_path):
    with pytest.raises(kvstitch.InvalidArgument, match="not both"):
        kvstitch.Cache(model, redis_url="redis://127.0.0.1:1", redis_cluster="127.0.0.1:2")
    with pytest.raises(kvstitch.InvalidArgument, match="goes with"):
        kvstitch.Cache(model, redis_password_file=str(tmp_path / "pw"))
    with pytest.raises(kvstitch.InvalidArgument, match="redis_url"):
        kvstitch.Cache(model, redis_url="")
    with pytest.raises(kvstitch.InvalidArgument, match="redis_codec must be"):
        kvstitch.Cache(model, redis_url="redis://127.0.0.1:1", redis_codec="lz4")
    with pytest.raises(kvstitch.InvalidArgument, match="redis_codec goes with"):
        kvstitch.Cache(model, redis_codec="zstd")
    with pytest.raises(kvstitch.InvalidArgument, match="redis_timeout_ms goes with"):  # (it had been dropped)
        kvstitch.Cache(model, redis_timeout_ms=200)
    kvstitch.Cache(model, redis_timeout_ms=0).close()  # the default
    with pytest.raises(kvstitch.InvalidArgument, match="redis_timeout_ms"):
        kvstitch.Cache(model, redis_url="redis://127.0.0.1:1", redis_timeout_ms=-1)
    with pytest.raises(kvstitch.Error, match="nota-url"):
        kvstitch.Cache(model, redis_url="nota-url")
    import os
    os.mkfifo(tmp_path / "fifo")  # its open had blocked the process
    with pytest.raises(kvstitch.InvalidArgument, match="not a regular file"):
        kvstitch.Cache(model, redis_url="redis://127.0.0.1:1", redis_password_file=str(tmp_path / "fifo"))
    (tmp_path / "long").write_text("p" * 2000 + "\n")  # had been cut to its first 1023 bytes
    with pytest.raises(kvstitch.InvalidArgument, match="longer than"):
        kvstitch.Cache(model, redis_url="redis://127.0.0.1:1", redis_password_file=str(tmp_path / "long"))
    with pytest.raises(kvstitch.InvalidArgument, match="timeout"):
        kvstitch.Cache(model).flush(-1)
    assert kvstitch.Cache(model).flush(0) is True  # no Redis: at once


def test_a_refusing_redis_says_why(model):
    """A Redis that refuses (a wrong password) does not fail the calls; the
    Cache says why, in the server's words (the binding had no way to: only
    a counter moved), as the CLI prints it."""
    import socket
    with redis_server() as (_, port):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(b"CONFIG SET requirepass s3cret\r\n")
            assert c.recv(64).startswith(b"+OK")
        ok = kvstitch.Cache(model, redis_url="redis://:s3cret@127.0.0.1:%d" % port)
        bad = kvstitch.Cache(model, redis_url="redis://:wrong@127.0.0.1:%d" % port, redis_timeout_ms=500)
        for c in (ok, bad):
            assert kvstitch.Session(model, c, n_ctx=512).generate(MANUAL[:400], max_tokens=1).tokens
            c.flush(5)
        assert ok.redis_why_down() == ""
        why = bad.redis_why_down()
        assert "WRONGPASS" in why or "invalid" in why.lower(), why
        assert str(port) in why
    assert kvstitch.Cache(model).redis_why_down() == ""
