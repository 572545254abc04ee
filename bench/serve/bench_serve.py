#!/usr/bin/env python3
"""Serving benchmark, one OpenAI-compatible server at a time (kvstitch serve or
llama.cpp's llama-server, same GGUF, same threads, same slots):

  multiturn  U concurrent users, T turns each, a shared system prompt of ~S
             tokens, ~50-token user messages, A-token answers: TTFT p50/p95
             per turn, aggregate decode tok/s
  rag        R requests, each 6 passages drawn from a pool of 20 (MuSiQue,
             ../shared/data) in random order + a question: TTFT p50/p95.
             kvstitch gets them as `documents` (its default repair), the
             peer as the same text in the user message
  scaling    1, 2, 4, 8 concurrent streams of A tokens: aggregate decode tok/s

TTFT is measured by the client: request sent -> first streamed content byte.
Writes one JSON object (all samples) to --out. Standard library only.
"""
import argparse
import http.client
import json
import os
import random
import statistics
import threading
import time

SYSTEM_SENTENCES = [
    "You are the support assistant of Northwind Rail, a regional train company.",
    "Answer questions about timetables, tickets, refunds, luggage and accessibility.",
    "Tickets bought online can be refunded up to 24 hours before departure.",
    "Bicycles travel free outside peak hours, from 9:30 to 16:00 on weekdays.",
    "Passengers with reduced mobility can book assistance at least 12 hours ahead.",
    "Season tickets are personal and must be shown with an identity document.",
    "Delays of more than 30 minutes give a 25 percent refund, more than 60 minutes 50 percent.",
    "Pets under 10 kilograms travel free in a closed carrier; larger dogs need a half-price ticket.",
]
USER_TOPICS = ["a refund for a cancelled train", "bringing a bicycle on Saturday", "a lost suitcase",
               "a season ticket for a student", "assistance for a wheelchair user", "travelling with a large dog",
               "a delay of 45 minutes last Monday", "changing the date of a ticket"]


def system_prompt(n_tokens):
    words, out, i = 0, [], 0
    while words < n_tokens * 0.75:  # ~0.75 words per token for English prose
        s = SYSTEM_SENTENCES[i % len(SYSTEM_SENTENCES)] + " (Rule %d.)" % i
        out.append(s)
        words += len(s.split())
        i += 1
    return " ".join(out)


def user_message(user, turn):
    t = USER_TOPICS[(user + turn) % len(USER_TOPICS)]
    return ("Hello, this is customer %d again. I have a question about %s. I travel next week from the central "
            "station with my family, and I would like to know exactly what I need to do, what it costs, and "
            "whether I must book anything in advance. Please be precise." % (user, t))


class Client:
    def __init__(self, url, kvstitch):
        host, port = url.replace("http://", "").split(":")
        self.host, self.port, self.kvstitch = host, int(port), kvstitch

    def chat(self, messages, max_tokens, documents=None):
        """Streams one chat completion; returns (ttft_s, total_s, text, completion_tokens, usage)."""
        body = {"messages": messages, "max_tokens": max_tokens, "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True}}
        if documents is not None:
            body["documents"] = documents
        if not self.kvstitch:
            body["cache_prompt"] = True
        conn = http.client.HTTPConnection(self.host, self.port, timeout=3600)
        t0 = time.perf_counter()
        conn.request("POST", "/v1/chat/completions", json.dumps(body), {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError("HTTP %d: %s" % (resp.status, resp.read()[:300]))
        ttft, text, usage, n_chunks, buf = None, "", None, 0, b""
        while True:
            line = resp.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            payload = line[6:]
            if payload == b"[DONE]":
                break
            ev = json.loads(payload)
            if ev.get("usage"):
                usage = ev["usage"]
            for ch in ev.get("choices") or []:
                piece = (ch.get("delta") or {}).get("content")
                if piece:
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                    text += piece
                    n_chunks += 1
        total = time.perf_counter() - t0
        conn.close()
        n_out = usage["completion_tokens"] if usage else n_chunks
        return ttft if ttft is not None else total, total, text, n_out, usage


def pct(xs, p):
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def run_multiturn(cl, users, turns, sys_tokens, answer_tokens):
    system = system_prompt(sys_tokens)
    samples = []  # (user, turn, ttft, total, completion_tokens, cached)
    lock = threading.Lock()

    def user_loop(u):
        msgs = [{"role": "system", "content": system}]
        for t in range(turns):
            msgs.append({"role": "user", "content": user_message(u, t)})
            ttft, total, text, n_out, usage = cl.chat(msgs, answer_tokens)
            msgs.append({"role": "assistant", "content": text})
            cached = (usage or {}).get("prompt_tokens_details", {}) or {}
            with lock:
                samples.append((u, t, ttft, total, n_out, cached.get("cached_tokens")))

    t0 = time.perf_counter()
    th = [threading.Thread(target=user_loop, args=(u,)) for u in range(users)]
    [x.start() for x in th]
    [x.join() for x in th]
    wall = time.perf_counter() - t0
    per_turn = {}
    for t in range(turns):
        xs = [s[2] for s in samples if s[1] == t]
        per_turn[t + 1] = {"ttft_p50_ms": 1e3 * pct(xs, 0.5), "ttft_p95_ms": 1e3 * pct(xs, 0.95),
                           "ttft_ms": [1e3 * x for x in xs]}
    later = [s[2] for s in samples if s[1] >= 1]
    return {"per_turn": per_turn, "ttft_p50_later_turns_ms": 1e3 * pct(later, 0.5),
            "completion_tokens": sum(s[4] for s in samples), "wall_s": wall,
            "decode_tok_s": sum(s[4] for s in samples) / wall, "samples": samples}


def load_passages(shared, n_pool):
    items = json.load(open(os.path.join(shared, "data", "musique_dev.json")))
    pool, questions = [], []
    for it in items:
        for c in it["ctxs"][:6]:
            if len(pool) < n_pool:
                pool.append("%s: %s" % (c["title"], c["text"]))
        questions.append(it["question"])
    return pool, questions


RAG_SYSTEM = ("You will read several passages and then answer a question about them. Answer directly from the "
              "passages, in at most five words.")


def run_rag(cl, kvstitch, shared, n_requests, concurrency, answer_tokens, seed):
    pool, questions = load_passages(shared, 20)
    rng = random.Random(seed)
    reqs = []
    for i in range(n_requests):
        docs = rng.sample(pool, 6)
        reqs.append((docs, questions[i % len(questions)]))
    samples, lock = [], threading.Lock()

    def one(i, docs, q):
        if kvstitch:
            msgs = [{"role": "system", "content": RAG_SYSTEM}, {"role": "user", "content": q}]
            r = cl.chat(msgs, answer_tokens, documents=[{"id": str(k), "text": d + "\n\n"} for k, d in enumerate(docs)])
        else:
            msgs = [{"role": "system", "content": RAG_SYSTEM},
                    {"role": "user", "content": "".join(d + "\n\n" for d in docs) + q}]
            r = cl.chat(msgs, answer_tokens)
        usage = r[4] or {}
        ks = usage.get("kvstitch") or {}
        with lock:
            # ttft, total, completion tokens, answer, prompt tokens, request index, and where
            # kvstitch's prompt KV came from (None for the peer)
            samples.append((r[0], r[1], r[3], r[2], usage.get("prompt_tokens"), i,
                            {k: ks.get(k) for k in ("strategy", "cached_tokens", "moved_tokens",
                                                    "recomputed_tokens", "computed_tokens")} if ks else None))

    t0 = time.perf_counter()
    for k in range(0, len(reqs), concurrency):
        th = [threading.Thread(target=one, args=(k + j,) + a) for j, a in enumerate(reqs[k:k + concurrency])]
        [x.start() for x in th]
        [x.join() for x in th]
    xs = [s[0] for s in samples]
    return {"ttft_p50_ms": 1e3 * pct(xs, 0.5), "ttft_p95_ms": 1e3 * pct(xs, 0.95), "wall_s": time.perf_counter() - t0,
            "prompt_tokens_mean": statistics.mean(s[4] for s in samples if s[4]) if any(s[4] for s in samples) else None,
            "samples": samples}


def run_scaling(cl, streams_list, answer_tokens):
    out = {}
    for n in streams_list:
        res = []
        # One prompt for every stream, cached by a first request: decode dominates.
        msgs = [{"role": "user", "content": "Write a long story about a lighthouse keeper."}]
        cl.chat(msgs, 2)
        t0 = time.perf_counter()
        th = [threading.Thread(target=lambda: res.append(cl.chat(msgs, answer_tokens))) for _ in range(n)]
        [x.start() for x in th]
        [x.join() for x in th]
        wall = time.perf_counter() - t0
        toks = sum(r[3] for r in res)
        out[n] = {"completion_tokens": toks, "wall_s": wall, "decode_tok_s": toks / wall}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", required=True)
    ap.add_argument("--kvstitch", action="store_true", help="the server is kvstitch (documents as extension)")
    ap.add_argument("--scenario", choices=["multiturn", "rag", "scaling"], required=True)
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--system-tokens", type=int, default=1000)
    ap.add_argument("--answer-tokens", type=int, default=64)
    ap.add_argument("--rag-requests", type=int, default=20)
    ap.add_argument("--rag-concurrency", type=int, default=1)
    ap.add_argument("--streams", default="1,2,4,8")
    ap.add_argument("--shared", default=os.environ.get("KVSTITCH_SHARED", "../shared"))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cl = Client(a.url, a.kvstitch)
    if a.scenario == "multiturn":
        res = run_multiturn(cl, a.users, a.turns, a.system_tokens, a.answer_tokens)
    elif a.scenario == "rag":
        res = run_rag(cl, a.kvstitch, a.shared, a.rag_requests, a.rag_concurrency, a.answer_tokens, a.seed)
    else:
        res = run_scaling(cl, [int(x) for x in a.streams.split(",")], a.answer_tokens)
    res["args"] = vars(a)
    with open(a.out, "w") as f:
        json.dump(res, f)
    print(json.dumps({k: v for k, v in res.items() if k not in ("samples", "per_turn")}))


if __name__ == "__main__":
    main()
