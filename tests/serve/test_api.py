"""The OpenAI API through the real `openai` client: chat and completions,
streaming and not, usage fields, documents via extra_body, and the errors."""
import json
import uuid
import time

import openai
import pytest
import requests

Q = [{"role": "user", "content": "What is the capital of France?"}]


def test_health_and_models(server, client):
    r = requests.get(server.url + "/health", timeout=30)
    assert r.status_code == 200 and r.json()["status"] == "ok"
    models = client.models.list()
    assert [m.id for m in models.data] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]


def test_models_retrieve(server, client):
    """GET /v1/models/{id} (the openai client's models.retrieve; it had been
    a 404 "no such endpoint"): the object /v1/models lists, for the id
    served (the file's base name, or --alias), percent-decoded; another id
    is OpenAI's 404 model_not_found naming it."""
    listed = client.models.list().data[0]
    got = client.models.retrieve(listed.id)
    assert got.model_dump() == listed.model_dump() and got.object == "model"
    with pytest.raises(openai.NotFoundError) as e:
        client.models.retrieve("gpt-4o")
    assert e.value.body["code"] == "model_not_found" and "'gpt-4o'" in e.value.body["message"], e.value.body
    # raw: the body of the 404, an escaped id decoded, auth, HEAD and 405 as every route's
    e = error_of(server.get("/v1/models/no%20such%2Fmodel%C3%A9"), 404)
    assert e == {"message": e["message"], "type": "invalid_request_error", "param": "model", "code": "model_not_found"}
    assert e["message"].startswith("The model 'no such/model\u00e9' does not exist"), e
    raw = server.get("/v1/models").json()["data"][0]
    assert server.get("/v1/models/SmolLM2-135M-Instruct%2EQ4_1.gguf").json() == raw
    assert error_of(requests.get(server.url + "/v1/models/" + listed.id, timeout=30), 401)["code"] == "invalid_api_key"
    assert requests.head(server.url + "/v1/models/" + listed.id, headers=server.headers(), timeout=30).status_code == 200
    r = requests.delete(server.url + "/v1/models/" + listed.id, headers=server.headers(), timeout=30)
    assert r.status_code == 405 and r.headers["Allow"] == "OPTIONS, GET, HEAD", r.headers


def test_models_retrieve_without_an_id(server):
    """GET /v1/models/ (nothing after the slash) names no model: a 404 that
    says the id is missing and where the list is (it had been
    model_not_found "The model '' does not exist"); GET /v1/models still
    lists."""
    e = error_of(server.get("/v1/models/"), 404)
    assert (e["type"], e["param"], e["code"]) == ("invalid_request_error", "model", "missing_required_parameter"), e
    assert "no model id" in e["message"] and "GET /v1/models" in e["message"], e
    assert "'SmolLM2-135M-Instruct.Q4_1.gguf'" in e["message"] and "''" not in e["message"], e
    assert requests.head(server.url + "/v1/models/", headers=server.headers(), timeout=30).status_code == 404
    listed = server.get("/v1/models").json()
    assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["SmolLM2-135M-Instruct.Q4_1.gguf"]


def test_models_retrieve_by_alias():
    """With --alias the id served is the alias, whose '/' and spaces the
    client percent-encodes; the file's base name is then not served."""
    from conftest import Server
    s = Server("--slots", "1", "--ctx", "256", "--alias", "team/small model")
    try:
        c = openai.OpenAI(base_url=s.url + "/v1", api_key=s.key, max_retries=0, timeout=60)
        m = c.models.retrieve("team/small model")
        assert (m.id, m.object, m.owned_by, m.model_extra["context_length"]) == ("team/small model", "model", "kvstitch", 256)
        assert [x.model_dump() for x in c.models.list().data] == [m.model_dump()]
        with pytest.raises(openai.NotFoundError):
            c.models.retrieve("SmolLM2-135M-Instruct.Q4_1.gguf")
    finally:
        assert s.stop() == 0


def test_models_while_loading_wait_for_the_context_length():
    """While the model loads, /v1/models and /v1/models/ID answer 503
    model_loading (as /v1/completions does), never a context_length the
    load has not set yet: they had answered 200 with context_length 0 (and
    read it unsynchronized with the load: ThreadSanitizer)."""
    import re
    import subprocess
    import tempfile
    from conftest import CLI, MODEL
    with tempfile.TemporaryDirectory() as tmp:
        log_path = tmp + "/server.log"
        with open(log_path, "w") as log:
            p = subprocess.Popen([CLI, "serve", "-m", MODEL, "--host", "127.0.0.1", "--port", "0", "--ctx", "256"],
                                 stdout=log, stderr=subprocess.STDOUT)
        try:
            t0, port = time.time(), None
            while port is None and time.time() - t0 < 60:
                m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", open(log_path).read())
                port = int(m.group(1)) if m else time.sleep(0.01)
            assert port, open(log_path).read()
            seen = set()
            while "ready on" not in open(log_path).read() and time.time() - t0 < 120:
                for path in ("/v1/models", "/v1/models/SmolLM2-135M-Instruct.Q4_1.gguf"):
                    r = requests.get("http://127.0.0.1:%d%s" % (port, path), timeout=30)
                    if r.status_code == 503:
                        assert r.json()["error"]["code"] == "model_loading", r.text
                    else:
                        assert r.status_code == 200, r.text
                        body = r.json()
                        model = body["data"][0] if path == "/v1/models" else body
                        assert model["context_length"] == 256, r.text
                    seen.add(r.status_code)
            r = requests.get("http://127.0.0.1:%d/v1/models" % port, timeout=30)
            assert r.status_code == 200 and r.json()["data"][0]["context_length"] == 256, r.text
            print("load: /v1/models while loading answered %s" % sorted(seen))
        finally:
            p.terminate()
            assert p.wait(timeout=60) == 0


def check_usage(u):
    assert u.prompt_tokens > 0 and u.completion_tokens > 0
    assert u.total_tokens == u.prompt_tokens + u.completion_tokens
    assert u.prompt_tokens_details is not None and u.prompt_tokens_details.cached_tokens >= 0
    k = u.model_extra["kvstitch"]
    assert k["cached_tokens"] + k["moved_tokens"] + k["computed_tokens"] == u.prompt_tokens
    for f in ("queue_ms", "ttft_ms", "prefill_ms", "decode_ms", "total_ms"):
        assert k["timings"][f] >= 0
    return k


def test_chat_non_streaming(client):
    r = client.chat.completions.create(model="x", messages=Q, max_tokens=16, temperature=0)
    assert r.object == "chat.completion"
    c = r.choices[0]
    assert c.message.role == "assistant" and "Paris" in c.message.content
    assert c.finish_reason in ("stop", "length")
    k = check_usage(r.usage)
    assert k["strategy"] == "prefix" and len(k["first_logits_sha256"]) == 64


def test_chat_streaming_equals_non_streaming(client):
    full = client.chat.completions.create(model="x", messages=Q, max_tokens=24, temperature=0)
    chunks = list(client.chat.completions.create(model="x", messages=Q, max_tokens=24, temperature=0, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == full.choices[0].message.content
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == [full.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    check_usage(chunks[-1].usage)
    # Without include_usage: no usage chunk.
    plain = list(client.chat.completions.create(model="x", messages=Q, max_tokens=4, temperature=0, stream=True))
    assert all(c.usage is None for c in plain)


def test_completions(client):
    r = client.completions.create(model="x", prompt="The capital of France is", max_tokens=8, temperature=0)
    assert r.object == "text_completion" and r.choices[0].text
    assert r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 8
    check_usage(r.usage)
    s = list(client.completions.create(model="x", prompt="The capital of France is", max_tokens=8, temperature=0,
                                       stream=True))
    assert "".join(c.choices[0].text for c in s if c.choices) == r.choices[0].text


def test_stop_string_is_cut(client):
    r = client.chat.completions.create(model="x", messages=Q, max_tokens=24, temperature=0)
    text = r.choices[0].message.content
    word = "France"
    assert word in text
    r2 = client.chat.completions.create(model="x", messages=Q, max_tokens=24, temperature=0, stop=[word])
    assert r2.choices[0].message.content == text[: text.index(word)]
    assert r2.choices[0].finish_reason == "stop"
    s = list(client.chat.completions.create(model="x", messages=Q, max_tokens=24, temperature=0, stop=word,
                                            stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in s if c.choices) == text[: text.index(word)]


def test_seeded_sampling_is_reproducible(client):
    kw = dict(model="x", messages=[{"role": "user", "content": "Tell me a story."}], max_tokens=24,
              temperature=0.9, top_p=0.95, seed=1234)
    a = client.chat.completions.create(**kw).choices[0].message.content
    b = client.chat.completions.create(**kw).choices[0].message.content
    assert a == b


def test_presence_and_frequency_penalties(client):
    """OpenAI's additive penalties: a strong frequency penalty changes a greedy
    answer that repeats itself; the same request gives the same text again;
    out of range is a 400 naming the field."""
    kw = dict(model="x", messages=[{"role": "user", "content": "Count: one one one one one one"}],
              max_tokens=24, temperature=0)
    plain = client.chat.completions.create(**kw).choices[0].message.content
    pen = [client.chat.completions.create(**kw, frequency_penalty=2.0, presence_penalty=1.0).choices[0].message.content
           for _ in range(2)]
    assert pen[0] == pen[1]
    assert pen[0] != plain
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(**kw, frequency_penalty=2.5)
    assert "frequency_penalty" in str(e.value)


def test_prefix_reuse_is_reported(client):
    system = "You are a terse assistant for the city archive of Lyon. " * 12
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Who founded the archive?"}]
    client.chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0)
    msgs[1]["content"] = "When does the archive open?"
    r = client.chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0)
    k = r.usage.model_extra["kvstitch"]
    assert r.usage.prompt_tokens_details.cached_tokens == k["cached_tokens"] > 120


def test_cache_prompt_false_gives_the_same_bits(client):
    msgs = [{"role": "system", "content": "Answer in one word. " * 10}, {"role": "user", "content": "Sky colour?"}]
    warm = client.chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0)
    warm = client.chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0,
                                          extra_body={"return_token_ids": True})
    cold = client.chat.completions.create(model="x", messages=msgs, max_tokens=8, temperature=0,
                                          extra_body={"cache_prompt": False, "return_token_ids": True})
    kw, kc = warm.usage.model_extra["kvstitch"], cold.usage.model_extra["kvstitch"]
    assert kw["cached_tokens"] > 0 and kc["cached_tokens"] == 0
    assert kw["first_logits_sha256"] == kc["first_logits_sha256"]
    assert kw["completion_token_ids"] == kc["completion_token_ids"]


def test_documents_through_extra_body(client):
    docs = [{"id": "a", "text": "The Eiffel Tower was built from 1887 to 1889 for the World's Fair in Paris. " * 3},
            {"id": "b", "text": "The Colosseum in Rome was completed in 80 AD under the emperor Titus. " * 3},
            {"id": "c", "text": "Big Ben is the nickname of the great bell of the clock at Westminster. " * 3}]
    msgs = [{"role": "system", "content": "Answer from the passages."},
            {"role": "user", "content": "When was the Eiffel Tower built?"}]
    r1 = client.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0,
                                        extra_body={"documents": docs,
                                                    "reuse": {"strategy": "cacheblend", "recompute_ratio": 0.1}})
    k1 = r1.usage.model_extra["kvstitch"]
    assert k1["strategy"] == "cacheblend" and k1["docs_computed"] + k1["docs_hit"] == 3
    r2 = client.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0,
                                        extra_body={"documents": docs[::-1]})
    k2 = r2.usage.model_extra["kvstitch"]
    assert k2["docs_hit"] == 3 and k2["moved_tokens"] > 0
    assert k2["strategy"] == "query"  # the library's default repair: the question's top 10%
    assert k2["recomputed_tokens"] == int(0.10 * k2["moved_tokens"] + 0.5) > 0
    assert r2.usage.prompt_tokens == r1.usage.prompt_tokens
    r3 = client.chat.completions.create(model="x", messages=msgs, max_tokens=12, temperature=0,
                                        extra_body={"documents": docs, "reuse": {"strategy": "full"}})
    assert r3.usage.model_extra["kvstitch"]["strategy"] == "full"


def test_documents_cache_prompt_false_is_a_cold_run(server, client):
    # cache_prompt false with documents: no lookup, no store (the documents
    # had been stored and read anyway), and the bits of a full recompute
    docs = [{"id": "p", "text": "The Zephyr line runs from Oakfield to Brambleton every hour. " * 3},
            {"id": "q", "text": "The Aster line stops at the old mill and the harbour. " * 3}]
    msgs = [{"role": "system", "content": "Answer from the passages, briefly."},
            {"role": "user", "content": "Where does the Zephyr line run?"}]
    before = server.get("/v1/cache/stats").json()["inserts"]
    outs = []
    for extra in [{"cache_prompt": False}, {"cache_prompt": False}, {"reuse": {"strategy": "full"}}]:
        r = client.chat.completions.create(model="x", messages=msgs, max_tokens=6, temperature=0,
                                           extra_body=dict(extra, documents=docs))
        k = r.usage.model_extra["kvstitch"]
        outs.append(k["first_logits_sha256"])
        if extra.get("cache_prompt") is False:
            assert k["docs_hit"] == 0 and r.usage.prompt_tokens_details.cached_tokens == 0, k
            assert server.get("/v1/cache/stats").json()["inserts"] == before
    assert outs[0] == outs[1] == outs[2]


def test_documents_baked_by_warm(server, client):
    """/v1/cache/warm with doc_set bakes every document after the others;
    requests then move the baked KV unless reuse.baked is false."""
    docs = ["The Danube flows through ten countries, more than any other river. " * 3,
            "Vienna, Budapest and Belgrade are capitals on the Danube. " * 3,
            "The Black Sea receives the Danube through a delta in Romania. " * 3]
    w = server.post("/v1/cache/warm", {"documents": docs, "doc_set": True})
    assert w.status_code == 200, w.text
    assert w.json()["docs_baked"] == 3
    again = server.post("/v1/cache/warm", {"documents": docs, "bake_with_neighbours": 1})
    assert again.status_code == 200 and again.json()["docs_baked"] == 0  # the first baking is kept
    msgs = [{"role": "user", "content": "Which sea does the Danube reach?"}]
    b = client.chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0,
                                       extra_body={"documents": docs[::-1]})
    kb = b.usage.model_extra["kvstitch"]
    assert kb["docs_hit"] == 3 and kb["docs_baked"] == 3
    p = client.chat.completions.create(model="x", messages=msgs, max_tokens=4, temperature=0,
                                       extra_body={"documents": docs[::-1], "reuse": {"baked": False}})
    kp = p.usage.model_extra["kvstitch"]
    assert kp["docs_hit"] == 3 and kp["docs_baked"] == 0
    assert kb["first_logits_sha256"] != kp["first_logits_sha256"]
    for body, param in [({"documents": docs, "bake_with_neighbours": 0}, "bake_with_neighbours"),
                        ({"documents": docs, "bake_with_neighbours": 1, "doc_set": True}, "doc_set"),
                        ({"documents": docs, "doc_set": "yes"}, "doc_set"),
                        # nothing to warm: it had warmed the template alone / dropped the document
                        ({"documents": []}, "documents"),
                        ({"documents": ["a text", ""]}, "documents[1]"),
                        ({"documents": [{"id": "x", "text": ""}]}, "documents[0]"),
                        # both: the prompt had been dropped without a word
                        ({"prompt": "a", "messages": [{"role": "user", "content": "b"}]}, "prompt")]:
        assert error_of(server.post("/v1/cache/warm", body), 400)["param"] == param


def test_documents_recalibrated(client):
    """reuse.recalibrate (APE): the question's and the output's attention over
    the moved documents; T = S = 1 is the same bits as none."""
    docs = ["Marie Curie won Nobel prizes in physics (1903) and chemistry (1911). " * 3,
            "Warsaw was Marie Curie's birthplace; she later studied in Paris. " * 3]
    msgs = [{"role": "user", "content": "In which city was Marie Curie born?"}]

    def ask(recal):
        reuse = {"strategy": "query"} if recal is None else {"strategy": "query", "recalibrate": recal}
        r = client.chat.completions.create(model="x", messages=msgs, max_tokens=6, temperature=0,
                                           extra_body={"documents": docs[::-1], "reuse": reuse})
        return r.usage.model_extra["kvstitch"]

    off, on, one = ask(None), ask(True), ask({"temperature": 1, "scale": 1})
    assert on["moved_tokens"] > 0 and "recalibrate" not in off
    assert on["recalibrate"] == pytest.approx({"temperature": 0.9, "scale": 0.9})
    assert one["first_logits_sha256"] == off["first_logits_sha256"]
    assert on["first_logits_sha256"] != off["first_logits_sha256"]
    assert ask({"temperature": 0.8})["recalibrate"] == pytest.approx({"temperature": 0.8, "scale": 0.9})


# --- errors --------------------------------------------------------------------------


def error_of(r, status):
    assert r.status_code == status, r.text
    e = r.json()["error"]
    assert set(e) >= {"message", "type", "param", "code"}
    return e


def test_malformed_json_and_wrong_types(server):
    h = dict(server.headers(), **{"Content-Type": "application/json"})
    r = requests.post(server.url + "/v1/chat/completions", data=b"{\"messages\": [", headers=h, timeout=30)
    assert error_of(r, 400)["code"] == "invalid_json"
    for body, param in [({"messages": "hi"}, "messages"),
                        ({"messages": Q, "temperature": "hot"}, "temperature"),
                        ({"messages": Q, "temperature": 3}, "temperature"),
                        ({"messages": Q, "max_tokens": 0}, "max_tokens"),
                        ({"messages": Q, "top_p": 0}, "top_p"),
                        ({"messages": Q, "n": 17}, "n"), ({"messages": Q, "n": 0}, "n"),
                        ({"messages": Q, "stop": ["a", 1]}, "stop[1]"),
                        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
                        ({"messages": [{"content": "x"}]}, "messages[0].role"),
                        # not an object: named as such (it had been "'messages[0].role' must be a string")
                        ({"messages": [Q[0], 1]}, "messages[1]"),
                        ({"messages": Q, "documents": [{"text": 5}]}, "documents[0].text"),
                        ({"messages": Q, "documents": [5]}, "documents[0]"),
                        ({"messages": Q, "documents": ["d", {"id": 7, "text": "e"}]}, "documents[1].id"),
                        ({"messages": Q, "documents": ["d"], "reuse": {"strategy": "magic"}}, "reuse.strategy"),
                        # nested fields are named by their whole path (the leaf alone had been)
                        ({"messages": Q, "documents": ["d"], "reuse": {"baked": 1}}, "reuse.baked"),
                        ({"messages": Q, "documents": ["d"], "reuse": {"overlap": -1}}, "reuse.overlap"),
                        ({"messages": Q, "documents": ["d"], "reuse": {"recompute_ratio": 2}}, "reuse.recompute_ratio"),
                        ({"messages": Q, "documents": ["d"], "reuse": {"recalibrate": "yes"}}, "reuse.recalibrate"),
                        ({"messages": Q, "documents": ["d"], "reuse": {"recalibrate": {"scale": 9}}},
                         "reuse.recalibrate.scale"),
                        ({"messages": Q, "stream": True, "stream_options": {"include_usage": 1}},
                         "stream_options.include_usage"),
                        # only with a stream, as OpenAI answers (it had been ignored)
                        ({"messages": Q, "stream_options": {"include_usage": True}}, "stream_options"),
                        # content only an assistant's turn may lack, as OpenAI (it had run as empty text)
                        ({"messages": [{"role": "user"}]}, "messages[0].content"),
                        ({"messages": [{"role": "system", "content": None}, Q[0]]}, "messages[0].content"),
                        ({"messages": [{"role": "user", "content": []}]}, "messages[0].content"),
                        ({"prompt": 5}, None)]:
        path = "/v1/completions" if "prompt" in body else "/v1/chat/completions"
        e = error_of(server.post(path, body), 400)
        if param:
            assert e["param"] == param and param in e["message"], (body, e)
    # Unknown fields are ignored.
    r = server.post("/v1/chat/completions", {"messages": Q, "max_tokens": 2, "frobnicate": {"x": 1}})
    assert r.status_code == 200
    r = server.post("/v1/chat/completions", {"messages": Q + [{"role": "assistant"}] + Q, "max_tokens": 1})
    assert r.status_code == 200, r.text  # an assistant's turn without content
    # Valid JSON that cJSON will not take, said so: a number past a double's
    # range, and nesting past its 1000 levels (both had read "must be a
    # number" / "not valid JSON")
    for field in ["max_tokens", "temperature"]:
        data = b'{"messages": [{"role": "user", "content": "ab"}], "' + field.encode() + b'": 1e400}'
        e = error_of(requests.post(server.url + "/v1/chat/completions", data=data, headers=h, timeout=30), 400)
        assert e["param"] == field and "out of range" in e["message"], e
    for depth, deep in [(1001, True), (999, False)]:
        data = (b'{"x": ' + b"[" * depth + b"]" * depth + b', "messages": [{"role": "user", "content": "ab"}], '
                b'"max_tokens": 1}')
        r = requests.post(server.url + "/v1/chat/completions", data=data, headers=h, timeout=30)
        if deep:
            e = error_of(r, 400)
            assert e["code"] == "invalid_json" and "deeper than 1000 levels" in e["message"], e
        else:
            assert r.status_code == 200, r.text
    e = error_of(requests.post(server.url + "/v1/completions", data=b'{"prompt": "[[[[", "x": [}', headers=h,
                               timeout=30), 400)
    assert "not valid JSON" in e["message"], e  # brackets inside strings are not nesting


def test_strict_json_nul_and_stop_utf8(server):
    """Bodies the parser had accepted wrongly (an attack on the server)."""
    h = dict(server.headers(), **{"Content-Type": "application/json"})
    def raw(path, data):
        return requests.post(server.url + path, data=data, headers=h, timeout=60)
    # more after the JSON value: refused (cJSON alone took the first object)
    for data in [b'{"prompt": "hi", "max_tokens": 1}garbage', b'{"prompt": "a"}{"prompt": "b"}']:
        assert error_of(raw("/v1/completions", data), 400)["code"] == "invalid_json"
    # U+0000 would end the C string: the tail dropped without a word, a stop
    # string cut to its first letters; refused everywhere (\\u0000 is text)
    for path, data in [("/v1/completions", b'{"prompt": "abc\\u0000def", "max_tokens": 1}'),
                       ("/v1/completions", b'{"prompt": "abc", "max_tokens": 1, "stop": "a\\u0000zzz"}'),
                       ("/tokenize", b'{"content": "abc\\u0000def"}')]:
        assert "NUL" in error_of(raw(path, data), 400)["message"], data
    ok = raw("/tokenize", b'{"content": "a\\\\u0000b"}')  # an escaped backslash: the text \u0000
    assert ok.status_code == 200 and ok.json()["tokens"], ok.text
    # a raw control byte inside a string (RFC 8259: escape it), and a key twice
    # in one object (lookups saw the first, so an invalid second value passed)
    for data in [b'{"prompt": "a\nb", "max_tokens": 1}', b'{"prompt": "a\x01b", "max_tokens": 1}',
                 b'{"prompt": "ab",\x01 "max_tokens": 1}']:
        e = error_of(raw("/v1/completions", data), 400)
        assert e["code"] == "invalid_json" and "control byte" in e["message"], (data, e)
    assert raw("/v1/completions", b'{"prompt": "a\\nb",\n "max_tokens": 1}').status_code == 200  # escaped, and between tokens
    for path, data in [("/v1/completions", b'{"prompt": "a", "max_tokens": 1, "max_tokens": "lots"}'),
                       ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "a", "role": 5}]}'),
                       ("/tokenize", b'{"content": "a", "content": "b"}')]:
        e = error_of(raw(path, data), 400)
        assert e["code"] == "invalid_json" and "twice" in e["message"], (data, e)
    many = "{" + ",".join('"k%d": %d' % (i, i) for i in range(5000)) + ', "prompt": "a", "max_tokens": 1}'
    assert raw("/v1/completions", many.encode()).status_code == 200  # 5,000 distinct keys: sorted, not compared pairwise
    # a stop string with a lone byte: refused as the messages are (it had cut
    # a character of the output in half: invalid UTF-8 in the reply)
    e = error_of(raw("/v1/completions", b'{"prompt": "caf\xc3\xa9", "max_tokens": 4, "stop": "\xa9"}'), 400)
    assert e["code"] == "invalid_utf8" and e["param"] == "stop"
    # invalid UTF-8 is refused naming the field that holds it (the rendered
    # prompt's tokenizer had named none; a document's error said 'documents')
    for path, data, param in [
            ("/v1/completions", b'{"prompt": "a", "max_tokens": 1, "stop": ["", "ok", "\xa9"]}', "stop[2]"),
            ("/v1/completions", b'{"prompt": "caf\xa9", "max_tokens": 1}', "prompt"),
            ("/v1/completions", b'{"prompt": ["ok", "caf\xa9"], "max_tokens": 1}', "prompt[1]"),  # had said 'prompt'
            ("/v1/chat/completions", b'{"messages": [{"role": "system", "content": "s"}, '
                                     b'{"role": "user", "content": "\xff"}], "max_tokens": 1}', "messages[1].content"),
            ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "q"}], "max_tokens": 1, '
                                     b'"documents": ["fine", {"id": "b", "text": "x\xc3"}]}', "documents[1].text"),
            ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "q"}], "max_tokens": 1, '
                                     b'"documents": [{"id": "\xff", "text": "x"}]}', "documents[0].id"),
            ("/tokenize", b'{"content": "caf\xa9"}', "content")]:
        e = error_of(raw(path, data), 400)
        assert e["code"] == "invalid_utf8" and e["param"] == param and param in e["message"], (data, e)
    # a null max_completion_tokens leaves max_tokens in force (it had hidden it)
    r = server.post("/v1/completions", {"prompt": "Once upon a time", "max_tokens": 3, "max_completion_tokens": None,
                                        "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] <= 3, r.text


def test_context_length_exceeded(server, client):
    with pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(model="x", messages=[{"role": "user", "content": "word " * 3000}], max_tokens=4)
    assert ei.value.code == "context_length_exceeded"
    # /v1/cache/warm with documents alone: each document must fit, not all
    # together (they had been refused together, though each is computed on
    # its own); one that does not is named, as 'documents' (the error had
    # named 'messages', a field the request does not have)
    r = server.post("/v1/cache/warm", {"documents": ["word " * 1200, "other word " * 600]})
    assert r.status_code == 200 and r.json()["docs_computed"] + r.json()["docs_cached"] == 2, r.text
    e = error_of(server.post("/v1/cache/warm", {"documents": ["short one", "word " * 3000]}), 400)
    assert e["code"] == "context_length_exceeded" and e["param"] == "documents[1]", e
    assert "doc 1 has 3001 tokens" in e["message"] and "messages" not in e["message"], e
    # named by its index and its id (the error had said 'documents' alone)
    e = error_of(server.post("/v1/cache/warm", {"documents": [{"id": "a", "text": "short one"},
                                                              {"id": "big-one", "text": "word " * 3000},
                                                              {"id": "c", "text": "word " * 3000}]}), 400)
    assert e["param"] == "documents[1]" and 'documents[1] (id "big-one")' in e["message"], e
    e = error_of(server.post("/v1/cache/warm", {"documents": ["short one", "word " * 3000],
                                                "bake_with_neighbours": 1}), 400)
    assert e["param"] == "documents[1]", e
    # with messages beside them, the prompt is still named as before
    e = error_of(server.post("/v1/cache/warm", {"messages": [{"role": "user", "content": "word " * 3000}]}), 400)
    assert e["code"] == "context_length_exceeded" and e["param"] == "messages", e
    # a short message whose documents overflow: the documents are named (it had said 'messages')
    e = error_of(server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "why?"}],
                                                      "documents": ["word " * 700] * 3, "max_tokens": 2}), 400)
    assert e["code"] == "context_length_exceeded" and e["param"] == "documents", e
    assert "with its 3 documents" in e["message"], e
    # a message that overflows without its short documents is named (it had
    # been 'documents' whenever the request had any), with its own count
    e = error_of(server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "word " * 3000}],
                                                      "documents": ["a short one"], "max_tokens": 2}), 400)
    assert e["code"] == "context_length_exceeded" and e["param"] == "messages", e
    assert "without its 1 document has" in e["message"], e
    e = error_of(server.post("/v1/completions", {"prompt": "word " * 3000, "documents": ["a short one"],
                                                 "max_tokens": 2}), 400)
    assert e["code"] == "context_length_exceeded" and e["param"] == "prompt", e


def test_json_mode_and_tools_are_refused_not_ignored(server, client):
    # A client asking for JSON mode had got free text, one offering tools a
    # reply that never calls them, without a word (the openai client's own
    # shapes); a text format and an empty tool list ask for nothing.
    q = [{"role": "user", "content": "x"}]
    for kw, param in [({"response_format": {"type": "json_object"}}, "response_format"),
                      ({"response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}},
                       "response_format"),
                      ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]}, "tools"),
                      ({"functions": [{"name": "f", "parameters": {}}]}, "functions")]:
        with pytest.raises(openai.BadRequestError) as ei:
            client.chat.completions.create(model="x", messages=q, max_tokens=1, **kw)
        assert ei.value.param == param, (kw, ei.value)
    assert error_of(server.post("/v1/completions", {"prompt": "x", "max_tokens": 1,
                                                    "response_format": "json"}), 400)["param"] == "response_format"
    r = client.chat.completions.create(model="x", messages=q, max_tokens=1, response_format={"type": "text"}, tools=[])
    assert r.choices[0].finish_reason in ("stop", "length")


def test_seeds_past_a_doubles_integers_are_refused(server):
    # cJSON reads a double: 2^53 + 1 had sampled as 2^53 without a word
    q = [{"role": "user", "content": "x"}]
    for seed in (2 ** 53, 2 ** 53 + 1, -(2 ** 53), 2 ** 63 - 1):
        assert error_of(server.post("/v1/chat/completions", {"messages": q, "max_tokens": 1, "seed": seed}),
                        400)["param"] == "seed", seed
    for seed in (2 ** 53 - 1, -(2 ** 53 - 1)):
        r = server.post("/v1/chat/completions", {"messages": q, "max_tokens": 1, "seed": seed})
        assert r.status_code == 200, r.text


def test_bake_options_belong_to_a_warm_with_documents(server):
    # They had been ignored without a word by a generating request, and by a
    # warm without documents.
    q = [{"role": "user", "content": "x"}]
    for extra, param in [({"doc_set": True}, "doc_set"), ({"bake_with_neighbours": 3}, "bake_with_neighbours")]:
        e = error_of(server.post("/v1/chat/completions", dict({"messages": q, "max_tokens": 2}, **extra)), 400)
        assert e["param"] == param and "warm" in e["message"], e
        e = error_of(server.post("/v1/chat/completions", dict({"messages": q, "max_tokens": 2, "documents": ["d"]},
                                                              **extra)), 400)
        assert e["param"] == param, e
        e = error_of(server.post("/v1/completions", dict({"prompt": "x", "max_tokens": 2}, **extra)), 400)
        assert e["param"] == param, e
        e = error_of(server.post("/v1/cache/warm", dict({"prompt": "hello"}, **extra)), 400)
        assert e["param"] == param and "documents" in e["message"], e
    r = server.post("/v1/cache/warm", {"documents": ["bake a %s" % uuid.uuid4().hex, "and b"], "doc_set": True})
    assert r.status_code == 200 and r.json()["docs_baked"] == 2, r.text


def test_body_too_large(server):
    r = server.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x" * 300000}]})
    assert error_of(r, 413)["code"] == "request_too_large"


def test_a_warm_may_fill_the_context(server):
    # A warm generates nothing: a prompt of exactly the context's tokens is
    # warmed (it had been refused: "at least one token must be generated");
    # one more is not, and a completion of the same prompt still is.
    n_ctx = 2048
    def n_tokens(text):
        r = server.post("/tokenize", {"content": text})
        assert r.status_code == 200, r.text
        return len(r.json()["tokens"])
    text = "a" + " b" * (n_ctx - 1)
    while n_tokens(text) > n_ctx:
        text = text[:-2]
    while n_tokens(text) < n_ctx:
        text += " b"
    assert n_tokens(text) == n_ctx
    r = server.post("/v1/cache/warm", {"prompt": text})
    assert r.status_code == 200 and r.json()["tokens"] == n_ctx, r.text
    e = error_of(server.post("/v1/cache/warm", {"prompt": text + " b"}), 400)
    assert e["code"] == "context_length_exceeded" and "must be generated" not in e["message"], e
    e = error_of(server.post("/v1/completions", {"prompt": text, "max_tokens": 1}), 400)
    assert e["code"] == "context_length_exceeded" and "must be generated" in e["message"], e
    # a prompt 8 tokens short of the context generates 9 (the last one sampled
    # is never decoded), as kvs_generate and `kvstitch generate` do; it had
    # stopped at 8.
    short = " ".join(text.split(" ")[:-8])
    assert n_tokens(short) == n_ctx - 8
    r = server.post("/v1/completions", {"prompt": short, "max_tokens": 50, "temperature": 0, "ignore_eos": True})
    assert r.status_code == 200, r.text
    assert r.json()["usage"]["completion_tokens"] == 9 and r.json()["choices"][0]["finish_reason"] == "length", r.text


def test_completions_fields_not_implemented_are_refused(server):
    # best_of / suffix had been ignored without a word; echo is implemented
    # (test_echo_*), but not with documents, and max_tokens 0 only with it
    for body, param in [({"best_of": 2}, "best_of"), ({"suffix": "end"}, "suffix"), ({"echo": "yes"}, "echo"),
                        ({"echo": True, "documents": ["a doc"]}, "echo"), ({"max_tokens": 0}, "max_tokens"),
                        ({"max_completion_tokens": 0}, "max_completion_tokens")]:
        r = server.post("/v1/completions", dict({"prompt": "Hi", "max_tokens": 1}, **body))
        assert error_of(r, 400)["param"] == param, (body, r.text)
    for body in ({"echo": False}, {"best_of": 1}, {"suffix": ""}, {"suffix": None}):
        r = server.post("/v1/completions", dict({"prompt": "Hi", "max_tokens": 1}, **body))
        assert r.status_code == 200, (body, r.text)


def test_api_key(server):
    r = requests.post(server.url + "/v1/chat/completions", json={"messages": Q}, timeout=30)
    assert error_of(r, 401)["type"] == "authentication_error"
    r = requests.post(server.url + "/v1/chat/completions", json={"messages": Q},
                      headers={"Authorization": "Bearer wrong"}, timeout=30)
    error_of(r, 401)
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model="x", messages=Q, max_tokens=2)
    # the scheme in any case, spaces around the key (RFC 9110): accepted; a
    # key that only starts or ends like it, or no space after the scheme: not
    for h, ok in [("bearer " + server.key, True), ("BEARER  " + server.key + " ", True),
                  ("Bearer\t" + server.key, True), ("Bearer" + server.key, False),
                  ("Bearer " + server.key + "x", False), ("Bearer " + server.key[:-1], False),
                  ("Basic " + server.key, False)]:
        r = requests.get(server.url + "/v1/models", headers={"Authorization": h}, timeout=30)
        assert (r.status_code == 200) == ok, (h, r.status_code)


def test_prompt_sources_texts_are_the_prompt_in_valid_utf8(server):
    # Each run's text had been its tokens' bytes in 16 bytes a token: a
    # longer token ("-" x 64 is 2 tokens) was dropped; and a character whose
    # bytes span a cached and a computed token was cut in two invalid halves.
    def runs(prompt, **kw):
        r = server.post("/v1/completions", dict({"prompt": prompt, "max_tokens": 1,
                                                 "return_prompt_sources": True}, **kw))
        assert r.status_code == 200, r.text
        return json.loads(r.content.decode("utf-8"))["usage"]["kvstitch"]["prompt_sources"]  # strict UTF-8
    prompt = "-" * 64 + "x"
    assert "".join(x["text"] for x in runs(prompt, cache_prompt=False)) == prompt
    runs("The quick brown fox says \U0001F700")  # cached, its last character's bytes across two tokens
    split = runs("The quick brown fox says \U0001F701")
    assert [x["source"] for x in split] == ["cached", "computed"], split
    assert "".join(x["text"] for x in split) == "The quick brown fox says \U0001F701"


def test_a_first_document_the_request_computed_is_not_cached_tokens(server):
    # The first document of a completion sits right after its own prefix:
    # the warmer computes it and the assembly serves it as the exact prefix.
    # It had been reported as cached_tokens (and the page's "cached" run) by
    # the request that computed it, on an empty cache.
    tag = uuid.uuid4().hex
    body = {"prompt": "Question: what is it?", "max_tokens": 2, "temperature": 0, "return_prompt_sources": True,
            "documents": ["Zebra facts %s: zebras have stripes that are unique like fingerprints." % tag,
                          "Lion facts %s: lions live in prides." % tag]}
    ks = []
    for _ in range(2):
        r = server.post("/v1/completions", body)
        assert r.status_code == 200, r.text
        ks.append(r.json()["usage"]["kvstitch"])
    first, again = ks
    assert first["docs_computed"] == 2 and first["docs_hit"] == 0, first
    assert first["cached_tokens"] <= 2, first  # at most the template's opening, stored before
    assert sum(x["tokens"] for x in first["prompt_sources"] if x["source"] == "cached") == first["cached_tokens"], first
    assert again["docs_hit"] == 2 and again["cached_tokens"] >= first["cached_tokens"] + 10, again


def test_errors_quoting_the_client_are_valid_utf8(server):
    # Messages quote the client's bytes: a raw 0xff in the path, a key cut by
    # "%.40s" in the middle of "é". The reply's JSON must stay UTF-8.
    r = requests.get(server.url + "/%ff%fe", headers=server.headers(), timeout=60)
    assert r.status_code == 404 and "\ufffd" in json.loads(r.content.decode("utf-8"))["error"]["message"]
    r = server.post("/v1/chat/completions", {"messages": Q, "logit_bias": {"a" * 39 + "\u00e9": 1}})
    assert r.status_code == 400 and json.loads(r.content.decode("utf-8"))["error"]["param"] == "logit_bias"
    r = server.post("/v1/chat/completions", {"messages": Q, "top_p": 1e-46})  # 0 as a float: had been a 500
    assert error_of(r, 400)["param"] == "top_p"


def test_unknown_endpoint_and_method(server):
    assert error_of(server.get("/v1/nothing"), 404)["code"] == "not_found"
    assert error_of(server.get("/v1/chat/completions"), 405)["code"] == "method_not_allowed"


def test_tokenize_detokenize(server):
    r = server.post("/tokenize", {"content": "Hello, world"})
    toks = r.json()["tokens"]
    assert r.status_code == 200 and len(toks) >= 3
    d = server.post("/detokenize", {"tokens": toks})
    assert d.json()["content"] == "Hello, world"
    error_of(server.post("/detokenize", {"tokens": [-1]}), 400)
    # the bad id is named by its index and value (it had been a generic
    # "expected {tokens: [ids within the vocabulary]}")
    for tokens, param, says in [([1, 49152], "tokens[1]", "49152"), ([0, 2, "x"], "tokens[2]", "must be a token id"),
                                ([1.5], "tokens[0]", "1.5")]:
        e = error_of(server.post("/detokenize", {"tokens": tokens}), 400)
        assert e["param"] == param and says in e["message"], (tokens, e)
    error_of(server.post("/tokenize", {"content": 7}), 400)
    # the wrong field is the one named (a non-bool add_special had been named
    # 'content'); null is absent, as in every request
    for field in ("add_special", "parse_special"):
        r = server.post("/tokenize", {"content": "Hi", field: "yes"})
        assert r.status_code == 400 and r.json()["error"]["param"] == field, r.text
        assert server.post("/tokenize", {"content": "Hi", field: None}).status_code == 200
    # A character split over byte tokens is joined again; a byte token alone
    # is no character and comes out as U+FFFD (its raw byte had made the
    # reply's JSON invalid UTF-8: 114 of SmolLM2's first 400 ids).
    text = "caf\u00e9 \U0001f999 \u4e2d\u6587"
    toks = server.post("/tokenize", {"content": text}).json()["tokens"]
    assert server.post("/detokenize", {"tokens": toks}).json()["content"] == text
    for t in range(400):
        r = server.post("/detokenize", {"tokens": [t]})
        assert r.status_code == 200, (t, r.text)
        r.content.decode("utf-8")  # raises on invalid UTF-8


def test_nul_byte_token_comes_out_as_replacement_character(server):
    # SmolLM2's token 190 is the byte 0x00. Replies are built from C strings,
    # where it had cut everything after it (chat content "", text "" beside
    # text_offset [0, 1, 2], "Hello\0 world" detokenized as "Hello"): it
    # comes out as U+FFFD, the mark of bytes a text cannot carry, and the
    # rest of the text stays.
    nul = 190
    force = {"logit_bias": {str(nul): 100}, "max_tokens": 3, "temperature": 0}
    r = server.post("/v1/chat/completions", dict(force, messages=Q, logprobs=True)).json()
    lp = r["choices"][0]["logprobs"]["content"]
    assert [e["bytes"] for e in lp] == [[0]] * 3, lp  # the token is the NUL byte
    assert [e["token"] for e in lp] == ["bytes:\\x00"] * 3
    assert r["choices"][0]["message"]["content"] == "\ufffd" * 3
    r = server.post("/v1/completions", dict(force, prompt="Hello", logprobs=1)).json()
    c = r["choices"][0]
    assert c["text"] == "\ufffd" * 3 and c["logprobs"]["text_offset"] == [0, 1, 2], c
    assert c["logprobs"]["tokens"] == ["bytes:\\x00"] * 3
    with requests.post(server.url + "/v1/completions", json=dict(force, prompt="Hello", stream=True),
                       headers=server.headers(), timeout=60, stream=True) as s:
        datas = [json.loads(l[6:].decode()) for l in s.iter_lines() if l.startswith(b"data: {")]
    assert "".join(d["choices"][0]["text"] for d in datas if d["choices"]) == "\ufffd" * 3
    hello = server.post("/tokenize", {"content": "Hello"}).json()["tokens"]
    world = server.post("/tokenize", {"content": " world"}).json()["tokens"]
    d = server.post("/detokenize", {"tokens": hello + [nul] + world})
    assert d.status_code == 200 and d.json()["content"] == "Hello\ufffd world", d.text


def test_detokenize_reply_bounded_by_max_body(server):
    # A token's text can be ~14x its id in the request ("\n" and 80 spaces
    # for "46778,"): 8 MB of ids had made a 114 MB reply and ~210 MB of
    # memory. The text is bounded by --max-body (262144 here) like a body.
    ids = server.post("/tokenize", {"content": "\n" + " " * 80}).json()["tokens"]
    reps = 262144 // 81 + 16
    assert len(json.dumps({"tokens": ids * reps})) < 262144
    e = error_of(server.post("/detokenize", {"tokens": ids * reps}), 400)
    assert e["code"] == "reply_too_large" and e["param"] == "tokens" and "262144" in e["message"], e
    ok = server.post("/detokenize", {"tokens": ids * 100})
    assert ok.status_code == 200 and ok.json()["content"] == ("\n" + " " * 80) * 100


def test_cache_warm_and_stats(server, client):
    system = "You are the help desk of the Zephyr rail company. Be short. " * 8
    msgs = [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}]
    w = server.post("/v1/cache/warm", {"messages": msgs})
    assert w.status_code == 200, w.text
    assert w.json()["tokens"] > 100
    r = client.chat.completions.create(model="x", messages=msgs, max_tokens=2, temperature=0)
    assert r.usage.prompt_tokens_details.cached_tokens == r.usage.prompt_tokens - 1
    st = server.get("/v1/cache/stats").json()
    assert st["entries"] > 0 and st["hits"] > 0 and len(st["fingerprint"]) == 64
    dw = server.post("/v1/cache/warm", {"documents": ["A passage about trains. " * 5]})
    assert dw.status_code == 200 and dw.json()["docs_computed"] + dw.json()["docs_cached"] == 1
    # null is absent, as in every request (these had been 400s asking for messages / a prompt)
    for absent in ({"messages": None}, {"prompt": None}, {"messages": None, "prompt": None}):
        dn = server.post("/v1/cache/warm", {"documents": ["A passage about trains. " * 5], **absent})
        assert dn.status_code == 200 and dn.json()["docs_cached"] == 1, (absent, dn.text)
    # nothing to warm: said so (it had said "'prompt' is required")
    de = server.post("/v1/cache/warm", {})
    assert de.status_code == 400 and "'documents'" in de.json()["error"]["message"], de.text
    # a warm that would store nothing is refused, with a prompt as with documents
    # (the prompt had been computed and dropped, the documents stored anyway)
    for body in ({"prompt": "Some text to keep. " * 10}, {"documents": ["Another passage. " * 5]}):
        dc = server.post("/v1/cache/warm", {**body, "cache_prompt": False})
        assert dc.status_code == 400 and dc.json()["error"]["param"] == "cache_prompt", dc.text


def test_metrics(server, client):
    client.chat.completions.create(model="x", messages=Q, max_tokens=2, temperature=0)
    text = requests.get(server.url + "/metrics", timeout=30).text
    for name in ("kvstitch_requests_total{status=\"200\"}", "kvstitch_prompt_tokens_total{source=\"cached\"}",
                 "kvstitch_prompt_tokens_total{source=\"computed\"}", "kvstitch_ttft_seconds_bucket",
                 "kvstitch_request_duration_seconds_count", "kvstitch_decode_tokens_total", "kvstitch_queue_depth",
                 "kvstitch_active_slots", "kvstitch_cache_bytes{tier=\"ram\"}", "kvstitch_cache_evictions_total",
                 "kvstitch_cache_hits_total"):
        assert name in text, name
    ok = [l for l in text.splitlines() if l.startswith("kvstitch_requests_total{status=\"200\"}")]
    assert int(ok[0].split()[-1]) > 0


def entry_bytes(e):
    return bytes(e.bytes)


def test_chat_logprobs(client):
    """logprobs / top_logprobs: one entry per generated token whose bytes make
    up the content, the greedy token first among its alternatives, the same
    values streamed and not, and only the tokens before a stop string."""
    kw = dict(model="x", messages=Q, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3)
    r = client.chat.completions.create(**kw)
    c = r.choices[0]
    content = c.logprobs.content
    # every token but the end-of-generation one
    assert len(content) == r.usage.completion_tokens - (c.finish_reason == "stop")
    assert b"".join(entry_bytes(e) for e in content).decode() == c.message.content
    for e in content:
        assert e.logprob <= 0 and len(e.top_logprobs) == 3
        assert e.top_logprobs[0].token == e.token and e.top_logprobs[0].logprob == e.logprob
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob >= e.top_logprobs[2].logprob
        assert sum(2.718281828459045 ** t.logprob for t in e.top_logprobs) <= 1.0 + 1e-6
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [(e.token, e.logprob, [t.logprob for t in e.top_logprobs]) for e in streamed] == \
        [(e.token, e.logprob, [t.logprob for t in e.top_logprobs]) for e in content]
    # Two stop strings: "France" is held back as the start of the first,
    # then " is" completes the second, which starts inside " France": the
    # text goes out up to "Fran", with the tokens that start in it only.
    assert "France is" in c.message.content and "France was" not in c.message.content
    cut = client.chat.completions.create(stop=["France was", "ce is"], **kw).choices[0]
    assert cut.message.content.endswith("Fran")
    kept, starts = b"", []
    for e in cut.logprobs.content:
        starts.append(len(kept))
        kept += entry_bytes(e)
    text = cut.message.content.encode()
    assert kept.startswith(text) and starts and max(starts) < len(text), (starts, text)
    # A stop string at the first character: no text, an empty list, streamed
    # too (the stream had sent no logprobs object at all).
    first = dict(kw, stop=[c.message.content[:1]])
    none = client.chat.completions.create(**first).choices[0]
    assert none.message.content == "" and none.logprobs.content == [], none
    objs = [ch.choices[0].logprobs for ch in client.chat.completions.create(stream=True, **first)
            if ch.choices and ch.choices[0].logprobs is not None]
    assert len(objs) == 1 and objs[0].content == [], objs
    # Without logprobs: null, as before.
    assert client.chat.completions.create(model="x", messages=Q, max_tokens=2).choices[0].logprobs is None
    # Tokens with no text (a control token forced by logit_bias) have their
    # entries too, streamed and not (they had none: 3 tokens, 0 entries)
    kw = dict(model="x", messages=Q, max_tokens=3, temperature=0, logprobs=True, logit_bias={"1": 100})
    r = client.chat.completions.create(**kw)
    assert r.usage.completion_tokens == 3 and r.choices[0].finish_reason == "length", r
    assert [e.logprob <= 0 for e in r.choices[0].logprobs.content] == [True] * 3, r.choices[0].logprobs
    chunks = list(client.chat.completions.create(stream=True, **kw))
    streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs for e in ch.choices[0].logprobs.content]
    assert [e.logprob for e in streamed] == [e.logprob for e in r.choices[0].logprobs.content]


def test_completions_logprobs_match_the_library(server, client):
    """Completions' legacy logprobs N: tokens that make up the text, character
    offsets, and at the first position the same values as the CLI's
    first_top_logprobs (the library's kvs_generate on the same prompt)."""
    import subprocess
    from conftest import CLI, MODEL
    prompt = "The capital of France is"
    r = client.completions.create(model="x", prompt=prompt, max_tokens=6, temperature=0, logprobs=5)
    lp = r.choices[0].logprobs
    assert "".join(lp.tokens) == r.choices[0].text and len(lp.tokens) == 6
    offs, at = [], 0
    for t in lp.tokens:
        offs.append(at)
        at += len(t)
    assert lp.text_offset == offs
    assert all(len(d) <= 5 and max(d.values()) == v for d, v in zip(lp.top_logprobs, lp.token_logprobs))
    out = subprocess.run([CLI, "generate", "-m", MODEL, "-p", prompt, "-n", "1", "--json", "-q", "--threads", "1"],
                         capture_output=True, text=True, timeout=120, check=True)
    ref = json.loads(out.stdout)["first_top_logprobs"][:5]
    got = sorted(lp.top_logprobs[0].values(), reverse=True)
    assert got == [v for _, v in ref]
    s = list(client.completions.create(model="x", prompt=prompt, max_tokens=6, temperature=0, logprobs=5, stream=True))
    streamed = [(t, v, o) for ch in s if ch.choices and ch.choices[0].logprobs
                for t, v, o in zip(ch.choices[0].logprobs.tokens, ch.choices[0].logprobs.token_logprobs,
                                   ch.choices[0].logprobs.text_offset)]
    assert streamed == list(zip(lp.tokens, lp.token_logprobs, lp.text_offset))
    # The sampled token is always among top_logprobs ("up to logprobs + 1
    # elements", as OpenAI's legacy API and vLLM): sampled hot, outside the
    # top 1, and with logprobs 0 ({} before)
    for n_top in (0, 1):
        hot = client.completions.create(model="x", prompt=prompt, max_tokens=12, temperature=1.8, seed=3,
                                        logprobs=n_top).choices[0].logprobs
        assert all(d.get(t) == v for t, v, d in zip(hot.tokens, hot.token_logprobs, hot.top_logprobs)), hot
        assert all(len(d) <= n_top + 1 for d in hot.top_logprobs), hot
        if n_top:
            assert any(len(d) == 2 for d in hot.top_logprobs), hot  # one sampled outside the best
    # Stopped before any text: the stream's finish chunk carries the empty lists
    s = list(client.completions.create(model="x", prompt=prompt, max_tokens=6, temperature=0, logprobs=5, stream=True,
                                       stop=[r.choices[0].text[:1]]))
    objs = [ch.choices[0].logprobs for ch in s if ch.choices and ch.choices[0].logprobs is not None]
    assert len(objs) == 1 and objs[0].tokens == [] and objs[0].text_offset == [], objs


def test_logprobs_refusals(server):
    for body, param in [({"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
                        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                        ({"logprobs": 1}, "logprobs")]:
        body.update(model="x", messages=Q, max_tokens=1)
        r = server.post("/v1/chat/completions", body)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, (body, r.text)
    r = server.post("/v1/completions", {"model": "x", "prompt": "a", "max_tokens": 1, "logprobs": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "logprobs"


def token_id(server, text):
    ids = server.post("/tokenize", {"content": text}).json()["tokens"]
    assert len(ids) == 1, (text, ids)
    return ids[0]


def test_logit_bias(server, client):
    """logit_bias: -100 bans a token (greedy picks another), +100 forces one
    at every step; logprobs stay those of the model's own logits; bad keys,
    values and ids are a 400 naming logit_bias."""
    paris = token_id(server, " Paris")
    kw = dict(model="x", messages=Q, max_tokens=12, temperature=0, extra_body={"return_token_ids": True})
    plain = client.chat.completions.create(**kw)
    assert paris in plain.usage.model_extra["kvstitch"]["completion_token_ids"]
    banned = client.chat.completions.create(logit_bias={str(paris): -100}, **kw)
    assert paris not in banned.usage.model_extra["kvstitch"]["completion_token_ids"]
    assert "Paris" not in banned.choices[0].message.content
    forced = client.chat.completions.create(logit_bias={str(paris): 100}, logprobs=True, top_logprobs=1,
                                            **dict(kw, max_tokens=3))
    assert forced.usage.model_extra["kvstitch"]["completion_token_ids"] == [paris] * 3
    first = forced.choices[0].logprobs.content[0]
    assert first.token == " Paris" and first.top_logprobs[0].token == "The"  # the model's own best
    assert first.logprob < first.top_logprobs[0].logprob
    n_vocab = 49152
    for bias, needle in [({"abc": 1}, "not a token id"), ({"01": 1}, "not a token id"), ({"-1": 1}, "not a token id"),
                         ({"5": 101}, "[-100, 100]"), ({"5": "x"}, "[-100, 100]"), ([1], "object"),
                         ({str(n_vocab): 1}, "vocabulary has 49152"),
                         ({str(i): 1 for i in range(301)}, "at most 300")]:
        r = server.post("/v1/chat/completions", {"messages": Q, "max_tokens": 1, "logit_bias": bias})
        err = r.json()["error"]
        assert r.status_code == 400 and err["param"] == "logit_bias" and needle in err["message"], (bias, r.text)


def test_n_choices(server, client):
    """n: one choice per index, choice i the same request alone with seed +
    i (a prompt of a chunk or more is computed once: in-flight sharing);
    streamed chunks name their choice and give the same texts; usage counts
    every choice's tokens."""
    kw = dict(model="x", messages=[{"role": "user", "content": "Tell me a story about %d dragons." % time.time_ns()}],
              max_tokens=10, temperature=0.9, seed=40, extra_body={"return_token_ids": True})
    r = client.chat.completions.create(n=3, logprobs=True, **kw)
    assert [c.index for c in r.choices] == [0, 1, 2]
    for i, c in enumerate(r.choices):
        alone = client.chat.completions.create(**dict(kw, seed=40 + i))
        assert c.message.content == alone.choices[0].message.content and c.finish_reason == alone.choices[0].finish_reason
        assert len(c.logprobs.content) >= 1
    assert len({c.message.content for c in r.choices}) > 1  # other seeds, other stories
    alones = [client.chat.completions.create(**dict(kw, seed=40 + i)).usage for i in range(3)]
    assert r.usage.completion_tokens == sum(u.completion_tokens for u in alones)
    # kvstitch.choices: each choice's own tokens (the rest of kvstitch is the first choice's)
    per = r.usage.model_extra["kvstitch"]["choices"]
    assert [c["index"] for c in per] == [0, 1, 2]
    for c, u in zip(per, alones):
        assert c["completion_token_ids"] == u.model_extra["kvstitch"]["completion_token_ids"]
        assert c["completion_tokens"] == u.completion_tokens and c["decode_ms"] >= 0 and c["total_ms"] >= c["decode_ms"]
    assert r.usage.model_extra["kvstitch"]["completion_token_ids"] == per[0]["completion_token_ids"]
    assert "choices" not in alones[0].model_extra["kvstitch"]  # n = 1: no per-choice list
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    chunks = list(client.chat.completions.create(n=3, stream=True, stream_options={"include_usage": True}, **kw))
    texts, finishes = ["", "", ""], [None, None, None]
    for ch in chunks:
        for c in ch.choices:
            texts[c.index] += c.delta.content or ""
            finishes[c.index] = c.finish_reason or finishes[c.index]
    assert texts == [c.message.content for c in r.choices]
    assert finishes == [c.finish_reason for c in r.choices]
    assert chunks[-1].usage.completion_tokens == r.usage.completion_tokens
    s = list(client.completions.create(model="x", prompt="Once upon a time", max_tokens=6, temperature=0.9, seed=3,
                                       n=2, stream=True))
    got = ["", ""]
    for ch in s:
        for c in ch.choices:
            got[c.index] += c.text
    full = client.completions.create(model="x", prompt="Once upon a time", max_tokens=6, temperature=0.9, seed=3, n=2)
    assert got == [c.text for c in full.choices]


def test_echo_scores_the_prompt_with_the_bits_of_generation(server, client):
    """Completions' echo (what evaluation harnesses score prompts with:
    echo, logprobs, max_tokens 0): the text begins with the prompt; with
    logprobs every prompt token has its log-probability given the tokens
    before it (the first none: null), from a prefill that computes every
    position's logits. Those of tokens a generation produced equal the
    generation's own, bit for bit (batch-invariant kernels), a cached prefix
    or not; streamed, the same entries and text."""
    p = "The capital of France is"
    gen = client.completions.create(model="x", prompt=p, max_tokens=3, temperature=0, logprobs=2).choices[0]
    plain = server.post("/v1/completions", {"prompt": p, "max_tokens": 3, "temperature": 0, "echo": True}).json()
    assert plain["choices"][0]["text"] == p + gen.text and plain["choices"][0]["logprobs"] is None
    for attempt in range(2):  # the second: the whole prompt is cached, and must not be used for logits
        r = client.completions.create(model="x", prompt=p + gen.text, max_tokens=0, echo=True, logprobs=2)
        c = r.choices[0]
        assert c.text == p + gen.text and c.finish_reason == "length" and r.usage.completion_tokens == 0
        lp = c.logprobs
        n = len(lp.tokens)
        assert n == r.usage.prompt_tokens and lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
        assert all(isinstance(x, float) and x <= 0 for x in lp.token_logprobs[1:])
        assert lp.tokens[-3:] == gen.logprobs.tokens
        assert lp.token_logprobs[-3:] == gen.logprobs.token_logprobs  # exact
        assert lp.top_logprobs[-3:] == gen.logprobs.top_logprobs
        for tok, off in zip(lp.tokens, lp.text_offset):
            assert c.text[off:off + len(tok)] == tok, (tok, off)
    # with a completion after it: the prompt's entries, then the completion's, offsets past the prompt
    both = server.post("/v1/completions", {"prompt": p, "max_tokens": 3, "temperature": 0, "echo": True,
                                           "logprobs": 2, "n": 2}).json()
    for ch in both["choices"]:
        assert ch["text"] == p + gen.text
        assert ch["logprobs"]["tokens"][-3:] == gen.logprobs.tokens
        assert ch["logprobs"]["token_logprobs"][-3:] == gen.logprobs.token_logprobs
        assert ch["logprobs"]["text_offset"][-3:] == [len(p) + o for o in gen.logprobs.text_offset]
    # control-token text in the prompt is echoed as sent; offsets count it
    # (it had been given no text: every offset after one fell short)
    ctl = "<|im_start|>user\nhi<|im_end|>\n"
    c = server.post("/v1/completions", {"prompt": ctl, "max_tokens": 0, "echo": True,
                                        "logprobs": 0}).json()["choices"][0]
    assert c["text"] == ctl and len(c["logprobs"]["tokens"]) == 6
    for tok, off in zip(c["logprobs"]["tokens"], c["logprobs"]["text_offset"]):
        assert c["text"][off:off + len(tok)] == tok, (tok, off, c["logprobs"])
    whole = both["choices"][0]["logprobs"]
    streamed = {"text": "", "tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for ev in client.completions.create(model="x", prompt=p, max_tokens=3, temperature=0, echo=True, logprobs=2,
                                        stream=True):
        streamed["text"] += ev.choices[0].text
        if ev.choices[0].logprobs:
            for k in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                streamed[k] += getattr(ev.choices[0].logprobs, k)
    assert streamed.pop("text") == p + gen.text
    assert streamed == {k: whole[k] for k in streamed}


def test_echo_streamed_choices_share_the_first_choices_prompt_entries(server, client):
    """A stream with echo, logprobs and n > 1: every choice echoes the
    prompt's entries the first choice computed, byte for byte those of n = 1;
    the others run the prompt from the cache as a reply's do (each had
    computed every position's logits again: n = 3 computed the prompt 3
    times, in kvstitch_prompt_tokens_total{source="computed"})."""
    from conftest import metric
    chunk = server.get("/v1/cache/stats").json()["chunk_tokens"]
    p = "Notes %d. " % time.time_ns() + " ".join("step %d turns valve %d." % (i, i * 7 % 13) for i in range(90))
    n_prompt = len(server.post("/tokenize", {"content": p}).json()["tokens"])
    assert n_prompt > 2 * chunk, (n_prompt, chunk)
    keys = ("tokens", "token_logprobs", "top_logprobs", "text_offset")

    def streamed(n):
        got = [{"text": "", **{k: [] for k in keys}} for _ in range(n)]
        for ev in client.completions.create(model="x", prompt=p, max_tokens=2, temperature=0.9, seed=5, echo=True,
                                            logprobs=2, n=n, stream=True):
            for c in ev.choices:
                got[c.index]["text"] += c.text
                if c.logprobs:
                    for k in keys:
                        got[c.index][k] += getattr(c.logprobs, k)
        return got

    # n = 1 first: the prompt is cached, so the stream's other choices load
    # it and sample at once, before the first has computed the entries their
    # echo waits for (sent without waiting, they would be null)
    alone = client.completions.create(model="x", prompt=p, max_tokens=0, echo=True, logprobs=2).choices[0].logprobs
    one = streamed(1)[0]
    computed = 'kvstitch_prompt_tokens_total{source="computed"}'
    before = metric(server, computed)
    three = streamed(3)
    spent = metric(server, computed) - before
    for c in three + [one]:
        assert c["text"].startswith(p), c["text"][:80]
        # the prompt's entries, then two generated tokens'
        assert {k: c[k][:n_prompt] for k in keys} == {k: getattr(alone, k) for k in keys}
        assert len(c["tokens"]) == n_prompt + 2
    assert three[0] == one  # choice 0 is the request with n = 1
    # the first computes the whole prompt, the others what the cache's whole chunks leave (< a chunk each)
    assert n_prompt <= spent < n_prompt + 2 * chunk, (spent, n_prompt, chunk)


def test_echo_streamed_choices_when_the_first_fails():
    """A stream with echo, logprobs and n > 1 whose first choice fails
    before its prefill (KVSTITCH_TEST_ECHO_NOMEM: its echo's entries cannot
    be allocated): the other choices, which wait for the entries it was to
    compute, send nothing (they had echoed the prompt with empty logprobs,
    then their text), and the stream ends in the first choice's error, as
    the reply does."""
    from conftest import Server
    s = Server("--slots", "2", "--ctx", "256", env={"KVSTITCH_TEST_ECHO_NOMEM": "1"})
    try:
        body = {"prompt": "The capital of France is", "max_tokens": 3, "temperature": 0.9, "seed": 3, "echo": True,
                "logprobs": 1, "n": 3}
        with requests.post(s.url + "/v1/completions", json=dict(body, stream=True), headers=s.headers(), timeout=120,
                           stream=True) as r:
            assert r.status_code == 200, r.text
            datas = [l[6:].decode() for l in r.iter_lines() if l.startswith(b"data: ")]
        assert datas[-1] == "[DONE]", datas
        events = [json.loads(d) for d in datas[:-1]]
        assert [e for e in events if e.get("choices")] == [], events  # no choice sent a thing
        # the message names this failure alone: it had ended in the server
        # thread's last library error, another request's ("no error
        # detail", or a cancelled choice's), so stream and reply could differ
        assert len(events) == 1 and events[0]["error"]["message"] == "echo: out of memory", events
        e = error_of(s.post("/v1/completions", body), 500)
        assert e["message"] == "echo: out of memory", e
        # the stream's error event is the reply's error object (it had no param and "" for a null code)
        assert events[0] == {"error": e}, (events[0], e)
        assert set(e) == {"message", "type", "param", "code"}, e
        # echo without logprobs computes no entries: not held, not failed
        got = s.post("/v1/completions", dict(body, logprobs=None, stream=False)).json()
        assert [c["text"][:24] for c in got["choices"]] == [body["prompt"]] * 3, got
    finally:
        assert s.stop() == 0


def test_prompt_as_token_ids(server, client):
    """Completions take a prompt as token ids ([1, 2, 3] or [[1, 2, 3]], as
    OpenAI's API and tokenizing harnesses send it): they run as given (no
    BOS added), the same as their text's tokens; echo gives their text.
    Ids outside the vocabulary, negative or fractional ones, and several
    prompts in one request are 400s naming the place."""
    p = "The capital of France is"
    ids = server.post("/tokenize", {"content": p, "add_special": True}).json()["tokens"]
    by_text = client.completions.create(model="x", prompt=p, max_tokens=5, temperature=0)
    for prompt in (ids, [ids]):
        by_ids = client.completions.create(model="x", prompt=prompt, max_tokens=5, temperature=0)
        assert by_ids.choices[0].text == by_text.choices[0].text
        assert by_ids.usage.prompt_tokens == len(ids)
        assert by_ids.usage.model_extra["kvstitch"]["first_logits_sha256"] == \
            by_text.usage.model_extra["kvstitch"]["first_logits_sha256"]
    echoed = server.post("/v1/completions", {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0}).json()
    assert echoed["choices"][0]["text"] == p and echoed["choices"][0]["logprobs"]["tokens"][0] is not None
    for bad, param in [([1, -1], "prompt[1]"), ([1, 2.5], "prompt[1]"), ([5, "a"], "prompt[1]"),
                       ([1 << 30], "prompt[0]"), ([], "prompt"), ([[]], "prompt"), (["a", 5], "prompt")]:
        r = server.post("/v1/completions", {"prompt": bad, "max_tokens": 2})
        assert error_of(r, 400)["param"] == param, (bad, r.text)
    r = server.post("/v1/completions", {"prompt": ids, "max_tokens": 2, "documents": ["a doc"]})
    assert error_of(r, 400)["param"] == "prompt"


def test_echo_scoring_may_fill_the_context():
    """echo with max_tokens 0 generates nothing, so its prompt may fill the
    context (it had been refused as "at least one token must be generated");
    a warm ignores echo and logprobs (it had recomputed a cached prompt
    whole for logits nobody reads)."""
    from conftest import Server
    s = Server("--slots", "1", "--ctx", "64")
    try:
        ids = s.post("/tokenize", {"content": "hello " * 80}).json()["tokens"][:64]
        r = s.post("/v1/completions", {"prompt": ids, "echo": True, "max_tokens": 0, "logprobs": 1})
        assert r.status_code == 200, r.text
        assert len(r.json()["choices"][0]["logprobs"]["tokens"]) == 64
        e = error_of(s.post("/v1/completions", {"prompt": ids, "max_tokens": 1}), 400)
        assert e["code"] == "context_length_exceeded" and "must be generated" in e["message"], e
        w = s.post("/v1/cache/warm", {"prompt": ids[:40]}).json()
        again = s.post("/v1/cache/warm", {"prompt": ids[:40], "echo": True, "logprobs": 5}).json()
        assert again["cached_tokens"] >= 39, (w, again)
    finally:
        assert s.stop() == 0


def test_a_batch_of_prompts_answers_each_with_its_choices(server, client):
    """A completion's prompt may be a batch (an array of strings or of
    token-id arrays): n choices for each, numbered prompt * n + i as OpenAI
    numbers them, each the answer its prompt alone gets; usage counts each
    prompt once. More than 16 choices in all, or a batch to warm, is a 400."""
    a, b = "The capital of France is", "Water boils at"
    ids_b = server.post("/tokenize", {"content": b}).json()["tokens"]
    alone = [client.completions.create(model="x", prompt=p, max_tokens=4, temperature=0, seed=s)
             for p in (a, b) for s in (0, 1)]
    for batch in ([a, b], [a, ids_b]):
        r = client.completions.create(model="x", prompt=batch, max_tokens=4, temperature=0, n=2)
        assert [c.index for c in r.choices] == [0, 1, 2, 3]
        assert [c.text for c in r.choices] == [x.choices[0].text for x in alone]
        assert r.usage.prompt_tokens == alone[0].usage.prompt_tokens + alone[2].usage.prompt_tokens
        assert r.usage.completion_tokens == sum(x.usage.completion_tokens for x in alone)
    streamed = {}
    for ev in client.completions.create(model="x", prompt=[a, b], max_tokens=4, temperature=0, stream=True):
        for c in ev.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert streamed == {0: alone[0].choices[0].text, 1: alone[2].choices[0].text}
    e = error_of(server.post("/v1/completions", {"prompt": ["x"] * 9, "n": 2, "max_tokens": 1}), 400)
    assert e["param"] == "n" and "16" in e["message"], e
    assert error_of(server.post("/v1/completions", {"prompt": ["x"] * 17, "max_tokens": 1}), 400)["param"] == "prompt"
    assert error_of(server.post("/v1/completions", {"prompt": [a, [1, -1]], "max_tokens": 1}), 400)["param"] == "prompt[1][1]"
    # a batch of one is a batch too (it had said 'prompt[1]')
    assert error_of(server.post("/v1/completions", {"prompt": [[1, -1]], "max_tokens": 1}), 400)["param"] == "prompt[0][1]"
    assert error_of(server.post("/v1/cache/warm", {"prompt": [a, b]}), 400)["param"] == "prompt"
