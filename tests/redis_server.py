"""A real redis-server for the Python suites (tests/serve, python/tests): on
a free loopback port, no persistence, maxmemory with allkeys-lru (as the
README recommends), killed when the context ends. scripts/install-deps.sh
installs redis-server."""
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextlib.contextmanager
def redis_server():
    """Yields (process, port) of a started redis-server."""
    exe = shutil.which("redis-server")
    assert exe, "redis-server is missing: run scripts/install-deps.sh"
    d = tempfile.mkdtemp(prefix="kvs-redis-")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", d, "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.time()
        while not ping(port):
            assert proc.poll() is None and time.time() - t0 < 20, "redis-server did not start"
            time.sleep(0.05)
        yield proc, port
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(d, ignore_errors=True)
