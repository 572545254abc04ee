"""Builds the C library with the project's Makefile and puts it (with its
header, which the binding parses) inside the package as kvstitch/_native/.

From a source tree (python/ inside the kvstitch checkout): `make
build/libkvstitch.so` at the root. Outside one (an sdist): nothing is
bundled and the package uses an installed library (`make install`, found
with pkg-config) or $KVSTITCH_LIB at import time.
"""
import os
import re
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
HEADER = ROOT / "include" / "kvstitch.h"


def version() -> str:
    for hdr in (HEADER, HERE / "kvstitch" / "_native" / "kvstitch.h"):
        if hdr.exists():
            text = hdr.read_text()
            parts = [re.search(r"#define KVS_VERSION_%s (\d+)" % p, text).group(1)
                     for p in ("MAJOR", "MINOR", "PATCH")]
            return ".".join(parts)
    return "0.0.0"


class BuildWithLibrary(build_py):
    def run(self):
        super().run()
        if not (ROOT / "Makefile").exists() or not HEADER.exists():
            print("kvstitch: no source tree around python/: using an installed libkvstitch.so")
            return
        jobs = os.environ.get("KVSTITCH_MAKE_JOBS", str(min(4, os.cpu_count() or 1)))
        subprocess.run(["make", "-C", str(ROOT), "-j" + jobs, "build/libkvstitch.so"], check=True)
        native = Path(self.build_lib) / "kvstitch" / "_native"
        native.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / "build" / "libkvstitch.so", native / "libkvstitch.so")
        shutil.copy2(HEADER, native / "kvstitch.h")


setup(version=version(), cmdclass={"build_py": BuildWithLibrary})
