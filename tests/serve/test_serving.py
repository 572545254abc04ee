"""Serving behaviour: multi-turn reuse, deterministic batching, cancellation,
queue limits, SIGTERM drain, raw SSE through curl."""
import concurrent.futures as cf
import contextlib
import json
import os
import signal
import shutil
import socket
import subprocess
import time

import pytest
import requests

from conftest import CLI, MODEL, QUICK, SLOW, Server, metric, metrics


@contextlib.contextmanager
def streaming(server, path, body, started):
    """A streamed reply to body read on a thread: yields its events, (arrival
    time, parsed data), once `started` of them came, and waits for its end
    on leaving."""
    events = []

    def read():
        with requests.post(server.url + path, json=body, headers=server.headers(), stream=True,
                           timeout=300 * SLOW) as r:
            assert r.status_code == 200, r.text
            for line in r.iter_lines():
                if line.startswith(b"data: {"):
                    events.append((time.time(), json.loads(line[6:])))

    with cf.ThreadPoolExecutor(1) as ex:
        fut = ex.submit(read)
        t0 = time.time()
        while len(events) < started and not fut.done() and time.time() - t0 < 120 * SLOW:
            time.sleep(0.002)
        if len(events) < started:
            fut.result()  # (its error, if it failed)
        assert len(events) >= started, "the stream did not start"
        yield events
        fut.result()


def chat(server, msgs, **kw):
    body = dict(dict(messages=msgs, temperature=0, max_tokens=32, return_token_ids=True), **kw)
    r = server.post("/v1/chat/completions", body)
    assert r.status_code == 200, r.text
    return r.json()


def test_multi_turn_computes_only_the_new_message(server):
    # Three turns with the model's own chat template (chatml), which renders
    # an earlier answer as <|im_start|>assistant\n{content}<|im_end|>\n: the
    # generated tokens' KV was kept, so each turn's exact hit covers the
    # previous prompt and the answer (all but its end-of-turn token).
    msgs = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Name a large city in Italy."}]
    prev = None
    for turn, follow in enumerate(["Name another one.", "And one in Spain?", None]):
        r = chat(server, msgs)
        u, k = r["usage"], r["usage"]["kvstitch"]
        if prev is not None:
            answered = prev["usage"]["prompt_tokens"] + prev["usage"]["completion_tokens"] - 1
            assert k["cached_tokens"] >= answered, (turn, k, prev["usage"])
            # Only the template's end of the last turn + the new message run.
            new_msg = len(server.post("/tokenize", {"content": msgs[-1]["content"]}).json()["tokens"])
            assert k["computed_tokens"] <= new_msg + 12, (turn, k)
        msgs.append({"role": "assistant", "content": r["choices"][0]["message"]["content"]})
        if follow:
            msgs.append({"role": "user", "content": follow})
        prev = r
    # Bit-exact: the last turn again without the cache gives the same bits.
    msgs.pop()
    cold = chat(server, msgs, cache_prompt=False)
    warm = chat(server, msgs)
    assert warm["usage"]["kvstitch"]["cached_tokens"] > 0
    assert warm["usage"]["kvstitch"]["first_logits_sha256"] == cold["usage"]["kvstitch"]["first_logits_sha256"]
    assert warm["usage"]["kvstitch"]["completion_token_ids"] == cold["usage"]["kvstitch"]["completion_token_ids"]


def test_concurrent_prompts_share_their_prefix_in_flight(server):
    # Four requests with one long system prompt (new to the cache) arrive
    # together: one computes the system prompt, the others wait for its
    # chunks and load them (srv_slot_waits_for), where each had computed it
    # again. Same bits as each computed cold.
    system = "Session %d. " % time.time_ns() + " ".join(
        "Rule %d: answer briefly, in plain words, and never make up a fact about item %d." % (i, i) for i in range(30))
    questions = ["What is 2 + 2?", "Name a colour.", "Name a fruit.", "What day follows Monday?"]
    bodies = [{"messages": [{"role": "system", "content": system}, {"role": "user", "content": q}],
               "max_tokens": 4, "temperature": 0, "return_token_ids": True} for q in questions]
    n_system = len(server.post("/tokenize", {"content": system}).json()["tokens"])
    assert n_system > 500
    with cf.ThreadPoolExecutor(len(bodies)) as ex:
        warm = list(ex.map(lambda b: server.post("/v1/chat/completions", b).json(), bodies))
    computed = [r["usage"]["kvstitch"]["computed_tokens"] for r in warm]
    # Each computed alone: 4 x the system prompt. Shared: once, plus each
    # prompt's own end and at most a chunk (64 tokens) before it.
    assert sum(computed) < n_system + len(bodies) * (64 + 40), (computed, n_system)
    assert sorted(computed)[-1] > n_system > sorted(computed)[-2], computed
    for b, w in zip(bodies, warm):
        cold = server.post("/v1/chat/completions", dict(b, cache_prompt=False)).json()
        assert w["usage"]["kvstitch"]["completion_token_ids"] == cold["usage"]["kvstitch"]["completion_token_ids"]
        assert w["usage"]["kvstitch"]["first_logits_sha256"] == cold["usage"]["kvstitch"]["first_logits_sha256"]


def test_concurrent_documents_computed_once(server):
    # Three RAG requests with the same three new documents (other orders,
    # other questions) arrive together: each document is computed once (the
    # others wait for the warmer ahead of them), where each request had
    # computed all three. Same bits as each request served afterwards with
    # every document cached.
    tag = time.time_ns()
    docs = ["Note %d-%d: the %s line runs every %d minutes between the old mill and the harbour. " % (tag, i, w, 10 + i) * 4
            for i, w in enumerate(["red", "green", "blue"])]
    qs = ["How often does the red line run?", "Where does the green line go?", "Which line is the blue one?"]
    bodies = [{"messages": [{"role": "system", "content": "Answer from the passages."}, {"role": "user", "content": q}],
               "documents": docs[i:] + docs[:i], "max_tokens": 4, "temperature": 0, "return_token_ids": True}
              for i, q in enumerate(qs)]
    with cf.ThreadPoolExecutor(len(bodies)) as ex:
        together = list(ex.map(lambda b: server.post("/v1/chat/completions", b).json(), bodies))
    ks = [r["usage"]["kvstitch"] for r in together]
    assert sum(k["docs_computed"] for k in ks) == 3 and sum(k["docs_hit"] for k in ks) == 6, ks
    for b, k in zip(bodies, ks):
        again = server.post("/v1/chat/completions", b).json()["usage"]["kvstitch"]
        assert again["docs_hit"] == 3
        assert (k["completion_token_ids"], k["first_logits_sha256"]) == \
            (again["completion_token_ids"], again["first_logits_sha256"])


def requests_for_determinism():
    topics = ["the sea", "a mountain", "a small robot", "bread", "winter", "a library", "the moon", "rain"]
    out = []
    for i, t in enumerate(topics):
        body = {"messages": [{"role": "user", "content": "Write two sentences about %s." % t + " Please." * i}],
                "max_tokens": 8 + 5 * i, "return_token_ids": True, "cache_prompt": False,
                "logprobs": True, "top_logprobs": 2}
        if i % 3 == 0:
            body["logit_bias"] = {"30": -3.5, "314": 2}  # per row: the other rows' logits stay theirs
        if i % 2:
            body.update(temperature=0.8, top_p=0.9, seed=100 + i)
        else:
            body.update(temperature=0)
        out.append(body)
    return out


def signature(r):
    k = r["usage"]["kvstitch"]
    return (k["completion_token_ids"], k["first_logits_sha256"], r["choices"][0]["message"]["content"],
            json.dumps(r["choices"][0]["logprobs"]))


def test_concurrent_requests_equal_each_alone(server):
    # 8 requests with different prompts and lengths, all at once (4 slots:
    # decode steps batch up to 4 rows, the others queue and join as slots
    # free), vs each alone: same token ids, same first-logits bytes, same text,
    # same log-probabilities.
    bodies = requests_for_determinism()
    if QUICK:
        bodies = bodies[:4]
    alone = [signature(server.post("/v1/chat/completions", b).json()) for b in bodies]
    with cf.ThreadPoolExecutor(len(bodies)) as ex:
        together = list(ex.map(lambda b: signature(server.post("/v1/chat/completions", b).json()), bodies))
    for i, (a, t) in enumerate(zip(alone, together)):
        assert a == t, "request %d differs when batched" % i
    assert len({a[1] for a in alone}) == len(bodies)  # different prompts really ran


def test_raw_sse_with_curl(server):
    body = json.dumps({"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 6, "stream": True,
                       "temperature": 0, "stream_options": {"include_usage": True}})
    out = subprocess.run(["curl", "-sN", "--max-time", str(int(120 * SLOW)), "-H", "Content-Type: application/json",
                          "-H", "Authorization: Bearer " + server.key, "-d", body,
                          server.url + "/v1/chat/completions"], capture_output=True, text=True, check=True).stdout
    events = out.split("\n\n")
    assert events[-1] == "" and events[-2] == "data: [DONE]"
    datas = [json.loads(e[len("data: "):]) for e in events[:-2]]
    assert all(e.startswith("data: ") for e in events[:-1])
    assert all(d["object"] == "chat.completion.chunk" for d in datas)
    assert datas[-1]["usage"]["completion_tokens"] == 6 or datas[-2]["choices"][0]["finish_reason"] == "stop"


def raw_post(server, path, body):
    """A socket with the request sent (its reply unread: the caller may hang up)."""
    s = socket.create_connection(("127.0.0.1", server.port), timeout=60 * SLOW)
    s.sendall(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Authorization: Bearer " + server.key.encode() + b"\r\nContent-Length: " + str(len(body)).encode() +
              b"\r\n\r\n" + body)
    return s


def wait_cancelled(server, before, seconds):
    """Until a generation more than before ended cancelled and no slot is busy."""
    t0 = time.time()
    while time.time() - t0 < seconds:
        if metric(server, 'kvstitch_generations_total{finish_reason="cancelled"}') > before and \
                metric(server, "kvstitch_active_slots") == 0:
            return
        time.sleep(0.05)


def test_disconnect_cancels_the_request(server):
    before = metric(server, 'kvstitch_generations_total{finish_reason="cancelled"}')
    body = json.dumps({"messages": [{"role": "user", "content": "Count to one thousand."}], "max_tokens": 2000,
                       "stream": True, "temperature": 0}).encode()
    s = raw_post(server, "/v1/chat/completions", body)
    got = b""
    while got.count(b"data: ") < 3:
        got += s.recv(4096)
    s.close()
    wait_cancelled(server, before, 30 * SLOW)
    assert metric(server, 'kvstitch_generations_total{finish_reason="cancelled"}') > before
    assert metric(server, "kvstitch_active_slots") == 0
    # The slot is usable again.
    assert chat(server, [{"role": "user", "content": "Hi"}], max_tokens=2)["usage"]["completion_tokens"] >= 1


def test_a_client_that_leaves_logs_no_server_error():
    """A stream cut by its client and a reply whose client left before it
    was ready are cancelled and counted, not logged as errors: each had
    printed libmicrohttpd's "Application reported internal error" or
    "Closing connection (application error generating response)", ~220
    such lines in an attack's 300 disconnects."""
    s = Server("--slots", "2", "--ctx", "1024")
    try:
        before = metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}')
        for stream in (True, False):
            body = json.dumps({"prompt": "Count to one thousand.", "max_tokens": 900, "stream": stream,
                               "temperature": 0, "logit_bias": {"0": -100, "2": -100}}).encode()
            sock = raw_post(s, "/v1/completions", body)
            if stream:
                got = b""
                while got.count(b"data: ") < 3:
                    got += sock.recv(4096)
            else:
                t0 = time.time()
                while metric(s, "kvstitch_active_slots") == 0 and time.time() - t0 < 30 * SLOW:
                    time.sleep(0.02)
            sock.close()
            wait_cancelled(s, before, 30 * SLOW)
            before = metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}')
        assert before == 2
        assert s.stop() == 0
        log = s.read_log()
        assert "Application reported internal error" not in log and "application error" not in log, log
    finally:
        s.stop()


def test_decode_tokens_are_counted_as_they_are_generated(server):
    # kvstitch_decode_tokens_total moves while a generation runs (it had
    # moved only when the generation ended)
    before = metric(server, "kvstitch_decode_tokens_total")
    body = json.dumps({"messages": [{"role": "user", "content": "Count to one thousand."}], "max_tokens": 400,
                       "stream": True, "temperature": 0, "logit_bias": {"2": -100}}).encode()
    s = raw_post(server, "/v1/chat/completions", body)
    got = b""
    while got.count(b"data: ") < 24:
        got += s.recv(4096)
    during = metric(server, "kvstitch_decode_tokens_total") - before
    s.close()
    wait_cancelled(server, 0, 30 * SLOW)
    assert during >= 20, during


def test_disconnect_stops_a_documents_warm_inside_its_step(server):
    # A documents warm that bakes (doc_set) runs in one scheduler step; a
    # client that left had it run to the end (every document baked, other
    # streams held meanwhile). The slot's stop poll now ends it between
    # documents: it is counted cancelled, and a second warm still finds
    # documents to bake.
    docs = ["Ledger %d. " % i + " ".join("Entry %d of ledger %d records item %d." % (k, i, k * 7 + i)
                                          for k in range(14)) for i in range(8)]
    before = metric(server, 'kvstitch_generations_total{finish_reason="cancelled"}')
    body = json.dumps({"documents": docs, "doc_set": True}).encode()
    s = raw_post(server, "/v1/cache/warm", body)
    t0 = time.time()
    while metric(server, "kvstitch_active_slots") == 0 and time.time() - t0 < 60 * SLOW:
        time.sleep(0.02)
    time.sleep(0.2)
    s.close()
    wait_cancelled(server, before, 120 * SLOW)
    assert metric(server, 'kvstitch_generations_total{finish_reason="cancelled"}') > before
    r = server.post("/v1/cache/warm", {"documents": docs, "doc_set": True})
    assert r.status_code == 200 and r.json()["docs_baked"] >= 1, r.text


def test_documents_warm_is_computed_a_slice_a_step(server):
    # A documents-only warm of cold documents runs as a chat request's
    # documents do: a prefill chunk per scheduler step, between the other
    # slots' decode steps (it had run whole in one step, every stream
    # silent meanwhile). Baking still takes one step.
    docs = ["Atlas %d. " % i + " ".join("Station %d of atlas %d lies at mile %d." % (k, i, k * 13 + i)
                                        for k in range(12)) for i in range(6)]
    r = server.post("/v1/cache/warm", {"documents": docs})
    assert r.status_code == 200, r.text
    w = r.json()
    assert w["docs_computed"] == 6 and w["prefill_steps"] > 2, w
    again = server.post("/v1/cache/warm", {"documents": docs}).json()
    assert again["docs_cached"] == 6 and again["docs_computed"] == 0 and again["prefill_steps"] == 1, again
    baked = server.post("/v1/cache/warm", {"documents": docs, "doc_set": True}).json()
    assert baked["docs_baked"] == 6 and baked["prefill_steps"] == 1, baked


def test_disconnect_counts_queued_generations(server):
    # n = 16 on 4 slots: 12 generations wait in the queue. The client leaves
    # after the first bytes; those never started were cancelled without a
    # count (kvstitch_generations_total grew by 2 of 16). Every one of the
    # 16 is counted, by whatever finish reason it met.
    reasons = ["stop", "length", "cancelled", "error"]
    name = 'kvstitch_generations_total{finish_reason="%s"}'
    before = sum(metric(server, name % r) for r in reasons)
    body = json.dumps({"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 200,
                       "n": 16, "stream": True, "temperature": 0}).encode()
    s = raw_post(server, "/v1/chat/completions", body)
    got = b""
    while b"data: " not in got:
        got += s.recv(4096)
    s.close()
    t0 = time.time()
    while time.time() - t0 < 30 * SLOW:
        if sum(metric(server, name % r) for r in reasons) - before >= 16 and \
                metric(server, "kvstitch_active_slots") == 0:
            break
        time.sleep(0.1)
    assert sum(metric(server, name % r) for r in reasons) - before == 16
    assert metric(server, "kvstitch_active_slots") == 0


def test_q8_kv_serves_exact_reuse_and_documents():
    """--kv-type q8: the slots and the cache hold 8-bit KV; a prompt served
    from the cache has the bits of the same prompt computed cold, documents
    (moved Q8 keys) come back from the cache with the bits they had cold, and
    an unknown type is refused at start-up."""
    bad = subprocess.run([CLI, "serve", "-m", "x", "--kv-type", "q4"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "q4" in bad.stderr, bad.stderr
    s = Server("--slots", "2", "--ctx", "1024", "--kv-type", "q8")
    try:
        msgs = [{"role": "system", "content": "You are a helpful assistant who answers in one sentence."},
                {"role": "user", "content": "Name a large city in Italy."}]
        cold = chat(s, msgs, cache_prompt=False, max_tokens=8)
        chat(s, msgs, max_tokens=8)  # stores the prompt's chunks
        warm = chat(s, msgs, max_tokens=8)
        assert warm["usage"]["kvstitch"]["cached_tokens"] > 0
        assert warm["usage"]["kvstitch"]["first_logits_sha256"] == cold["usage"]["kvstitch"]["first_logits_sha256"]
        docs = ["The Danube flows through ten countries, more than any other river in Europe.",
                "The Black Sea receives the Danube through a wide delta in Romania and Ukraine."]
        q = [{"role": "user", "content": "Which sea does the Danube reach?"}]
        d1 = chat(s, q, max_tokens=4, documents=docs)
        d2 = chat(s, q, max_tokens=4, documents=docs)
        assert d2["usage"]["kvstitch"]["docs_hit"] == 2, d2["usage"]
        assert d2["usage"]["kvstitch"]["first_logits_sha256"] == d1["usage"]["kvstitch"]["first_logits_sha256"]
    finally:
        assert s.stop() == 0, s.read_log()[-2000:]


def test_cold_documents_prefill_in_slices_between_decode_steps():
    """An uncached system message and documents are computed a prefill chunk at a
    time (kvs_docs_warmer), each slice followed by a decode step of the other
    streams: a stream keeps receiving tokens while a cold RAG request prefills,
    and the request's answer has the bits of the same request served from the
    cache."""
    s = Server("--slots", "2", "--max-queue", "8", "--ctx", "2048", "--prefill-chunk", "16")
    try:
        docs = ["The Danube flows through ten countries, more than any other river in Europe. " * 4,
                "Vienna, Budapest and Belgrade are capital cities built on the banks of the Danube. " * 4,
                "The Black Sea receives the Danube through a wide delta in Romania and Ukraine. " * 4]
        system = "You answer questions about European rivers from the passages given, briefly and exactly. " * 3
        msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Which sea does the Danube reach?"}]
        stream_body = {"messages": [{"role": "user", "content": "Count from one to one hundred."}],
                       "max_tokens": 64 if not QUICK else 32, "stream": True, "temperature": 0}
        with streaming(s, "/v1/chat/completions", stream_body, started=3) as events:
            t_rag = time.time()
            cold = chat(s, msgs, max_tokens=4, documents=docs)
            t_done = time.time()
        arrivals = [t for t, _ in events]
        k = cold["usage"]["kvstitch"]
        assert k["docs_computed"] == 3 and k["docs_hit"] == 0, k
        # the system message was computed by this request too (in slices, before
        # the documents), not served from the cache (only the template's opening
        # tokens, which the stream's prompt stored, are)
        assert k["cached_tokens"] <= 8 and k["computed_tokens"] > 50, k
        # 16-token slices of ~200 document tokens, then the assembly
        assert k["prefill_steps"] >= 10, k
        # The stream's longest silence while the RAG request ran is a slice and a
        # decode step, not the whole prefill (which one step would make it).
        gaps = [b - a for a, b in zip(arrivals, arrivals[1:]) if b > t_rag and a < t_done]
        prefill_s = k["timings"]["prefill_ms"] / 1000.0
        assert gaps and max(gaps) < 0.5 * prefill_s, "longest stream gap %.3f s, cold prefill %.3f s" % (
            max(gaps) if gaps else -1, prefill_s)
        warm = chat(s, msgs, max_tokens=4, documents=docs)
        kw = warm["usage"]["kvstitch"]
        assert kw["docs_hit"] == 3 and kw["docs_computed"] == 0 and kw["prefill_steps"] == 1, kw
        assert kw["cached_tokens"] > 50, kw  # the system message, stored by the first request
        assert kw["first_logits_sha256"] == k["first_logits_sha256"]
        assert warm["choices"][0]["message"]["content"] == cold["choices"][0]["message"]["content"]
    finally:
        assert s.stop() == 0, s.read_log()[-2000:]


def tiny_model_where_one_token_overflows(dst, bad):
    """The shared tiny llama (F16, 1 layer, 8 dims) rewritten so that token
    `bad` alone overflows its activations: column 0 of every token's
    embedding 0, of bad's 1, and element 0 of blk.0.attn_norm.weight 3e38
    (0 * 3e38 is 0; bad's normed input is inf there)."""
    import struct
    from gguf import GGUFReader
    shared = os.environ.get("KVSTITCH_SHARED") or os.path.join(os.path.dirname(CLI), "..", "..", "shared")
    src = os.path.join(shared, "models", "llama-2-tiny-random.gguf")
    tensors = {t.name: t for t in GGUFReader(src).tensors}
    with open(src, "rb") as f:
        b = bytearray(f.read())
    emb = tensors["token_embd.weight"]
    n_embd, n_vocab = int(emb.shape[0]), int(emb.shape[1])
    assert emb.tensor_type.name == "F16", emb.tensor_type.name
    for tok in range(n_vocab):
        struct.pack_into("<e", b, emb.data_offset + tok * n_embd * 2, 1.0 if tok == bad else 0.0)
    struct.pack_into("<f", b, tensors["blk.0.attn_norm.weight"].data_offset, 3e38)
    with open(dst, "wb") as f:
        f.write(b)


def test_an_overflowing_row_ends_only_its_stream(tmp_path):
    """A decode step whose row for one stream overflows (finite weights of
    extreme size, token 3 here) ends that stream with a 500 naming the
    overflow, and no other: a stream decoding in the same steps goes on, its
    text that of the same request alone. One row's overflow had failed the
    whole step (kvs_decode_batch) and ended every stream in it."""
    model = str(tmp_path / "tiny-overflow.gguf")
    tiny_model_where_one_token_overflows(model, 3)
    s = Server("--slots", "2", model=model)
    try:
        # (logit_bias: the good stream never samples token 3, nor an end)
        good = {"prompt": [1, 5, 6, 7], "max_tokens": 1000, "temperature": 0, "logit_bias": {"3": -100, "2": -100}}
        alone = s.post("/v1/completions", good)
        assert alone.status_code == 200, alone.text
        with streaming(s, "/v1/completions", dict(good, stream=True), started=5) as events:
            # its last prompt token, 3, decodes in the good stream's step
            bad = s.post("/v1/completions", {"prompt": [1, 3], "max_tokens": 1, "temperature": 0})
            t_bad = time.time()
        assert bad.status_code == 500, bad.text
        # "row 1 of 2": it ran in a step beside the good stream
        assert "overflow" in bad.json()["error"]["message"] and " of 2" in bad.json()["error"]["message"], bad.text
        assert all("choices" in e for _, e in events), [e for _, e in events if "choices" not in e][:1]
        assert any(t > t_bad for t, _ in events), "the stream ended before the bad request ran"
        assert "".join(e["choices"][0]["text"] for _, e in events) == alone.json()["choices"][0]["text"]
        assert s.get("/health").status_code == 200
    finally:
        assert s.stop() == 0, s.read_log()[-2000:]


def test_sigterm_answers_every_request_already_received():
    # A request whose body is still arriving when SIGTERM comes is answered
    # (503, draining), not cut: HTTP stops only once no request is in
    # flight (the same wait covers a finished job whose handler is still
    # writing its reply, a race the 429 / drain test below hit now and then).
    s = Server("--slots", "1", "--ctx", "512", "--drain-timeout", "30")
    try:
        body = json.dumps({"prompt": "Hello", "max_tokens": 4}).encode()
        head = ("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Authorization: Bearer %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
                % (s.key, len(body))).encode()
        sock = socket.create_connection(("127.0.0.1", s.port), timeout=60 * SLOW)
        sock.sendall(head + body[:5])
        time.sleep(0.5 * SLOW)  # the headers are in: the request is in flight
        s.proc.send_signal(signal.SIGTERM)
        t0 = time.time()
        while "draining" not in s.read_log() and time.time() - t0 < 30 * SLOW:
            time.sleep(0.05)
        time.sleep(0.5 * SLOW)  # (the old server stopped HTTP here and cut the connection)
        sock.sendall(body[5:])
        reply = b""
        while True:
            part = sock.recv(65536)
            if not part:
                break
            reply += part
        sock.close()
        status = reply.split(b"\r\n", 1)[0]
        assert status.startswith(b"HTTP/1.1 503"), reply[:300]
        assert b"shutting_down" in reply, reply[-300:]
        assert s.proc.wait(timeout=60 * SLOW) == 0
    finally:
        s.stop()


def test_second_signal_cuts_the_drain_short():
    # A second SIGINT during the drain cancels the running request at once
    # and the server stops cleanly (exit 0, the stream ended with an error
    # event); it had been ignored, the drain running its whole timeout.
    s = Server("--slots", "1", "--ctx", "2048", "--max-tokens", "2000", "--drain-timeout", "600")
    try:
        r = requests.post(s.url + "/v1/completions", headers=s.headers(), stream=True, timeout=120 * SLOW,
                          json={"prompt": "Once upon a time", "max_tokens": 1900, "stream": True,
                                "logit_bias": {"0": -100, "2": -100}})
        lines = r.iter_lines()
        assert next(line for line in lines if line).startswith(b"data: ")
        s.proc.send_signal(signal.SIGINT)
        t0 = time.time()
        while "draining" not in s.read_log() and time.time() - t0 < 30 * SLOW:
            time.sleep(0.05)
        assert "draining" in s.read_log()
        s.proc.send_signal(signal.SIGINT)
        rest = [line for line in lines if line]
        assert rest[-1] == b"data: [DONE]" and b"shutting_down" in rest[-2], rest[-3:]
        assert s.proc.wait(timeout=120 * SLOW) == 0
        assert "SIGINT again: cancelling the running requests now" in s.read_log()
    finally:
        s.stop()


def test_sigterm_finishes_queued_requests():
    # One slot, one request running and two queued when SIGTERM comes: all
    # three are answered 200. The drain had seen the last queued request in
    # neither the queue (just taken off) nor the slots (not yet counted) and
    # cancelled it: 503 in 6 rounds of 6.
    s = Server("--slots", "1", "--ctx", "512", "--drain-timeout", "120")
    try:
        def ask(i):
            return s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": f"Story {i}"}],
                                                   "max_tokens": 12, "temperature": 0})
        with cf.ThreadPoolExecutor(3) as ex:
            futs = [ex.submit(ask, i) for i in range(3)]
            # All three received: one in the slot and two queued, read in one
            # scrape. Two queued alone may be the first two before the slot
            # took one, the third not yet read: a request that comes after
            # SIGTERM is 503 by design (a fresh clone's run failed so).
            t0 = time.time()
            while metrics(s, "kvstitch_queue_depth", "kvstitch_active_slots") != [2, 1] and \
                    time.time() - t0 < 60 * SLOW:
                time.sleep(0.01)
            s.proc.send_signal(signal.SIGTERM)
            codes = [f.result().status_code for f in futs]
        assert codes == [200, 200, 200], [f.result().text[:200] for f in futs]
        assert s.proc.wait(timeout=120 * SLOW) == 0
    finally:
        s.stop()


def test_queue_full_429_and_sigterm_drain():
    s = Server("--slots", "1", "--max-queue", "1", "--ctx", "512", "--drain-timeout", "120")
    try:
        body = {"messages": [{"role": "user", "content": "Tell me a long story."}], "max_tokens": 40,
                "temperature": 0}
        with cf.ThreadPoolExecutor(4) as ex:
            futs = [ex.submit(s.post, "/v1/chat/completions", body) for _ in range(4)]
            codes = sorted(f.result().status_code for f in futs)
        assert 429 in codes and 200 in codes, codes
        err = [f.result().json() for f in futs if f.result().status_code == 429][0]["error"]
        assert err["code"] == "queue_full" and err["type"] == "rate_limit_error"
        # more choices than the queue holds can never be queued: 400, not a 429 to retry
        e = s.post("/v1/chat/completions", dict(body, n=2, max_tokens=1)).json()["error"]
        assert e["code"] == "invalid_value" and e["param"] == "n" and "--max-queue 1" in e["message"], e
        # SIGTERM while a request runs: it completes, then the process exits 0.
        # The slot of the requests above may be released just after their
        # replies: wait for it, so that "active" below is the new request.
        t0 = time.time()
        while metric(s, "kvstitch_active_slots") != 0 and time.time() - t0 < 60 * SLOW:
            time.sleep(0.05)
        with cf.ThreadPoolExecutor(1) as ex:
            fut = ex.submit(s.post, "/v1/chat/completions", body)
            t0 = time.time()
            while metric(s, "kvstitch_active_slots") == 0 and time.time() - t0 < 60 * SLOW:
                time.sleep(0.05)
            s.proc.send_signal(signal.SIGTERM)
            r = fut.result()
        assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 40
        assert s.proc.wait(timeout=120 * SLOW) == 0
        assert "draining" in s.read_log()
    finally:
        s.stop()


def test_sigterm_cancelled_warm_is_503():
    # A /v1/cache/warm queued behind a long request when a short drain ends:
    # cancelled, it is 503 shutting_down like a chat request, not a 200 that
    # reports a warm never done.
    s = Server("--slots", "1", "--ctx", "2048", "--max-tokens", "2000", "--drain-timeout", "1")
    try:
        long_body = {"prompt": "Once upon a time", "max_tokens": 1500, "logit_bias": {"0": -100, "2": -100}}
        with cf.ThreadPoolExecutor(2) as ex:
            long_req = ex.submit(s.post, "/v1/completions", long_body)
            t0 = time.time()
            while metric(s, "kvstitch_active_slots") == 0 and time.time() - t0 < 60 * SLOW:
                time.sleep(0.02)
            warm = ex.submit(s.post, "/v1/cache/warm", {"prompt": "A document to keep. " * 20})
            while metric(s, "kvstitch_queue_depth") < 1 and time.time() - t0 < 60 * SLOW:
                time.sleep(0.02)
            s.proc.send_signal(signal.SIGTERM)
            r = warm.result()
            long_req.result()
        assert r.status_code == 503 and r.json()["error"]["code"] == "shutting_down", r.text[:300]
        assert s.proc.wait(timeout=120 * SLOW) == 0
    finally:
        s.stop()


def test_api_key_file_must_be_a_whole_regular_file(tmp_path):
    # A FIFO had blocked the start; a key longer than the reader's buffer
    # had been cut (its first 511 bytes worked); a directory read as empty.
    fifo, long_key, nul_key = tmp_path / "fifo", tmp_path / "long", tmp_path / "nul"
    os.mkfifo(fifo)
    long_key.write_text("k" * 5000 + "\n")
    nul_key.write_bytes(b"abc\0def\n")  # had been taken as the key "abc"
    blank_key = tmp_path / "blank"
    blank_key.write_text(" \t \nsecond line\n")  # spaces alone are no key
    for path, said in [(fifo, "not a regular file"), (tmp_path, "not a regular file"), (long_key, "longer than"),
                       (nul_key, "NUL byte"), (blank_key, "is empty")]:
        p = subprocess.run([CLI, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0",
                            "--api-key-file", str(path)], capture_output=True, text=True, timeout=60 * SLOW)
        assert p.returncode == 2 and said in p.stderr, (path, p.returncode, p.stderr)


def test_api_key_file_spaces_around_the_key_are_not_part_of_it(tmp_path):
    # "secret " in the file had been the key, which no client could send:
    # spaces around the client's key are not part of it either.
    key = tmp_path / "key"
    key.write_text("  secret \t\n")
    s = Server("--slots", "1", "--ctx", "256", "--api-key-file", str(key), api_key=False)
    try:
        for header, status in [("Bearer secret", 200), ("Bearer  secret ", 200), ("Bearer secret ", 200),
                               ("Bearer  secret", 200), ("Bearer secret2", 401), ("Bearer sec", 401)]:
            r = requests.get(s.url + "/v1/models", headers={"Authorization": header}, timeout=60 * SLOW)
            assert r.status_code == status, (header, r.status_code, r.text[:200])
    finally:
        s.stop()


def test_cache_dir_write_errors_are_counted(tmp_path):
    # The cache directory removed under a running server: its writes fail
    # (the chunks stay in RAM) and /v1/cache/stats and /metrics say how many;
    # only "chunks_stored: 0" had hinted at it.
    d = tmp_path / "kv"
    s = Server("--slots", "1", "--ctx", "512", "--cache-dir", str(d))
    try:
        shutil.rmtree(d)  # (it holds the weights memo)
        r = s.post("/v1/completions", {"prompt": "The committee met on a Tuesday. " * 12, "max_tokens": 1})
        assert r.status_code == 200, r.text
        errors = s.get("/v1/cache/stats").json()["disk_write_errors"]
        assert errors > 0 and metric(s, "kvstitch_cache_disk_write_errors_total") == errors
        r = s.post("/v1/completions", {"prompt": "Another text, written nowhere. " * 12, "max_tokens": 1})
        assert r.status_code == 200, r.text
    finally:
        s.stop()
    # said on stderr too, once (it had been silent there)
    assert s.read_log().count("could not be written to the cache dir") == 1, s.read_log()[-2000:]


def test_cache_key_file(tmp_path):
    # --cache-key-file: a keyed server stores entries a second keyed server
    # reuses with the same answer; a keyless server on the same directory
    # reuses none of them; a short or missing key file stops the start,
    # naming the file.
    d, key = tmp_path / "kv", tmp_path / "cache.key"
    key.write_text("a-secret-cache-key-0123456789\n")
    body = {"prompt": "The committee met on a Tuesday. " * 12, "max_tokens": 3, "temperature": 0}
    outs = []
    for args in (["--cache-key-file", str(key)], ["--cache-key-file", str(key)], []):
        s = Server("--slots", "1", "--ctx", "512", "--cache-dir", str(d), *args)
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            outs.append((r.json()["choices"][0]["text"], metric(s, "kvstitch_cache_hit_tokens_total")))
        finally:
            s.stop()
    assert outs[0][1] == 0 and outs[1][1] > 0 and outs[2][1] == 0, outs
    assert outs[0][0] == outs[1][0] == outs[2][0]
    (tmp_path / "short").write_text("0123456789")
    for path, said in [(tmp_path / "short", "at least 16"), (tmp_path / "missing", "cannot read")]:
        p = subprocess.run([CLI, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "--cache-dir", str(d),
                            "--cache-key-file", str(path)], capture_output=True, text=True, timeout=60 * SLOW)
        assert p.returncode != 0 and said in p.stderr and str(path) in p.stderr, (path, p.returncode, p.stderr)


def test_cache_key_bad_mac_counted_apart(tmp_path):
    # A keyed server meets forged entries (their KV changed, checksums and
    # header digests recomputed, the MAC the old one): each is refused and
    # counted as damaged and, apart, as a bad MAC in /v1/cache/stats
    # (disk_bad_mac) and /metrics (kvstitch_cache_bad_mac_total{tier=...});
    # the answer is the cold one. They had been counted as damage only.
    import forge_entry
    d, key = tmp_path / "kv", tmp_path / "cache.key"
    key.write_text("a-secret-cache-key-0123456789\n")
    body = {"prompt": "The committee met on a Tuesday. " * 12, "max_tokens": 3, "temperature": 0}
    outs = []
    for forge in (False, True):
        if forge:
            for f in d.glob("*.kvc"):
                forge_entry.main("forge", str(f))
        s = Server("--slots", "1", "--ctx", "512", "--cache-dir", str(d), "--cache-key-file", str(key))
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            st = s.get("/v1/cache/stats").json()
            outs.append((r.json()["choices"][0]["text"], st["disk_bad"], st["disk_bad_mac"], st["redis_bad_mac"],
                         metric(s, 'kvstitch_cache_bad_mac_total{tier="disk"}'),
                         metric(s, 'kvstitch_cache_bad_mac_total{tier="redis"}'),
                         metric(s, "kvstitch_cache_damaged_total")))
        finally:
            s.stop()
    assert outs[0][1:] == (0, 0, 0, 0, 0, 0), outs
    text, bad, bad_mac, redis_bad_mac, m_disk, m_redis, m_damaged = outs[1]
    assert text == outs[0][0] and bad >= 1 and bad_mac == bad == m_disk == m_damaged and redis_bad_mac == m_redis == 0, outs


def test_chat_template_flag_chooses_the_layout():
    """--chat-template FAMILY: every chat request (and documents laid out as
    chat) uses that family, for a file without a template or one not
    recognised (the gemma3 270M file has none: its chats had been 400s). On
    SmolLM2 (ChatML) the gemma layout must give exactly the gemma text's
    tokens; an unknown family stops the server at start naming it."""
    s = Server("--slots", "1", "--ctx", "512", "--chat-template", "gemma")
    try:
        r = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello"}],
                                             "max_tokens": 1, "temperature": 0})
        assert r.status_code == 200, r.text
        text = "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n"
        t = s.post("/tokenize", {"content": text, "add_special": True, "parse_special": True})
        assert t.status_code == 200, t.text
        assert r.json()["usage"]["prompt_tokens"] == len(t.json()["tokens"])
        chatml = s.post("/tokenize", {"content": "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                                      "add_special": True, "parse_special": True}).json()["tokens"]
        assert len(chatml) != len(t.json()["tokens"])  # (the check can tell the layouts apart)
    finally:
        assert s.stop() == 0
    p = subprocess.run([CLI, "serve", "-m", MODEL, "--port", "0", "--chat-template", "jinja"],
                       capture_output=True, text=True, timeout=120 * SLOW)
    # refused as a bad argument before the port is taken (it had printed
    # "listening on" first, then exited 1 when the load refused it)
    assert p.returncode == 2, p.stderr
    assert "--chat-template: chat template family 'jinja'" in p.stderr, p.stderr
    assert "chatml, qwen3, llama3, llama2, gemma" in p.stderr and "listening" not in p.stderr, p.stderr


def test_reply_timeout_closes_a_stream_nobody_reads_and_stops_it():
    """A stream whose client stopped reading (the socket takes no byte) is
    closed after --reply-timeout and its generation stops (it had held the
    connection, its thread and the job's text for 600 s, decoding on).
    Waits inside the server (a queue longer than the timeout) do not count."""
    s = Server("--slots", "4", "--ctx", "2048", "--reply-timeout", "2")
    try:
        ban = {"0": -100, "2": -100}  # never an end of text
        # A queued stream that waits longer than the timeout is served whole.
        busy = raw_post(s, "/v1/completions", json.dumps({"prompt": "Write a long story.", "max_tokens": 700, "n": 4,
                                                          "temperature": 0, "logit_bias": ban}).encode())
        time.sleep(0.3)
        r = requests.post(s.url + "/v1/completions", headers=s.headers(), stream=True, timeout=120 * SLOW,
                          json={"prompt": "Hi", "max_tokens": 4, "stream": True, "temperature": 0})
        events = [line for line in r.iter_lines() if line]
        assert events[-1] == b"data: [DONE]", events[-3:]
        busy.close()
        wait_cancelled(s, 0, 30 * SLOW)
        # A stream nobody reads: 4 choices with 20 top logprobs fill the
        # socket's buffers within a few hundred steps, of the 4 x 1900.
        before = metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}')
        tokens0 = metric(s, "kvstitch_decode_tokens_total")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", s.port))
        body = json.dumps({"prompt": "Write a long story.", "max_tokens": 1900, "n": 4, "stream": True,
                           "logprobs": 20, "temperature": 0.7, "logit_bias": ban}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + s.key.encode() + b"\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        t0 = time.time()
        while time.time() - t0 < 90 * SLOW and \
                metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}') < before + 4:
            time.sleep(0.1)
        assert metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}') == before + 4
        assert metric(s, "kvstitch_active_slots") == 0
        decoded = metric(s, "kvstitch_decode_tokens_total") - tokens0
        print("load: a stream nobody reads stopped after %d of 4 x 1900 tokens, %.1f s" % (decoded, time.time() - t0))
        assert decoded < 1900  # (the send buffer hid it for ~2,400 before the acknowledged bytes were counted)
        sock.close()
    finally:
        assert s.stop() == 0


def test_reply_timeout_stops_a_stream_whose_buffers_still_take_bytes():
    """A client that stops reading, with a 64 KiB receive buffer and a plain
    stream (~200 bytes a token): the server's own send buffer grows to
    megabytes (tcp_wmem) and took all of its 3,500 tokens, so the stream
    decoded to the end. The timeout now counts from the last byte the
    client's side acknowledged while bytes waited for it. (A receive buffer
    left to the kernel grows, unread, up to tcp_rmem's maximum when bytes
    trickle in: TCP cannot tell such a client from a reading one.)"""
    s = Server("--slots", "1", "--ctx", "4096", "--reply-timeout", "2")
    try:
        tokens0 = metric(s, "kvstitch_decode_tokens_total")
        before = metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}')
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.connect(("127.0.0.1", s.port))
        body = json.dumps({"prompt": "Write a long story.", "max_tokens": 3500, "stream": True,
                           "temperature": 0, "logit_bias": {"0": -100, "2": -100}}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Authorization: Bearer " + s.key.encode() + b"\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        t0 = time.time()
        while time.time() - t0 < 120 * SLOW and metric(s, "kvstitch_active_slots") == 0:
            time.sleep(0.05)
        while time.time() - t0 < 120 * SLOW and metric(s, "kvstitch_active_slots") == 1:
            time.sleep(0.1)
        decoded = metric(s, "kvstitch_decode_tokens_total") - tokens0
        print("load: an unread plain stream stopped after %d of 3500 tokens, %.1f s" % (decoded, time.time() - t0))
        assert metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}') == before + 1
        assert decoded < 3500 / 2
        sock.close()
        # A client that reads, slower than the stream comes (4 KiB each
        # 0.1 s through an 8 KiB receive buffer, so bytes wait for it while
        # its side acknowledges what it reads), keeps its stream past the
        # timeout.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
        sock.connect(("127.0.0.1", s.port))
        body = json.dumps({"prompt": "Write a long story.", "max_tokens": 600, "stream": True, "logprobs": 5,
                           "temperature": 0, "logit_bias": {"0": -100, "2": -100}}).encode()
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Connection: close\r\nAuthorization: Bearer " + s.key.encode() + b"\r\nContent-Length: " +
                     str(len(body)).encode() + b"\r\n\r\n" + body)
        t1, got = time.time(), b""
        while time.time() - t1 < 300 * SLOW:
            part = sock.recv(4096)
            if not part:
                break
            got += part
            time.sleep(0.1)
        sock.close()
        print("load: a slow reader took %d bytes in %.1f s" % (len(got), time.time() - t1))
        assert b"data: [DONE]" in got and b'"finish_reason":"length"' in got, got[-300:]
        assert metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}') == before + 1
    finally:
        assert s.stop() == 0


def test_cancelled_queued_requests_leave_the_queue_at_once():
    """Queued requests whose clients left give their places up at once (they
    had stayed until a slot freed: a queue full of clients that had left
    answered 429 queue_full)."""
    s = Server("--slots", "1", "--ctx", "2048", "--max-queue", "4")
    try:
        ban = {"0": -100, "2": -100}
        busy = raw_post(s, "/v1/completions", json.dumps({"prompt": "Write a long story.", "max_tokens": 1500,
                                                          "temperature": 0, "logit_bias": ban}).encode())
        time.sleep(0.3)
        queued = [raw_post(s, "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 2}).encode())
                  for _ in range(4)]
        t0 = time.time()
        while metric(s, "kvstitch_queue_depth") < 4 and time.time() - t0 < 30 * SLOW:
            time.sleep(0.05)
        assert metric(s, "kvstitch_queue_depth") == 4
        for q in queued:
            q.close()
        t0 = time.time()
        while metric(s, "kvstitch_queue_depth") > 0 and time.time() - t0 < 10 * SLOW:
            time.sleep(0.05)
        assert metric(s, "kvstitch_queue_depth") == 0
        assert metric(s, "kvstitch_active_slots") == 1  # the long one still runs
        r = raw_post(s, "/v1/completions", json.dumps({"prompt": "Hi", "max_tokens": 2}).encode())
        r.settimeout(1)
        try:
            head = r.recv(64)  # a queue_full answer comes at once; a queued request answers nothing yet
        except socket.timeout:
            head = b""
        assert not head.startswith(b"HTTP/1.1 429"), head
        r.close()
        busy.close()
    finally:
        assert s.stop() == 0


def test_prefill_stopped_counts_only_what_it_computed():
    """kvstitch_prompt_tokens_total{source="computed"} counts what a prefill
    ran when its client left before the end, not the whole prompt (a 3,983-
    token prompt cancelled after 0.15 s had counted 3,983)."""
    s = Server("--slots", "1", "--ctx", "8192", "--prefill-chunk", "64")
    try:
        before = metric(s, 'kvstitch_prompt_tokens_total{source="computed"}')
        cancelled = metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}')
        text = " ".join("word%d" % i for i in range(1200))  # ~4,900 tokens
        sock = raw_post(s, "/v1/completions", json.dumps({"prompt": text, "max_tokens": 1}).encode())
        time.sleep(0.3)
        sock.close()
        wait_cancelled(s, cancelled, 60 * SLOW)
        assert metric(s, 'kvstitch_generations_total{finish_reason="cancelled"}') > cancelled
        n = s.post("/tokenize", {"content": text}).json()["tokens"]
        computed = metric(s, 'kvstitch_prompt_tokens_total{source="computed"}') - before
        assert 0 < computed < len(n) / 2, (computed, len(n))
    finally:
        assert s.stop() == 0


def _as_owner_prefix():
    """A command prefix under which root meets file modes as their owner does
    (CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH dropped), or () when not root;
    None when that cannot be arranged here."""
    if os.geteuid() != 0:
        return ()
    if not shutil.which("setpriv"):
        return None
    prefix = ("setpriv", "--bounding-set=-dac_override,-dac_read_search",
              "--inh-caps=-dac_override,-dac_read_search")
    if subprocess.run(list(prefix) + ["true"], capture_output=True).returncode != 0:
        return None
    return prefix


@pytest.mark.parametrize("mode,says", [(0o300, "cannot be listed (Permission denied)"),
                                       (0o555, "is not writable (Permission denied)")])
def test_unwritable_cache_dir_is_said_at_start(tmp_path, mode, says):
    """A cache dir the server may not list or write opens (entries read by
    key) but stores nothing: serve says so once at start, where each
    refused write had only counted in /metrics. It still answers."""
    prefix = _as_owner_prefix()
    if prefix is None:
        pytest.skip("root, and setpriv cannot drop the DAC capabilities here")
    d = tmp_path / "cache"
    d.mkdir()
    d.chmod(mode)
    s = Server("--cache-dir", str(d), prefix=prefix)
    try:
        assert "warning: --cache-dir %s %s" % (d, says) in s.read_log()
        r = s.post("/v1/completions", {"prompt": "Hello there", "max_tokens": 2, "temperature": 0})
        assert r.status_code == 200, r.text
        assert metric(s, "kvstitch_cache_disk_write_errors_total") > 0
    finally:
        assert s.stop() == 0
        d.chmod(0o755)


def test_writable_cache_dir_draws_no_warning(tmp_path):
    d = tmp_path / "cache"
    d.mkdir()
    s = Server("--cache-dir", str(d))
    try:
        assert "warning: --cache-dir" not in s.read_log()
    finally:
        assert s.stop() == 0


def test_catch_up_counts_only_what_other_requests_stored(tmp_path):
    # The head entry of a stored prompt is gone: the request computes it and
    # stores it, which makes the rest of the chain reachable; its catch-up
    # then loads that rest. cached_tokens had become the whole load (the
    # head this request computed included) and the page showed it all as
    # cached. Now the runs say computed, cached, computed.
    d = tmp_path / "cache"
    prompt = "Notes: " + " ".join("item%d is %d" % (i, i * 7) for i in range(120))
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0, "return_prompt_sources": True}

    def answer():  # a server of its own on d, one request
        s = Server("--slots", "1", "--ctx", "2048", "--prefill-chunk", "64", "--cache-dir", str(d))
        try:
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            return r.json()
        finally:
            assert s.stop() == 0, s.read_log()[-2000:]
    cold = answer()
    ls = json.loads(subprocess.run([CLI, "cache", "ls", "--cache-dir", str(d), "--json"], check=True,
                                   capture_output=True, text=True).stdout)
    entries = ls["entries"]
    head = [e for e in entries if e["pos0"] == 0]
    assert len(head) == 1 and len(entries) >= 5, entries
    os.unlink(d / (head[0]["prefix_key"] + ".kvc"))
    warm = answer()
    k = warm["usage"]["kvstitch"]
    assert warm["choices"][0]["text"] == cold["choices"][0]["text"]
    assert k["first_logits_sha256"] == cold["usage"]["kvstitch"]["first_logits_sha256"]
    runs = k["prompt_sources"]
    assert [x["source"] for x in runs][:2] == ["computed", "cached"], runs
    assert runs[0]["tokens"] >= 64, runs
    assert k["cached_tokens"] == sum(x["tokens"] for x in runs if x["source"] == "cached"), (k, runs)
    assert k["cached_tokens"] + k["computed_tokens"] == warm["usage"]["prompt_tokens"], k
    assert k["cached_tokens"] <= warm["usage"]["prompt_tokens"] - runs[0]["tokens"], k


def test_cache_dir_bound_keeps_the_head_of_a_stepwise_store(tmp_path):
    # --cache-dir-max-bytes bounds the directory (it had no option: half the
    # free space); a prompt stored a prefill step at a time on a bound of two
    # chunks keeps its head (the server had been left with two tail entries
    # nothing reached, reusing 0 after a restart).
    d = tmp_path / "cache"
    prompt = "Notes: " + " ".join("item%d is %d" % (i, i * 7) for i in range(120))
    body = {"prompt": prompt, "max_tokens": 1, "temperature": 0}
    cached = []
    for _ in range(2):
        s = Server("--slots", "1", "--ctx", "2048", "--prefill-chunk", "64", "--cache-max-bytes", "3000000",
                   "--cache-dir", str(d), "--cache-dir-max-bytes", "3200000")
        try:
            assert s.get("/v1/cache/stats").json()["dir_max_bytes"] == 3200000
            r = s.post("/v1/completions", body)
            assert r.status_code == 200, r.text
            cached.append(r.json()["usage"]["kvstitch"]["cached_tokens"])
        finally:
            assert s.stop() == 0, s.read_log()[-2000:]
    ls = json.loads(subprocess.run([CLI, "cache", "ls", "--cache-dir", str(d), "--json"], check=True,
                                   capture_output=True, text=True).stdout)["entries"]
    keys = {e["prefix_key"] for e in ls}
    assert ls and all(e["pos0"] == 0 or e["parent_key"] in keys for e in ls), ls
    assert cached[0] == 0 and cached[1] >= 64, cached
