"""Session.stream: pieces as they come, same output as generate, early
close, and the Session is busy while a stream is open."""
import pytest

import kvstitch


def test_stream_equals_generate(model):
    s = kvstitch.Session(model, n_ctx=512)
    ref = s.generate("Write a line about the sea.", chat=True, max_tokens=16, logits=True)
    st = s.stream("Write a line about the sea.", chat=True, max_tokens=16, logits=True)
    pieces = list(st)
    assert len(pieces) > 1 and "".join(pieces) == ref.text
    assert st.result.tokens == ref.tokens and st.result.first_logits == ref.first_logits


def test_stream_close_early(model):
    s = kvstitch.Session(model, n_ctx=512)
    with s.stream("Count from one to fifty:", max_tokens=64, logits=True) as st:
        got = [next(st), next(st)]
    assert all(isinstance(p, str) for p in got)
    assert st.result.stop_reason == "callback" and len(st.result.tokens) < 64
    assert s.generate("Hello", max_tokens=2, logits=True).tokens  # usable again


def test_session_busy_during_stream(model):
    s = kvstitch.Session(model, n_ctx=512)
    # The worker frees the Session when generation ends, not when the pieces
    # are read: the call below must come while it still runs. "Tell me a
    # story." ended at EOS after one token (~20 ms), within a loaded host's
    # scheduling delay (this failed once under a busy VM); this prompt runs
    # to max_tokens (~0.7 s), and close() stops it at the next token.
    st = s.stream("Once upon a time", max_tokens=256, logits=True)
    with pytest.raises(kvstitch.SessionBusy):
        s.generate("Hello", max_tokens=1, logits=True)
    st.close()
    assert s.generate("Hello", max_tokens=1, logits=True).tokens


def test_stream_error_raised_in_consumer(model):
    s = kvstitch.Session(model, n_ctx=16)
    st = s.stream("word " * 40, max_tokens=4, logits=True)
    with pytest.raises(kvstitch.ContextFull):
        list(st)
    assert s.generate("Hi", max_tokens=1, logits=True).tokens


def test_stream_closed_during_its_prefill_stops_it(model):
    # close() had waited for the whole prefill (7.6 s for a 2500-word
    # prompt): the flag poll now stops it at its next batch of 512 tokens.
    import time
    s = kvstitch.Session(model, n_ctx=8192, threads=1)
    # a prompt of ~460 tokens (one batch of at most 512), timed here: the
    # bound below scales with this process's speed (under ThreadSanitizer a
    # batch takes ~10x as long, and a fixed 3 s had failed there) and stays
    # well below the whole prefill's ~10 batches
    t0 = time.monotonic()
    s.generate(" ".join("item%d" % (i % 40) for i in range(170)), max_tokens=1, chat=False)
    batch = time.monotonic() - t0
    st = s.stream(" ".join("word%d" % (i % 50) for i in range(1800)), max_tokens=4, chat=False)
    time.sleep(0.2)
    t0 = time.monotonic()
    st.close()
    took = time.monotonic() - t0
    assert st.result is None, st.result  # stopped before its first token
    assert took < max(3.0, 4 * batch), (took, batch)  # a batch (~0.5 s at 1 thread), not the ~5000-token prefill
    assert s.generate("Hello", max_tokens=2, logits=True).tokens  # usable again


def test_stream_closed_from_another_thread_before_its_first_token_just_ends(model):
    # The loop had raised kvstitch.Interrupted: the close is the stream's own.
    import threading
    s = kvstitch.Session(model, n_ctx=8192, threads=1)
    st = s.stream(" ".join("word%d" % (i % 50) for i in range(1800)), max_tokens=4, chat=False)
    threading.Timer(0.2, st.close).start()
    assert list(st) == [] and st.result is None
    assert s.generate("Hello", max_tokens=2, logits=True).tokens


def test_a_break_out_of_a_stream_leaves_the_session_usable(model):
    # The dropped stream's call ends at its next token or batch; the next
    # call waits for it (it had raised SessionBusy for ~1 s after the break).
    s = kvstitch.Session(model, n_ctx=8192, threads=1)
    ref = s.generate("Hello", max_tokens=2, logits=True)
    for _ in s.stream("Count from one to five hundred:", max_tokens=400):
        break
    assert s.generate("Hello", max_tokens=2, logits=True).tokens == ref.tokens
    st = s.stream(" ".join("word%d" % (i % 50) for i in range(1800)), max_tokens=4, chat=False)
    del st  # dropped during its prefill
    assert s.generate("Hello", max_tokens=2, logits=True).tokens == ref.tokens


def test_a_close_after_the_stream_ended_leaves_busy_as_busy(model):
    # A close() after its call ended had left the Session marked as winding
    # down: a later call beside another running stream waited for that
    # stream instead of raising SessionBusy.
    s = kvstitch.Session(model, n_ctx=512)
    st = s.stream("Hello", max_tokens=2)
    list(st)
    st.close()
    st2 = s.stream("Once upon a time", max_tokens=256, logits=True)
    with pytest.raises(kvstitch.SessionBusy):
        s.generate("Hello", max_tokens=1)
    st2.close()

