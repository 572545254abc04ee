"""kvstitch: chunk KV reuse for LLM prompts, from Python.

    import kvstitch
    model = kvstitch.Model.load("SmolLM2-135M-Instruct.Q4_1.gguf")
    cache = kvstitch.Cache(model, cache_dir="~/.cache/kvs")
    s = kvstitch.Session(model, cache)
    r = s.generate("...", documents=[doc_a, doc_b], max_tokens=64)

A binding (cffi, ABI mode) of the C library libkvstitch.so: the C header is
parsed at import, nothing of the engine is reimplemented here. Thread rules:
Model and Cache are shared by threads; one Session per thread (a second
concurrent call raises SessionBusy). The GIL is released while C computes.
"""
from ._errors import (Closed, ContextFull, CorruptCache, Error, FileError, FormatError, InternalError,
                      Interrupted, InvalidArgument, ModelMismatch, NotFound, OutOfMemory, SessionBusy,
                      Unsupported, Utf8Error, check as _check)
from ._lib import cstr as _cstr, lib as _lib, library_path
from ._result import GenerateResult, WarmResult
from .cache import Cache, prune_dir
from .model import Model, ModelInfo
from .segments import Document, Question, Segment, System
from .session import Session
from .stream import Stream

__version__ = _cstr(_lib.kvs_version())


def isa_paths() -> list:
    """The kernel paths this CPU can run, best first: a list of "amx",
    "avx512vnni", "avx2", "scalar" (kvs_isa_paths)."""
    return _cstr(_lib.kvs_isa_paths()).split()


def isa_in_use() -> str:
    """The kernel path that runs (kvs_isa_in_use): the best of isa_paths()
    unless KVS_ISA in the environment caps it (read once, before the first
    model load: set it before importing where it matters). Every path gives
    the same bits. Raises InvalidArgument where KVS_ISA names no path of this
    CPU (Model.load raises it too)."""
    s = _cstr(_lib.kvs_isa_in_use())
    if not s:  # the library's reason, as every failed call raises it
        _check(_lib.KVS_ERR_INVALID_ARG)
    return s


__all__ = [
    "Model", "ModelInfo", "Cache", "Session", "Stream", "GenerateResult", "WarmResult",
    "System", "Document", "Question", "Segment",
    "Error", "InvalidArgument", "FileError", "FormatError", "Unsupported", "OutOfMemory",
    "NotFound", "ContextFull", "Utf8Error", "ModelMismatch", "CorruptCache", "InternalError",
    "Interrupted", "SessionBusy", "Closed", "library_path", "prune_dir", "__version__",
    "isa_paths", "isa_in_use",
]
