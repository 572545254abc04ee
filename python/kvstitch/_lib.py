"""Loads libkvstitch.so and its header into one cffi FFI (ABI mode).

Where the library comes from, first found wins:
  1. $KVSTITCH_LIB (a libkvstitch.so path; header: $KVSTITCH_HEADER, else the
     include/ beside its lib/ or build/ directory);
  2. the copy `pip install` put inside this package (_native/);
  3. the source tree this package sits in (../build/libkvstitch.so), for
     running the tests from a checkout without installing;
  4. an installed library (`make install`): pkg-config's libdir/includedir.

cffi releases the GIL around every call into the library, so C compute
(prefill, decode, lookups) runs while other Python threads proceed.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import cffi

from ._header import cdef_from_header

_HERE = Path(__file__).resolve().parent


def _candidates() -> list[tuple[Path, Path]]:
    out: list[tuple[Path, Path]] = []
    env = os.environ.get("KVSTITCH_LIB")
    if env:
        lib = Path(env)
        hdr = os.environ.get("KVSTITCH_HEADER")
        root = lib.parent.parent
        while hdr is None and root != root.parent and not (root / "include" / "kvstitch.h").exists():
            root = root.parent  # build/san/libkvstitch.so -> the tree's include/
        out.append((lib, Path(hdr) if hdr else root / "include" / "kvstitch.h"))
        return out  # an explicit choice is never silently replaced
    out.append((_HERE / "_native" / "libkvstitch.so", _HERE / "_native" / "kvstitch.h"))
    tree = _HERE.parent.parent
    out.append((tree / "build" / "libkvstitch.so", tree / "include" / "kvstitch.h"))
    try:
        q = lambda var: subprocess.run(["pkg-config", "--variable=" + var, "kvstitch"],
                                       capture_output=True, text=True, check=True).stdout.strip()
        out.append((Path(q("libdir")) / "libkvstitch.so", Path(q("includedir")) / "kvstitch.h"))
    except (OSError, subprocess.CalledProcessError):
        pass
    return out


def _load():
    tried = []
    for lib_path, hdr_path in _candidates():
        if not (lib_path.exists() and hdr_path.exists()):
            tried.append(f"{lib_path} (+ {hdr_path.name})")
            continue
        body, consts = cdef_from_header(hdr_path.read_text(encoding="utf-8"))
        ffi = cffi.FFI()
        ffi.cdef(body)
        lib = ffi.dlopen(str(lib_path))
        want = "%d.%d.%d" % (consts["KVS_VERSION_MAJOR"], consts["KVS_VERSION_MINOR"],
                             consts["KVS_VERSION_PATCH"])
        have = ffi.string(lib.kvs_version()).decode()
        if have != want:
            raise ImportError(f"kvstitch: {lib_path} is version {have} but its header "
                              f"{hdr_path} says {want}; rebuild or set KVSTITCH_LIB")
        return ffi, lib, str(lib_path)
    raise ImportError("kvstitch: libkvstitch.so not found; tried " + "; ".join(tried) +
                      ". Install with `pip install ./python` from the source tree, "
                      "run `make install`, or set KVSTITCH_LIB")


ffi, lib, library_path = _load()


def cstr(p) -> str:
    """A C string owned by the library (static or the model's) as str."""
    return ffi.string(p).decode("utf-8", errors="replace") if p != ffi.NULL else ""


def c_text(s: str, what: str) -> bytes:
    """s as UTF-8 for a C string: a NUL would end it early (the rest silently
    dropped: a chat message, a stop string cut short), so it is refused, as
    the CLI refuses it."""
    if not isinstance(s, str):  # None or bytes had raised AttributeError / TypeError naming nothing
        from ._errors import InvalidArgument
        raise InvalidArgument(f"{what} must be a str, got {type(s).__name__}")
    if "\0" in s:
        from ._errors import InvalidArgument
        raise InvalidArgument(f"{what} contains a NUL character")
    return utf8(s, what)


def utf8(s: str, what: str) -> bytes:
    """s encoded as UTF-8, or Utf8Error naming what: a lone surrogate
    ("\ud800") had raised UnicodeEncodeError naming nothing."""
    try:
        return s.encode("utf-8")
    except UnicodeEncodeError as e:
        from ._errors import Utf8Error
        raise Utf8Error(f"{what} is not valid UTF-8: a lone surrogate at index {e.start}") from None


def bool_arg(v, what: str) -> bool:
    """v as a bool, or InvalidArgument naming what: int() had turned "no"
    into a ValueError naming nothing and a truthiness test "no" into True.
    Only True and False (numpy's bool too) are taken."""
    if v is True or v is False or type(v).__name__ == "bool_":
        return bool(v)
    from ._errors import InvalidArgument
    raise InvalidArgument(f"{what} must be True or False, got {v!r}")


def int_arg(v, what: str, lo: int, hi: int) -> int:
    """v as an int in [lo, hi], or InvalidArgument naming what: cffi's
    OverflowError / TypeError ("integer ... does not fit 'int'") named no
    argument, and a float or a str passed through int() elsewhere. Anything
    with __index__ (numpy integers) is an integer; bool is not."""
    import operator
    try:
        i = None if isinstance(v, bool) else operator.index(v)
    except TypeError:
        i = None
    if i is None or not lo <= i <= hi:
        from ._errors import InvalidArgument
        raise InvalidArgument(f"{what} must be an integer in [{lo}, {hi}], got {v!r}")
    return i


def real_arg(v, what: str) -> float:
    """v as a float if it is a real number (numpy floats, Fraction), else
    InvalidArgument naming what (a str or None had raised cffi's TypeError)."""
    import numbers
    from ._errors import InvalidArgument
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise InvalidArgument(f"{what} must be a number, got {v!r}")
    try:
        return float(v)
    except OverflowError:  # an int past a double's range (10**400 had raised OverflowError naming nothing)
        raise InvalidArgument(f"{what} is out of range, got {v!r:.40}") from None


def c_float_arg(v: float, what: str, zero_ok: bool = True) -> float:
    """v if a C float holds it (NaN and inf are left to the library's
    checks), else InvalidArgument naming it as given: narrowed, 1e300 had
    been refused as "inf", and where 0 is out of range (zero_ok False)
    1e-50 as "0" (elsewhere it means what 0 does: a temperature of 1e-50
    is greedy, as the C sampler takes a denormal one)."""
    import math
    import struct
    from ._errors import InvalidArgument
    if math.isfinite(v):
        try:
            narrowed = struct.unpack("f", struct.pack("f", v))[0]
        except OverflowError:
            narrowed = math.inf
        if math.isinf(narrowed) or (not zero_ok and narrowed == 0.0 and v != 0.0):
            raise InvalidArgument(f"{what} = {v!r} is outside a C float's range (magnitudes from about 1.4e-45 to 3.4e38)")
    return v


INT_MAX = 2**31 - 1
MAX_THREADS = 256  # kvstitch.h KVS_MAX_THREADS


def listed(v, what: str, expected: str) -> list:
    """v as a list, or InvalidArgument naming what (an int or None had
    raised TypeError: 'int' object is not iterable)."""
    try:
        return list(v)
    except TypeError:
        from ._errors import InvalidArgument
        raise InvalidArgument(f"{what} must be {expected}, got {v!r:.80}") from None


def user_path(p, what: str):
    """p with "~" expanded, its type and bytes checked first as c_path checks
    them (an int had raised os.fspath's TypeError, naming no argument)."""
    import os
    c_path(p, what)
    return os.path.expanduser(os.fspath(p))


def c_path(p, what: str) -> bytes:
    """A file system path (str, bytes or os.PathLike) as the C library takes
    it: os.fsencode, so a name that is not UTF-8 (os.listdir gives it with
    surrogate escapes, or as bytes) reaches the file it names; NUL refused."""
    import os
    from ._errors import InvalidArgument, Utf8Error
    try:
        b = os.fsencode(p)
    except UnicodeEncodeError as e:  # a lone surrogate that no byte escapes (it had been a bare UnicodeEncodeError)
        raise Utf8Error(f"{what} is not valid UTF-8: a lone surrogate at index {e.start}") from None
    except TypeError:
        raise InvalidArgument(f"{what} must be a str, bytes or os.PathLike, got {type(p).__name__}") from None
    if b"\0" in b:
        raise InvalidArgument(f"{what} contains a NUL character")
    return b


def struct_dict(cdata) -> dict:
    """Every field of a C struct of plain numbers, by the header's own field list."""
    t = ffi.typeof(cdata)
    if t.kind == "pointer":
        t = t.item
    return {name: getattr(cdata, name) for name, _ in t.fields}
