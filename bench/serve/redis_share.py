#!/usr/bin/env python3
"""Servers sharing chunks through Redis (`kvstitch serve --redis`): TTFT of one
long chat prompt on a server without Redis (cold), on server A with Redis
(cold, stores the chunks), on a fresh server B with Redis (its RAM empty: the
chunks come from Redis), and on B again (from its RAM); then the same long
system text with another question, cold and on a second fresh server C
(the prompts part inside a cached chunk: Redis serves the part they share
through its partial-chunk markers). The same first-logits hash for each
question everywhere, rounds alternating. Starts its own redis-server on a
free loopback port and kills it at the end.

  python bench/serve/redis_share.py [--rounds 2] [--chars 9000] [--threads 2]
Env: KVSTITCH_MODEL (default: scripts/fetch-model.sh), KVSTITCH_CLI
(build/kvstitch). Prints a markdown table and writes it to
bench/results/serve-redis-share-<UTC date>.md.
"""
import argparse
import os
import re
import signal
import socket
import subprocess
import tempfile
import time

import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLI = os.environ.get("KVSTITCH_CLI") or os.path.join(ROOT, "build", "kvstitch")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model, threads, log_dir, *extra):
    log = open(os.path.join(log_dir, "serve-%d.log" % time.time_ns()), "w+")
    p = subprocess.Popen([CLI, "serve", "-m", model, "--host", "127.0.0.1", "--port", "0", "-t", str(threads),
                          "--slots", "1", "--ctx", "4096"] + list(extra), stdout=log, stderr=subprocess.STDOUT)
    t0 = time.time()
    while time.time() - t0 < 120:
        log.seek(0)
        m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", log.read())
        if m:
            return p, int(m.group(1))
        if p.poll() is not None:
            break
        time.sleep(0.1)
    p.kill()
    log.seek(0)
    raise SystemExit("server did not start: " + log.read()[-1000:])


def stop_server(p):
    p.send_signal(signal.SIGTERM)  # flushes the Redis writer (at most 10 s)
    p.wait(60)


QUESTIONS = ("Summarize.", "Which commands does it name, and what does each do?")


def ask(port, text, q=0):
    r = requests.post("http://127.0.0.1:%d/v1/chat/completions" % port, timeout=600, json={
        "messages": [{"role": "system", "content": text}, {"role": "user", "content": QUESTIONS[q]}],
        "max_tokens": 1, "temperature": 0}).json()
    k = r["usage"]["kvstitch"]
    return q, r["usage"]["prompt_tokens"], k["cached_tokens"], k["timings"]["ttft_ms"], k["first_logits_sha256"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--chars", type=int, default=9000)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    model = os.environ.get("KVSTITCH_MODEL") or subprocess.run(
        [os.path.join(ROOT, "scripts", "fetch-model.sh")], capture_output=True, text=True,
        check=True).stdout.split()[-1]
    text = open(os.path.join(ROOT, "README.md")).read()[20000:20000 + a.chars]
    tmp = tempfile.mkdtemp(prefix="kvs-redis-share-")
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                              "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    url = "redis://127.0.0.1:%d" % port
    rows = []
    try:
        time.sleep(0.5)
        for rnd in range(1, a.rounds + 1):
            subprocess.run(["redis-cli", "-p", str(port), "flushall"], capture_output=True, check=True)
            p, sp = start_server(model, a.threads, tmp)
            rows.append((rnd, "no Redis, cold") + ask(sp, text))
            stop_server(p)
            p, sp = start_server(model, a.threads, tmp)
            rows.append((rnd, "no Redis, cold, question 2") + ask(sp, text, 1))
            stop_server(p)
            p, sp = start_server(model, a.threads, tmp, "--redis", url)
            rows.append((rnd, "A with Redis, cold (stores)") + ask(sp, text))
            stop_server(p)
            p, sp = start_server(model, a.threads, tmp, "--redis", url)
            rows.append((rnd, "B, empty RAM: from Redis") + ask(sp, text))
            rows.append((rnd, "B again: from its RAM") + ask(sp, text))
            stop_server(p)
            p, sp = start_server(model, a.threads, tmp, "--redis", url)
            rows.append((rnd, "C, empty RAM, question 2: from Redis") + ask(sp, text, 1))
            stop_server(p)
    finally:
        redis.kill()
        redis.wait()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    git = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"], capture_output=True,
                         text=True).stdout.strip()
    out = ["# Servers sharing chunks through Redis (`bench/serve/redis_share.py`)", "",
           "%s, %s, %s threads, %s, load %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), cpu,
                                               a.threads, git, open("/proc/loadavg").read().split()[0]), "",
           "| round | server | question | prompt tokens | cached | TTFT ms | vs cold | first logits |",
           "|---|---|---:|---:|---:|---:|---:|---|"]
    for rnd, what, q, n, cached, ttft, sha in rows:
        cold = next(r[5] for r in rows if r[0] == rnd and r[1].startswith("no Redis") and r[2] == q)
        out.append("| %d | %s | %d | %d | %d | %.0f | %.1fx | %s |" % (rnd, what, q + 1, n, cached, ttft, cold / ttft,
                                                                       sha[:12]))
    same = all(len({r[6] for r in rows if r[2] == q}) == 1 for q in range(len(QUESTIONS)))
    out += ["", "first logits identical in every row of a question: %s" % ("yes" if same else "**no**")]
    text_out = "\n".join(out) + "\n"
    print(text_out)
    path = os.path.join(ROOT, "bench", "results", "serve-redis-share-%s.md" % time.strftime("%Y%m%d", time.gmtime()))
    open(path, "w").write(text_out)
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
