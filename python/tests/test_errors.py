"""Errors raise kvstitch.Error subclasses carrying the C status and the
library's kvs_last_error() text, which names what is wrong."""
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
        kvstitch.Cache(model, kv_type="q8")
    with pytest.raises(kvstitch.InvalidArgument, match="Cache"):
        kvstitch.Session(model).generate(QUESTION, documents=[DOC_A])
    s = kvstitch.Session(model, cache)
    with pytest.raises(kvstitch.InvalidArgument, match="cached Document after live"):
        s.generate([kvstitch.Question("q"), kvstitch.Document(DOC_A)])
    with pytest.raises(kvstitch.InvalidArgument, match="prompt"):
        s.generate([])
    with pytest.raises(TypeError, match="max_tokenz"):
        s.stream("Hello", max_tokenz=3)


def test_close_order_is_checked(model_path):
    m = kvstitch.Model.load(model_path, threads=1)
    s = kvstitch.Session(m, n_ctx=64)
    with pytest.raises(kvstitch.Error, match="still use"):
        m.close()
    s.close()
    del s
    m.close()
    with pytest.raises(kvstitch.Error, match="closed"):
        m.tokenize("x")
