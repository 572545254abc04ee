"""Starts `kvstitch serve` on a free loopback port for the suite, and stops it
(SIGTERM, then SIGKILL after a bound) even when tests fail."""
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest
import requests

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests"))  # redis_server.py, shared with python/tests
CLI = os.environ.get("KVSTITCH_CLI") or os.path.join(ROOT, "build", "kvstitch")
MODEL = os.environ.get("KVSTITCH_MODEL")
QUICK = os.environ.get("KVSTITCH_TEST_QUICK") == "1"
API_KEY = "test-key-7f3a"
# Sanitizer builds run several times slower: every wait scales with this.
SLOW = 4.0 if "/san/" in CLI else 1.0


class Server:
    def __init__(self, *args, api_key=True, prefix=(), env=None, model=None):
        assert model or MODEL, "KVSTITCH_MODEL is not set (run through make test)"
        self.tmp = tempfile.mkdtemp(prefix="kvs-serve-")
        self.log_path = os.path.join(self.tmp, "server.log")
        self.final_log = None  # the log's text once stop() has removed tmp
        # prefix: a command the server runs under (setpriv, to meet file modes as root);
        # env: variables added to the server's environment (the test hooks, KVSTITCH_TEST_*)
        # model: another GGUF than KVSTITCH_MODEL's (a patched tiny model)
        cmd = list(prefix) + [CLI, "serve", "-m", model or MODEL, "--host", "127.0.0.1", "--port", "0", "-t", "2"]
        cmd += list(args)
        if api_key:
            key_file = os.path.join(self.tmp, "key")
            with open(key_file, "w") as f:
                f.write(API_KEY + "\n")
            cmd += ["--api-key-file", key_file]
        self.key = API_KEY if api_key else None
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, **env) if env else None)
        self.port = self._wait_ready(timeout=120 * SLOW)
        self.url = "http://127.0.0.1:%d" % self.port

    def _wait_ready(self, timeout):
        t0 = time.time()
        while time.time() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: " + self.read_log())
            m = re.search(r"ready on http://127\.0\.0\.1:(\d+)", self.read_log())
            if m:
                return int(m.group(1))
            time.sleep(0.1)
        self.stop()
        raise RuntimeError("server not ready after %.0f s: %s" % (timeout, self.read_log()))

    def read_log(self):
        if self.final_log is not None:
            return self.final_log
        with open(self.log_path) as f:
            return f.read()

    def headers(self):
        return {"Authorization": "Bearer " + self.key} if self.key else {}

    def post(self, path, body, **kw):
        return requests.post(self.url + path, json=body, headers=self.headers(), timeout=300 * SLOW, **kw)

    def get(self, path, **kw):
        return requests.get(self.url + path, headers=self.headers(), timeout=60 * SLOW, **kw)

    def stop(self, timeout=60):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout * SLOW)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if self.final_log is None:  # keep the text for messages, leave no scratch behind
            self.final_log = self.read_log()
            shutil.rmtree(self.tmp, ignore_errors=True)
        return self.proc.returncode


def metrics(server, *names):
    """The values of /metrics samples (names with their labels), read from
    one scrape, so that they are of one moment."""
    text = requests.get(server.url + "/metrics", timeout=30).text.splitlines()
    values = []
    for name in names:
        found = [float(line.split()[-1]) for line in text if line.startswith(name + " ")]
        if not found:
            raise AssertionError(name)
        values.append(found[0])
    return values


def metric(server, name):
    """The value of one /metrics sample (name with its labels)."""
    return metrics(server, name)[0]


@pytest.fixture(scope="session")
def server():
    s = Server("--slots", "4", "--max-queue", "64", "--ctx", "2048", "--max-body", "262144")
    yield s
    rc = s.stop()
    assert rc == 0, "server exit code %s: %s" % (rc, s.read_log()[-2000:])


@pytest.fixture(scope="session")
def client(server):
    import openai
    return openai.OpenAI(base_url=server.url + "/v1", api_key=API_KEY, max_retries=0, timeout=300 * SLOW)
