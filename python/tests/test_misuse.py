"""Careless or hostile use of the package (an attack run found each of these
broken): copies, closes racing creation, a closed cache under warm, streams
abandoned or closed from another thread, arguments of the wrong shape, and
paths that are not UTF-8."""
import copy
import gc
import os
import pickle
import re
import shutil
import threading
import weakref


import pytest

import kvstitch

Q = "What is the capital of France?"


def test_copies_and_pickles_are_refused(model, cache):
    # A shallow copy shared the C handle: copy.copy(model).close() freed it
    # under the original, and the next tokenize crashed the process.
    s = kvstitch.Session(model, cache, n_ctx=128)
    st = s.stream(Q, max_tokens=2)
    for obj in (model, cache, s, st):
        with pytest.raises(TypeError, match="cannot be copied"):
            copy.copy(obj)
        with pytest.raises(TypeError, match="cannot be copied"):
            copy.deepcopy(obj)
        with pytest.raises(TypeError, match="cannot be pickled"):
            pickle.dumps(obj)
    st.close()
    assert model.tokenize("Hello world")  # the original is untouched
    s.close()


def test_close_racing_session_creation_never_frees_a_used_model(model_path):
    # Model.close() had checked its children outside the lock that a
    # Session's creation holds: it freed the model between the two (within
    # a few iterations of this race), and the Session's next generate
    # crashed. Now one of the two always loses cleanly.
    for _ in range(40):
        m = kvstitch.Model.load(model_path, threads=1)
        made = []

        def maker():
            try:
                made.append(kvstitch.Session(m, n_ctx=64))
            except kvstitch.Error:  # the model was closed first: refused cleanly
                pass

        t = threading.Thread(target=maker)
        t.start()
        closed = False
        while t.is_alive() and not closed:
            try:
                m.close()
                closed = True
            except kvstitch.InvalidArgument:
                pass
        t.join()
        assert not (closed and made), "the model was closed under a Session made from it"
        for s in made:
            assert s.generate([1, 2, 3], max_tokens=1).tokens is not None
            s.close()
        m.close()


def test_warm_with_a_closed_cache_leaves_the_session_usable(model_path):
    # warm() entered the cache before its try: the error left the Session
    # busy for ever, so neither it nor the model could be closed.
    m = kvstitch.Model.load(model_path, threads=1)
    c = kvstitch.Cache(m, budget_bytes=1 << 20)
    s = kvstitch.Session(m, c, n_ctx=64)
    c.close()
    with pytest.raises(kvstitch.InvalidArgument, match="cache was closed"):
        s.warm("hello")
    s.close()
    s.close()  # a second close does nothing, as Model's and Cache's
    m.close()


def test_a_stream_left_mid_loop_is_collected_and_stops(model):
    # The worker thread's target was a bound method of the Stream: a `break`
    # out of the loop left it alive, and generation ran on to max_tokens
    # with the Session busy meanwhile.
    s = kvstitch.Session(model, n_ctx=512)
    st = s.stream("1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=400, chat=False)  # counts on
    ref = weakref.ref(st)
    for i, _ in enumerate(st):
        if i == 2:
            break
    del st
    gc.collect()
    assert ref() is None  # collected: its __del__ asked the library to stop
    for _ in range(600):  # bounded wait for the worker to reach the next token
        try:
            r = s.generate("Hi", max_tokens=1)
            break
        except kvstitch.SessionBusy:
            threading.Event().wait(0.05)
    else:
        pytest.fail("the Session stayed busy")
    assert r.tokens
    s.close()


def test_stream_closed_from_another_thread_ends_the_loop(model):
    # close() had drained the queue itself, racing the iterating thread,
    # which then waited for ever for an end marker close() had taken.
    s = kvstitch.Session(model, n_ctx=512)
    st = s.stream("1, 2, 3, 4, 5, 6, 7, 8,", max_tokens=300, chat=False)  # counts on
    got, started = [], threading.Event()

    def consume():
        for piece in st:
            got.append(piece)
            started.set()
        started.set()

    t = threading.Thread(target=consume)
    t.start()
    assert started.wait(60)
    st.close()
    t.join(60)
    assert not t.is_alive(), "the iterating thread still waits"
    assert got and st.result is not None and st.result.stop_reason == "callback", (got, st.result)
    s.close()


def test_documents_as_an_iterator_are_read_once(model, cache):
    # stream() built its arguments twice: a generator given as documents=
    # was empty the second time and the documents were dropped.
    from conftest import DOC_A, QUESTION
    s = kvstitch.Session(model, cache, n_ctx=512)
    want = s.generate(QUESTION, documents=[DOC_A], max_tokens=4)
    with s.stream(QUESTION, documents=(d for d in [DOC_A]), max_tokens=4) as st:
        text = st.text
    assert st.result.prompt_tokens == want.prompt_tokens and text == want.text
    s.close()


def test_arguments_of_the_wrong_shape(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=256)
    # One stop string may come alone (OpenAI's shape); it had been taken as
    # its characters, each a stop string.
    a = s.generate("The capital of France is", stop="Nova", max_tokens=12)
    b = s.generate("The capital of France is", stop=["Nova"], max_tokens=12)
    assert a.text == b.text and a.tokens == b.tokens
    with pytest.raises(kvstitch.InvalidArgument, match="list of texts"):
        s.generate(Q, documents="The Louvre is a museum.")  # had been 23 one-character documents
    # system= where it cannot apply: refused (it had been dropped without a word)
    with pytest.raises(kvstitch.InvalidArgument, match="system="):
        s.generate(Q, system="Be short.", chat=False, max_tokens=1)
    with pytest.raises(kvstitch.InvalidArgument, match="system="):
        s.generate([1, 2, 3], system="Be short.", max_tokens=1)
    with pytest.raises(kvstitch.InvalidArgument, match="reuse contains a NUL"):
        s.generate(Q, reuse="prefix\0garbage", max_tokens=1)  # had been cut to "prefix"
    with pytest.raises(kvstitch.InvalidArgument, match="document 1 contains a NUL"):
        s.generate(Q, documents=["fine", "bad\0doc"], max_tokens=1)  # had blamed "a system prompt"
    s.close()
    # Without a cache, system= makes a chat prompt (it had asked for a Cache)
    plain = kvstitch.Session(model, n_ctx=256)
    msgs = [{"role": "system", "content": "Be short."}, {"role": "user", "content": Q}]
    assert plain.generate(Q, system="Be short.", max_tokens=4).tokens == plain.generate(msgs, max_tokens=4).tokens
    plain.close()
    with pytest.raises(kvstitch.InvalidArgument, match="threads"):
        kvstitch.Model.load(model.path, threads=1.5)


def test_model_close_refusal_is_invalid_argument(model_path):
    m = kvstitch.Model.load(model_path, threads=1)
    s = kvstitch.Session(m, n_ctx=64)
    with pytest.raises(kvstitch.InvalidArgument, match="still use"):  # had been the base Error
        m.close()
    s.close()
    m.close()


def test_paths_home_and_not_utf8(model_path, tmp_path, monkeypatch):
    # "~" in cache_dir (the README's example had failed), and a model file
    # whose name is not UTF-8, as os.listdir gives it (str with surrogate
    # escapes) or as bytes (both had failed to encode).
    monkeypatch.setenv("HOME", str(tmp_path))
    m = kvstitch.Model.load(model_path, threads=1)
    c = kvstitch.Cache(m, budget_bytes=1 << 20, cache_dir="~/kvs")
    assert os.path.isdir(tmp_path / "kvs") and c.cache_dir == str(tmp_path / "kvs")
    c.close()
    with pytest.raises(kvstitch.InvalidArgument, match="cache_dir is empty"):
        kvstitch.Cache(m, cache_dir="")
    m.close()
    odd = os.path.join(os.fsencode(tmp_path), b"model\xff.gguf")
    os.symlink(os.fsencode(model_path), odd)
    for p in (odd, os.fsdecode(odd)):
        m = kvstitch.Model.load(p, threads=1)
        assert m.n_vocab > 0
        m.close()
    shutil.rmtree(tmp_path / "kvs")


def test_wrong_types_name_the_argument(model):
    # Each had raised an exception naming nothing of ours (cffi's
    # OverflowError, KeyError, AttributeError, an unpacking error).
    s = kvstitch.Session(model, n_ctx=128)
    for kw, name in [({"max_tokens": 2**40}, "max_tokens"), ({"seed": -1}, "seed"),
                     ({"logprobs": 2**40}, "logprobs"), ({"recalibrate": "yes"}, "recalibrate"),
                     ({"recalibrate": (1.0,)}, "recalibrate"), ({"stop": [None]}, "stop")]:
        with pytest.raises(kvstitch.InvalidArgument, match=name):
            s.generate(Q, **kw)
    with pytest.raises(kvstitch.InvalidArgument, match=r"messages\[1\] must be a mapping"):
        s.generate([{"role": "user", "content": "hi"}, {"role": "user"}], max_tokens=1)
    with pytest.raises(kvstitch.InvalidArgument, match=r"messages\[0\].content must be a str"):
        s.generate([{"role": "user", "content": None}], max_tokens=1)
    with pytest.raises(kvstitch.InvalidArgument, match="tokenize takes a str"):
        model.tokenize(b"bytes")
    assert s.generate(Q, max_tokens=2, seed=2**64 - 1).tokens  # the bounds themselves pass
    s.close()


def test_numbers_texts_and_blocks_checked_naming_the_argument(model, cache):
    # A second attack run: each of these had raised cffi's OverflowError or
    # TypeError, an AttributeError, or UnicodeEncodeError, naming nothing;
    # a System(None) was dropped and warm("text", documents=...) dropped the
    # text, both without a word.
    for make, name in [(lambda: kvstitch.Session(model, n_ctx=2**31), "n_ctx"),
                       (lambda: kvstitch.Session(model, threads=1000), "threads"),
                       (lambda: kvstitch.Session(model, n_ctx=1.5), "n_ctx"),
                       (lambda: kvstitch.Session(None), "Model"),
                       (lambda: kvstitch.Cache(model, budget_bytes=-1), "budget_bytes"),
                       (lambda: kvstitch.Cache(model, chunk_tokens=2**31), "chunk_tokens"),
                       (lambda: kvstitch.Model.load(model.path, threads=2**40), "threads")]:
        with pytest.raises(kvstitch.InvalidArgument, match=name):
            make()
    s = kvstitch.Session(model, cache, n_ctx=256)
    for kw, name in [({"top_k": 2**40}, "top_k"), ({"top_k": None}, "top_k"),
                     ({"temperature": "0.5"}, "temperature"), ({"recompute_ratio": "x"}, "recompute_ratio")]:
        with pytest.raises(kvstitch.InvalidArgument, match=name):
            s.generate(Q, max_tokens=1, **kw)
    for blocks in ([kvstitch.System(None), kvstitch.Question("q")], [kvstitch.Document(5), kvstitch.Question("q")],
                   [kvstitch.Question(b"q")]):
        with pytest.raises(kvstitch.InvalidArgument, match=r"segments\[0\]"):
            s.generate(blocks, max_tokens=1)
    with pytest.raises(kvstitch.InvalidArgument, match="must be a str"):
        s.generate("q", documents=[None], max_tokens=1)
    # a ratio a C float cannot hold is named as given (it had read "got inf")
    with pytest.raises(kvstitch.InvalidArgument, match=r"recompute_ratio must be in \[0, 1\], got 1e\+300"):
        s.generate("q", documents=["d1"], recompute_ratio=1e300, max_tokens=1)
    # a ratio for a strategy that recomputes no share is refused (it had
    # been dropped without a word)
    for reuse in ("none", "selective", "firstk", "full", "prefix"):
        with pytest.raises(kvstitch.InvalidArgument, match=f"recompute_ratio= goes with .*not reuse='{reuse}'"):
            s.generate("q", documents=["d1"], reuse=reuse, recompute_ratio=0.5, max_tokens=1)
    # so are sampling values a C float cannot hold (1e300 had read "got inf",
    # 1e-50 "got 0")
    for kw, shown in [({"temperature": 1e300}, "temperature = 1e+300"), ({"top_p": 1e-50}, "top_p = 1e-50"),
                      ({"repeat_penalty": 1e-50}, "repeat_penalty = 1e-50"),
                      ({"presence_penalty": -1e39}, "presence_penalty = -1e+39")]:
        with pytest.raises(kvstitch.InvalidArgument, match=re.escape(shown) + ".*C float"):
            s.generate("q", max_tokens=1, **kw)
    # where 0 is in range, a value that narrows to it means what 0 does
    assert s.generate("q", max_tokens=2, temperature=1e-50).tokens == s.generate("q", max_tokens=2).tokens
    with pytest.raises(kvstitch.InvalidArgument, match="bake_with_neighbours"):
        s.warm(documents=["d1", "d2"], bake_with_neighbours=256)
    for kw in ({"documents": "xyz"}, {"documents": b"xyz"}, {"documents": {"a": 1}}):
        with pytest.raises(kvstitch.InvalidArgument, match="documents"):
            s.warm(**kw)
    with pytest.raises(kvstitch.InvalidArgument, match="not both"):
        s.warm("some text", documents=["d1"])
    with pytest.raises(kvstitch.InvalidArgument, match="bake_with_neighbours"):
        s.warm(documents=["a", "b"], bake_with_neighbours=2**40)
    with pytest.raises(kvstitch.Utf8Error, match="surrogate"):
        model.tokenize("a\ud800")
    with pytest.raises(kvstitch.Utf8Error, match="stop"):
        s.generate(Q, max_tokens=1, stop=["\ud800"])
    with pytest.raises(kvstitch.Utf8Error, match="document 0"):
        s.generate(Q, documents=["a\ud800"], max_tokens=1)
    for ids in ([1.7], ["65"], [2**40]):
        with pytest.raises(kvstitch.InvalidArgument, match="token id"):
            model.detokenize(ids)
    s.close()


def _interrupted_run(code, model_path, delay):
    """Runs code (a Python program given the model path) until it prints
    'ready', sends it a SIGINT delay seconds later; returns its output lines."""
    import signal
    import subprocess
    import sys
    import time
    # Python's own Ctrl-C handler, as in a terminal: a process started where
    # SIGINT is ignored (a background job without job control, as a CI runner
    # may start the suite) inherits SIG_IGN, and Python then installs none
    prelude = "import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
    p = subprocess.Popen([sys.executable, "-c", prelude + code, model_path], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(delay)
        p.send_signal(signal.SIGINT)
        return p.communicate(timeout=120)[0].split("\n")
    finally:
        p.kill()


def test_ctrl_c_stops_a_generate_between_tokens(model_path):
    # A Ctrl-C had waited for the whole generation (10 s for 3000 tokens)
    # and its result was thrown away; now the poll before the next token raises
    # it, and the session stays usable.
    code = (
        "import kvstitch, sys, time\n"
        "m = kvstitch.Model.load(sys.argv[1], threads=1)\n"
        "s = kvstitch.Session(m, n_ctx=4096)\n"
        "print('ready', flush=True)\n"
        "t0 = time.time()\n"
        "try:\n"
        "    s.generate('Once upon a time', max_tokens=4000, chat=False)\n"
        "    print('finished', flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted %.2f' % (time.time() - t0), flush=True)\n"
        "    print('usable', len(s.generate('hi', max_tokens=2, chat=False).tokens), flush=True)\n")
    # (this prompt's greedy run has no end-of-sequence in its first 3000 tokens)
    out = _interrupted_run(code, model_path, 0.5)
    assert out[0].startswith("interrupted") and float(out[0].split()[1]) < 5, out
    assert out[1] == "usable 2", out


def test_ctrl_c_in_a_stream_loop_stops_it_and_frees_the_session(model_path):
    # A KeyboardInterrupt in `for piece in stream` stops the generation there,
    # even when the traceback keeps the stream alive (a REPL, `except ... as
    # e`): it had decoded on to max_tokens, the Session busy.
    code = (
        "import kvstitch, sys, time\n"
        "m = kvstitch.Model.load(sys.argv[1], threads=1)\n"
        "s = kvstitch.Session(m, n_ctx=4096)\n"
        "st = s.stream('Once upon a time', max_tokens=3000, chat=False)\n"
        "print('ready', flush=True)\n"
        "t0 = time.time()\n"
        "try:\n"
        "    for _ in st:\n"
        "        pass\n"
        "    print('finished', flush=True)\n"
        "except KeyboardInterrupt as e:\n"
        "    kept = e  # the traceback holds the stream\n"
        "    print('interrupted %.2f' % (time.time() - t0), flush=True)\n"
        "    print('usable', len(s.generate('hi', max_tokens=2, chat=False).tokens), flush=True)\n")
    out = _interrupted_run(code, model_path, 0.5)
    assert out[0].startswith("interrupted") and float(out[0].split()[1]) < 5, out
    assert out[1] == "usable 2", out


def test_ctrl_c_stops_a_long_prefill(model_path):
    # A Ctrl-C had waited for the whole prefill (seconds for a long prompt):
    # the library now polls the Session between batches of 512 tokens, where
    # the KeyboardInterrupt is raised and stops the call; nothing of the
    # stopped prompt is stored, and the session stays usable.
    code = (
        "import kvstitch, sys, time\n"
        "m = kvstitch.Model.load(sys.argv[1], threads=1)\n"
        "c = kvstitch.Cache(m)\n"
        "s = kvstitch.Session(m, c, n_ctx=8192)\n"
        "prompt = ' '.join('word%d' % (i % 50) for i in range(1800))\n"
        "print('ready', flush=True)\n"
        "t0 = time.time()\n"
        "try:\n"
        "    s.generate(prompt, max_tokens=1, chat=False)\n"
        "    print('finished %.2f' % (time.time() - t0), flush=True)\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted %.2f' % (time.time() - t0), flush=True)\n"
        "print('stored', c.stats()['entries'], flush=True)\n"
        "print('usable', len(s.generate('hi', max_tokens=2, chat=False).tokens), flush=True)\n")
    out = _interrupted_run(code, model_path, 0.3)
    assert out[0].startswith("interrupted"), out
    assert out[1] == "stored 0", out
    assert out[2] == "usable 2", out


def test_arguments_that_do_not_apply_or_are_not_bools_are_refused(model, cache, tmp_path):
    """An attack run found these taken without a word: warm(text, chat=True)
    warmed the plain text; doc_set / bake_with_neighbours with a text were
    dropped, bake_with_neighbours=-1 or "x" not checked; a plain prompt's
    recalibrate=(9, 9) taken (10**400: OverflowError); truthiness tests took
    keep_unreachable="no" as True, special="x", add_bos=None,
    add_generation_prompt=2, and render_special="y" raised ValueError."""
    s = kvstitch.Session(model, cache=cache)
    for kw in (dict(chat=True), dict(doc_set=True), dict(bake_with_neighbours=2), dict(bake_with_neighbours=-1),
               dict(bake_with_neighbours="x")):
        with pytest.raises(kvstitch.InvalidArgument):
            s.warm("A text to keep.", **kw)
    assert s.warm("A text to keep.").chunks_stored == 1  # chat=None: as given
    assert s.warm(documents=["A passage."], chat=False).documents_computed == 1
    with pytest.raises(kvstitch.InvalidArgument, match="temperature"):
        s.generate(Q, temperature=10**400, max_tokens=1)
    for recal in ((9, 9), (10**400, 1), (0.05, 1)):
        with pytest.raises(kvstitch.InvalidArgument, match="recalibrate"):
            s.generate(Q, recalibrate=recal, max_tokens=1)
    with pytest.raises(kvstitch.InvalidArgument, match="keep_unreachable"):
        kvstitch.prune_dir(tmp_path, keep_unreachable="no")
    for call, name in ((lambda: model.tokenize("hi", special="x"), "special"),
                       (lambda: model.tokenize("hi", add_bos=None), "add_bos"),
                       (lambda: model.render_chat([{"role": "user", "content": "hi"}], add_generation_prompt=2),
                        "add_generation_prompt"),
                       (lambda: model.detokenize([1], render_special="y"), "render_special")):
        with pytest.raises(kvstitch.InvalidArgument, match=name):
            call()
    # a second attack run: recalibrate=True on a plain prompt and
    # render_chat(family="") had been taken without a word; a
    # Cache's chunk_tokens past the CLI's range (4096) had been accepted
    with pytest.raises(kvstitch.InvalidArgument, match="recalibrate"):
        s.generate(Q, recalibrate=True, max_tokens=1)
    assert s.generate(Q, recalibrate=False, max_tokens=1).tokens
    with pytest.raises(kvstitch.InvalidArgument):
        model.render_chat([{"role": "user", "content": "hi"}], family="")
    with pytest.raises(kvstitch.InvalidArgument, match="chunk_tokens"):
        kvstitch.Cache(model, chunk_tokens=4097)
    # and Python's own TypeErrors, naming no argument (os.fspath's, iteration's)
    for call, name in ((lambda: kvstitch.Cache(model, cache_dir=5), "cache_dir"),
                       (lambda: kvstitch.prune_dir(5), "cache_dir"),
                       (lambda: model.detokenize(None), "ids"),
                       (lambda: model.render_chat(None), "messages"),
                       (lambda: model.segment_tokens(None), "blocks"),
                       (lambda: s.generate(Q, stop=b"x", max_tokens=1), "stop")):
        with pytest.raises(kvstitch.InvalidArgument, match=name):
            call()
    assert model.detokenize(iter(model.tokenize("hello"))) == "hello"
    s.close()
