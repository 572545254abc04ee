"""Threads: a Model and a Cache shared by threads, one Session each, give
the serial results bit for bit; the GIL is released during compute; a
Session entered twice at once refuses the second call."""
import threading
import time

import pytest

import kvstitch
from conftest import MANUAL


def test_threads_share_a_cache(model, cache):
    prompts = [MANUAL + f"Question {i}: what is step {i}?" for i in range(4)]
    ref = kvstitch.Session(model, n_ctx=1024)
    want = [ref.generate(p, max_tokens=3, logits=True) for p in prompts]
    got, errors = {}, []

    def work(i):
        try:
            s = kvstitch.Session(model, cache, n_ctx=1024, threads=1)
            got[i] = s.generate(prompts[i], max_tokens=3, logits=True)
        except Exception as e:  # reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=300)
    assert not errors and len(got) == 4
    for i in range(4):
        assert got[i].first_logits == want[i].first_logits and got[i].tokens == want[i].tokens
    # later requests hit what the threads stored
    again = kvstitch.Session(model, cache, n_ctx=1024).generate(prompts[0], max_tokens=3, logits=True)
    assert again.cached_tokens > 100 and again.first_logits == want[0].first_logits
    assert cache.stats()["hits"] > 0


def test_gil_released_during_compute(model):
    s = kvstitch.Session(model, n_ctx=1024, threads=1)
    done = threading.Event()
    box = {}

    def work():
        t0 = time.perf_counter()
        s.generate(MANUAL * 2, max_tokens=1, logits=True)   # one long prefill, no callbacks
        box["call"] = (t0, time.perf_counter())
        done.set()

    ticks = []
    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0.001)
    t.join()
    t0, t1 = box["call"]
    inside = [x for x in ticks if t0 <= x <= t1]
    gaps = [b - a for a, b in zip(inside, inside[1:])]
    assert t1 - t0 > 0.2 and len(inside) > 10
    # with the GIL held for the call, this thread would stall for all of it
    assert max(gaps) < 0.5 * (t1 - t0)


def test_session_refuses_concurrent_use(model):
    s = kvstitch.Session(model, n_ctx=512)
    # the Session is busy until generation ends: a prompt that runs to
    # max_tokens (~0.7 s; "Tell me about rivers." ended at EOS after 7
    # tokens, ~30 ms, a race against the thread's start on a loaded host)
    st = s.stream("Once upon a time", max_tokens=256, logits=True)
    err = []

    def other():
        try:
            s.generate("Hello", max_tokens=1, logits=True)
        except kvstitch.SessionBusy as e:
            err.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    st.close()
    assert len(err) == 1 and "one Session per thread" in str(err[0])
