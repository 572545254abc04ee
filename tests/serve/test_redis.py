"""`kvstitch serve --redis`: servers share prompt chunks through a real
redis-server (started here on a free loopback port, killed at the end), and
a Redis that is down or goes away costs the cache, never an answer."""
import os
import subprocess

import openai
import pytest
import requests

from conftest import API_KEY, CLI, SLOW, Server, metric
from redis_server import free_port, redis_server

SYSTEM = ("You answer questions about the harbour archive of Genoa, which keeps ship registers, "
          "customs ledgers and letters from 1400 to 1900. ") * 8
MSGS = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "What does the archive keep?"}]


@pytest.fixture
def redis_port():
    with redis_server() as rp:
        yield rp


DOCS = ["The Danube flows through ten countries, more than any other river in Europe.",
        "The Black Sea receives the Danube through a wide delta in Romania and Ukraine."]


def ask(server, **extra):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=300 * SLOW)
    msgs = [{"role": "user", "content": "Which sea does the Danube reach?"}] if "documents" in extra else MSGS
    r = client.chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0,
                                       extra_body=dict(return_token_ids=True, **extra))
    return r.usage.model_extra["kvstitch"], r.choices[0].message.content


def test_servers_share_chunks_through_redis(redis_port):
    proc, port = redis_port
    url = "redis://127.0.0.1:%d" % port
    a = Server("--slots", "1", "--ctx", "1024", "--redis", url)
    try:
        ka, text_a = ask(a)
        assert ka["cached_tokens"] == 0 and ka["computed_tokens"] > 256, ka
        da, _ = ask(a, documents=DOCS)
        assert da["docs_hit"] == 0, da
    finally:
        assert a.stop() == 0, a.read_log()[-2000:]  # SIGTERM flushes the Redis writer
    # "stopped; cache: ... 0 written to disk, N written to Redis", N > 0, none lost
    stopped = [l for l in a.read_log().splitlines() if "stopped; cache:" in l][-1]
    assert " 0 written to disk," in stopped and int(stopped.rsplit(", ", 1)[1].split()[0]) > 0, stopped
    assert "not written to Redis" not in a.read_log(), a.read_log()[-2000:]

    # A second server, its RAM empty: the prompt's chunks come from Redis,
    # and the answer has the bits of the cold one.
    b = Server("--slots", "1", "--ctx", "1024", "--redis", url)
    try:
        kb, text_b = ask(b)
        # all but the last token (computed for the logits): the chunk the
        # prompt stops inside comes through its partial-chunk marker
        assert kb["computed_tokens"] == 1, kb
        assert metric(b, "kvstitch_cache_redis_partial_hits_total") >= 1
        assert kb["first_logits_sha256"] == ka["first_logits_sha256"]
        assert kb["completion_token_ids"] == ka["completion_token_ids"] and text_b == text_a
        db, _ = ask(b, documents=DOCS)  # the documents' chunks too, with their cold bits
        assert db["docs_hit"] == 2 and db["first_logits_sha256"] == da["first_logits_sha256"], db
        assert metric(b, 'kvstitch_cache_loads_total{tier="redis"}') >= 4
        assert metric(b, "kvstitch_cache_redis_errors_total") == 0
        st = b.get("/v1/cache/stats").json()
        assert st["redis_hits"] >= 4 and st["redis_bad"] == 0, st
        assert st["redis_why_down"] == "", st
        # no cache dir: nothing counted as the directory's (Redis had been counted there too)
        assert st["disk_loads"] == st["disk_writes"] == 0, st
        assert metric(b, 'kvstitch_cache_loads_total{tier="disk"}') == 0
        assert metric(b, "kvstitch_cache_disk_writes_total") == 0
        # Redis gone: the next prompt's chunks are computed, the answer stays.
        proc.kill()
        proc.wait()
        msgs = [MSGS[0], {"role": "user", "content": "Which years does it cover?"}]
        client = openai.OpenAI(base_url=b.url + "/v1", api_key=API_KEY, max_retries=0, timeout=300 * SLOW)
        r = client.chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0)
        assert r.choices[0].finish_reason in ("stop", "length")
        assert r.usage.model_extra["kvstitch"]["cached_tokens"] >= 256  # the system prompt, now in RAM
        assert requests.get(b.url + "/health", timeout=30).status_code == 200
    finally:
        assert b.stop() == 0, b.read_log()[-2000:]


def test_a_redis_that_is_down_costs_the_cache_not_the_answer():
    # Nothing listens on the port: the server starts, answers with the bits
    # of a server without Redis, counts the lost lookups and writes, and its
    # SIGTERM says which chunks did not reach Redis.
    port = free_port()
    plain = Server("--slots", "1", "--ctx", "1024")
    try:
        k0, t0 = ask(plain)
    finally:
        assert plain.stop() == 0
    s = Server("--slots", "1", "--ctx", "1024", "--redis", "redis://127.0.0.1:%d" % port, "--redis-timeout", "20")
    try:
        k1, t1 = ask(s)
        assert k1["first_logits_sha256"] == k0["first_logits_sha256"] and t1 == t0
        assert k1["completion_token_ids"] == k0["completion_token_ids"]
        assert metric(s, "kvstitch_cache_redis_errors_total") + metric(s, "kvstitch_cache_redis_dropped_total") > 0
        # why, while it lasts (the counters had said only that it happened)
        why = s.get("/v1/cache/stats").json()["redis_why_down"]
        assert ("127.0.0.1:%d" % port) in why and "not reachable" in why, why
    finally:
        assert s.stop() == 0, s.read_log()[-2000:]
    assert "not written to Redis" in s.read_log(), s.read_log()[-2000:]
    assert " 0 written to Redis" in s.read_log(), s.read_log()[-2000:]  # (handed over is not written)


def test_redis_option_mistakes_are_refused_before_start(tmp_path):
    fifo = tmp_path / "pw"
    os.mkfifo(fifo)  # it had hung the start, with SIGTERM already masked
    for args, why in [(["--redis-timeout", "20"], "go with --redis"),
                      (["--redis-codec", "zstd"], "go with --redis"),
                      (["--redis", "redis://127.0.0.1:1", "--redis-codec", "lz4"], "raw, zstd or shuffle-zstd"),
                      (["--redis", "redis://127.0.0.1:1", "--redis-timeout", "60001"], "[1, 60000]"),
                      (["--redis", "redis://127.0.0.1:1", "--redis-cluster", "127.0.0.1:2"], "not both"),
                      (["--redis"], "needs a value"),
                      (["--redis", "redis://a:1", "--redis", "redis://b:2"], "more than once")]:
        r = subprocess.run([CLI, "serve", "-m", "x"] + args, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
    r = subprocess.run([CLI, "serve", "-m", os.environ["KVSTITCH_MODEL"], "--port", "0", "--redis",
                        "redis://127.0.0.1:1", "--redis-password-file", str(fifo)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "not a regular file" in r.stderr, r.stderr
    # A URL that is no Redis URL: the cache cannot open, exit 1, said.
    r = subprocess.run([CLI, "serve", "-m", os.environ["KVSTITCH_MODEL"], "--port", "0", "--redis", "nota-url"],
                       capture_output=True, text=True, timeout=120 * SLOW)
    assert r.returncode == 1 and "nota-url" in r.stderr and "redis://" in r.stderr, r.stderr
