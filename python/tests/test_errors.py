"""Errors raise kvstitch.Error subclasses carrying the C status and the
library's kvs_last_error() text, which names what is wrong."""
import subprocess
import sys
import textwrap

import pytest

import kvstitch
from conftest import DOC_A, QUESTION


def test_missing_file(tmp_path):
    path = tmp_path / "nope.gguf"
    with pytest.raises(kvstitch.FileError) as e:
        kvstitch.Model.load(path)
    assert e.value.status == -2 and str(path) in str(e.value)
    assert isinstance(e.value, kvstitch.Error) and isinstance(e.value, OSError)


def test_malformed_gguf(tmp_path):
    path = tmp_path / "bad.gguf"
    path.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(kvstitch.FormatError) as e:
        kvstitch.Model.load(path)
    assert e.value.status == -3 and "bad.gguf" in e.value.message


def test_context_full(model):
    s = kvstitch.Session(model, n_ctx=32)
    with pytest.raises(kvstitch.ContextFull) as e:
        s.generate("word " * 60, max_tokens=4)
    assert e.value.status == -7 and e.value.message
    # the session stays usable after a failure
    assert s.generate("Hello", max_tokens=2).tokens


def test_a_too_long_document_is_named_where_it_was_given(model, cache):
    s = kvstitch.Session(model, cache, n_ctx=128)
    with pytest.raises(kvstitch.ContextFull) as e:
        s.warm(documents=["A short one.", "word " * 300])
    assert e.value.message.startswith("documents[1]: "), e.value.message
    with pytest.raises(kvstitch.ContextFull) as e:  # baking too
        s.warm(documents=["A short one.", "word " * 300], bake_with_neighbours=1)
    assert e.value.message.startswith("documents[1]: "), e.value.message
    with pytest.raises(kvstitch.ContextFull) as e:  # blocks: counted among all of them
        s.warm([kvstitch.System("Be brief."), kvstitch.Document("Short."), kvstitch.Document("word " * 300),
                kvstitch.Question("Why?")])
    assert e.value.message.startswith("segments[2]: "), e.value.message
    assert s.warm(documents=["A short one."]).chunks_stored >= 0  # still usable


def test_a_session_refuses_a_closed_cache_or_another_kv_type_at_once(model):
    c = kvstitch.Cache(model, budget_bytes=16 << 20)
    with pytest.raises(kvstitch.InvalidArgument, match="kv_type 'q8' differs"):
        kvstitch.Session(model, c, kv_type="q8")
    assert kvstitch.Session(model, c, kv_type="f16").generate("Hi", max_tokens=1).tokens
    c.close()
    with pytest.raises(kvstitch.InvalidArgument, match="cache was closed"):
        kvstitch.Session(model, c)


def test_an_empty_document_is_refused_naming_it(model, cache):
    s = kvstitch.Session(model, cache)
    for call in (lambda: s.generate("Why?", documents=["A.", ""], max_tokens=1),
                 lambda: s.warm(documents=["A.", kvstitch.Document("")])):
        with pytest.raises(kvstitch.InvalidArgument, match=r"documents\[1\] is empty"):
            call()
    assert s.generate("Why?", documents=["A."], max_tokens=1).tokens  # still usable


def test_a_document_of_another_type_is_named_where_it_was_given(model, cache):
    # (it had been named by the blocks' index, the system prompt counted: "segments[1]")
    s = kvstitch.Session(model, cache)
    for docs, where in [([None], r"documents\[0\]"), (["A.", 5], r"documents\[1\]"),
                        ([kvstitch.Document(b"x")], r"documents\[0\]")]:
        with pytest.raises(kvstitch.InvalidArgument, match=where + ": a document must be a str"):
            s.generate("Why?", system="Be brief.", documents=docs, max_tokens=1)
    s.close()


def test_a_context_beyond_the_trained_length_is_an_opt_in(model):
    trained = model.info.n_ctx_train
    with pytest.raises(kvstitch.ContextFull, match="allow_beyond_train"):
        kvstitch.Session(model, n_ctx=trained + 1)
    s = kvstitch.Session(model, n_ctx=trained + 1, allow_beyond_train=True)
    assert s.n_ctx == trained + 1
    s.close()
    with pytest.raises(kvstitch.InvalidArgument, match="allow_beyond_train"):
        kvstitch.Session(model, allow_beyond_train="yes")


def test_arguments_that_do_not_apply_are_refused(model, cache):
    # each had been dropped without a word
    s = kvstitch.Session(model, cache)
    for call, says in [(lambda: s.generate([{"role": "user", "content": "Hi"}], chat=False, max_tokens=1),
                        "chat=False with chat messages"),
                       (lambda: s.generate([1, 2, 3], chat=True, max_tokens=1), "chat=True with token ids"),
                       (lambda: s.generate("Hi", recompute_ratio=0.7, max_tokens=1), "recompute_ratio= goes with")]:
        with pytest.raises(kvstitch.InvalidArgument, match=says):
            call()
    assert s.generate("Why?", documents=["A."], recompute_ratio=0.5, max_tokens=1).tokens  # where they apply
    assert s.generate([{"role": "user", "content": "Hi"}], chat=True, max_tokens=1).tokens
    s.close()


def test_unknown_reuse_names_the_choices(model, cache):
    s = kvstitch.Session(model, cache)
    with pytest.raises(kvstitch.InvalidArgument) as e:
        s.generate("Hello", reuse="sideways", max_tokens=1)
    assert "sideways" in e.value.message and "prefix" in e.value.message
    with pytest.raises(kvstitch.InvalidArgument) as e:
        s.generate(QUESTION, documents=[DOC_A], reuse="sideways", max_tokens=1)
    assert "cacheblend" in e.value.message


def test_binding_argument_errors(model, cache):
    with pytest.raises(kvstitch.InvalidArgument, match="kv_type"):
        kvstitch.Cache(model, kv_type="q4")
    with pytest.raises(kvstitch.InvalidArgument, match="Cache"):
        kvstitch.Session(model).generate(QUESTION, documents=[DOC_A])
    s = kvstitch.Session(model, cache)
    with pytest.raises(kvstitch.InvalidArgument, match="cached Document after live"):
        s.generate([kvstitch.Question("q"), kvstitch.Document(DOC_A)])
    with pytest.raises(kvstitch.InvalidArgument, match="prompt"):
        s.generate([])
    with pytest.raises(TypeError, match="max_tokenz"):
        s.stream("Hello", max_tokenz=3)


def test_generation_values_refused_naming_the_field(model, cache):
    """Values the CLI and the server refuse are refused by the library too,
    before any work, with a message naming the field (max_tokens=-1 had
    generated nothing and stored the prompt; top_p=0 and min_p=2 had been
    silent greedy draws, temperature=inf a uniform one; an unknown role was
    written into the prompt). The names are this API's (max_tokens, not
    the C field n_predict)."""
    cases = [(dict(max_tokens=-1), "max_tokens must"), (dict(max_tokens=2.5), "max_tokens must"), (dict(top_p=0.0), "top_p"), (dict(top_p=1.5), "top_p"),
             (dict(min_p=2.0), "min_p"), (dict(temperature=float("inf")), "temperature"),
             (dict(temperature=float("nan")), "temperature"), (dict(repeat_penalty=0.0), "repeat_penalty"),
             (dict(top_k=-1), "top_k"), (dict(logprobs=-1), "logprobs must"),
             (dict(presence_penalty=2.5), r"presence_penalty must be in \[-2, 2\]"),
             (dict(frequency_penalty=-3), r"frequency_penalty must be in \[-2, 2\]")]
    for s in (kvstitch.Session(model, n_ctx=64), kvstitch.Session(model, cache, n_ctx=64)):
        for kw, field in cases:
            with pytest.raises(kvstitch.InvalidArgument, match=field):
                s.generate("Hello", **kw)
        with pytest.raises(kvstitch.InvalidArgument, match="critic"):
            s.generate([{"role": "critic", "content": "Hello"}], max_tokens=1)
    assert cache.stats()["entries"] == 0  # nothing stored by the refused calls
    with pytest.raises(kvstitch.InvalidArgument, match="critic"):
        model.render_chat([{"role": "user", "content": "a"}, {"role": "critic", "content": "b"}])


def test_close_order_is_checked(model_path):
    m = kvstitch.Model.load(model_path, threads=1)
    s = kvstitch.Session(m, n_ctx=64)
    with pytest.raises(kvstitch.Error, match="still use"):
        m.close()
    s.close()  # closed: no longer holds the model (it had until garbage-collected)
    m.close()
    with pytest.raises(kvstitch.Error, match="closed"):
        m.tokenize("x")


def test_closed_cache_and_session_release_the_model(model_path):
    m = kvstitch.Model.load(model_path, threads=1)
    c = kvstitch.Cache(m, budget_bytes=1 << 20)
    s = kvstitch.Session(m, c, n_ctx=64)
    s.close()
    c.close()
    m.close()  # s and c are still referenced, but closed
    with pytest.raises(kvstitch.Error, match="closed"):
        c.stats()


def test_a_closed_model_cache_or_session_raises_closed(model_path):
    """Every call on a closed Model, Cache or Session raises kvstitch.Closed:
    a ValueError, as I/O on a closed Python file, and an InvalidArgument (a
    closed Model had raised the base Error, which no handler could tell from
    a failing C call)."""
    m = kvstitch.Model.load(model_path, threads=1)
    c = kvstitch.Cache(m, budget_bytes=1 << 20)
    s = kvstitch.Session(m, c, n_ctx=64)
    s.close()
    session_calls = [lambda: s.generate("Hi", max_tokens=1), lambda: s.warm("Hi"),
                     lambda: next(iter(s.stream("Hi", max_tokens=1)))]
    c.close()
    cache_calls = [c.stats, c.clear, c.entries, lambda: kvstitch.Session(m, c)]
    m.close()
    model_calls = [lambda: m.tokenize("x"), lambda: m.detokenize([1]), lambda: m.n_vocab, lambda: m.info,
                   lambda: kvstitch.Cache(m), lambda: kvstitch.Session(m)]
    for i, call in enumerate(session_calls + cache_calls + model_calls):
        with pytest.raises(kvstitch.Closed, match="closed") as e:
            call()
        assert isinstance(e.value, ValueError) and isinstance(e.value, kvstitch.InvalidArgument), i
        assert e.value.status == 0, i  # the binding's, no C status
    assert "Closed" in kvstitch.__all__ and issubclass(kvstitch.Closed, kvstitch.Error)


def test_close_while_another_thread_calls_is_refused(model_path):
    """Model.close() while another thread tokenizes: refused (it had freed
    the model under the call: a segfault). In a child process, so that a
    crash fails this test instead of the run."""
    code = textwrap.dedent("""
        import sys, threading, kvstitch
        text = "The quick brown fox jumps over the lazy dog. " * 8000
        refused = 0
        for _ in range(3):  # a close may land between two calls: then the worker sees "closed"
            m = kvstitch.Model.load(sys.argv[1], threads=1)
            started = threading.Event()
            def work():
                # calls back to back until close() succeeds (no timing: a
                # fast CPU had finished a fixed number of calls before the
                # first close)
                try:
                    while True:
                        m.tokenize(text)
                        started.set()
                except kvstitch.Error:
                    pass
            t = threading.Thread(target=work)
            t.start()
            started.wait()
            while True:
                try:
                    m.close()
                    break
                except kvstitch.InvalidArgument:
                    refused += 1
            t.join()
        print(refused)
    """)
    r = subprocess.run([sys.executable, "-c", code, model_path], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"exit {r.returncode}: {r.stderr[-800:]}"
    assert int(r.stdout.split()[0]) > 0  # close() was refused while the thread was in a call


def test_nul_in_c_strings_is_refused(model):
    """A NUL would end the C string early, the rest silently dropped."""
    with pytest.raises(kvstitch.InvalidArgument, match="NUL"):
        model.render_chat([{"role": "user", "content": "abc\0def"}])
    with pytest.raises(kvstitch.InvalidArgument, match="NUL"):
        kvstitch.Model.load("a\0b")
    with pytest.raises(kvstitch.InvalidArgument, match="cache_dir contains a NUL"):  # (it had said: no such directory)
        kvstitch.prune_dir("a\0b")
    # a path with a lone surrogate: Utf8Error naming it (a bare UnicodeEncodeError had named nothing)
    for call, what in [(lambda: kvstitch.Model.load("\ud800"), "the model path"),
                       (lambda: kvstitch.Cache(model, cache_dir="\ud800"), "cache_dir"),
                       (lambda: kvstitch.prune_dir("\ud800"), "cache_dir")]:
        with pytest.raises(kvstitch.Utf8Error, match=what + " is not valid UTF-8"):
            call()
    s = kvstitch.Session(model, n_ctx=64)
    with pytest.raises(kvstitch.InvalidArgument, match="NUL"):
        s.generate("hi", max_tokens=1, stop=["a\0b"])
    s.close()


def test_argument_types_are_refused_naming_the_argument(model, cache):
    """Arguments of the wrong type raise InvalidArgument naming them (an
    attack found ValueError / TypeError / OverflowError / AttributeError
    naming nothing, "no" taken as True, a dict taken as its keys)."""
    s = kvstitch.Session(model, cache, n_ctx=64)
    plain = kvstitch.Session(model, n_ctx=64)
    cases = [
        (lambda: s.generate([2**40]), "prompt\\[0\\]"),
        (lambda: s.generate([True, False]), "prompt\\[0\\]"),
        (lambda: s.warm([2**40]), "prompt\\[0\\]"),
        (lambda: kvstitch.Session(cache, model), "Session needs a Model"),
        (lambda: kvstitch.Session(model, model), "cache must be a Cache"),
        (lambda: s.generate(QUESTION, documents={"a": 1}), "documents must be"),
        (lambda: s.generate("Hi", stop=5), "stop must be"),
        (lambda: s.generate(QUESTION, documents=5), "documents must be"),
        (lambda: plain.generate("Hi", reuse="bogus", max_tokens=1), "bogus"),
        (lambda: s.generate("Hi", store="no"), "store must be True or False"),
        (lambda: s.generate("Hi", chat="yes"), "chat must be True or False"),
        (lambda: s.generate("Hi", logits="no"), "logits must be True or False"),
        (lambda: s.warm("Hi", chat="no"), "chat must be True or False"),
        (lambda: s.generate([kvstitch.Document(DOC_A, cache="no"), kvstitch.Question("q")]), "cache must be True"),
        (lambda: model.segment_tokens([kvstitch.Question("q")], chat="x"), "chat must be True or False"),
        (lambda: kvstitch.Model.load(model.path, vocab_only="no"), "vocab_only must be True or False"),
        (lambda: kvstitch.Cache(model, kv_type=[]), "kv_type"),
    ]
    for call, match in cases:
        with pytest.raises(kvstitch.InvalidArgument, match=match):
            call()
    with pytest.raises(kvstitch.Utf8Error, match="redis_url"):
        kvstitch.Cache(model, redis_url="redis://\udcff@127.0.0.1:1")
    np = pytest.importorskip("numpy")  # numpy integers are token ids
    ids = model.tokenize("Hello")
    assert s.generate([np.int64(t) for t in ids], max_tokens=2).tokens == s.generate(ids, max_tokens=2).tokens
    assert s.generate("Hello", max_tokens=1).tokens  # still usable
