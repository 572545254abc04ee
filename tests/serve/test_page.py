"""The chat page (GET /) in headless Chromium, driven over the DevTools
protocol: type a question, send it, wait for the streamed answer, then check
the rendered DOM (the answer, the prompt coloured by KV source, the timings)
and save a screenshot under bench/results/. Skipped when Debian's chromium
is not installed (scripts/install-deps.sh installs it)."""
import base64
import json
import os
import shutil
import subprocess
import tempfile
import time

import pytest
import requests

from conftest import SLOW

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Tab:
    def __init__(self, ws_url):
        import websocket
        self.ws = websocket.create_connection(ws_url, timeout=60 * SLOW, suppress_origin=True)
        self.next_id = 0

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def eval(self, js):
        r = self.call("Runtime.evaluate", expression=js, returnByValue=True, awaitPromise=True)
        return r["result"].get("value")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (scripts/install-deps.sh)")
def test_page_in_headless_chromium(server, client):
    profile = tempfile.mkdtemp(prefix="kvs-chromium-")
    proc = subprocess.Popen([CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                             "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
                             "--user-data-dir=" + profile, "--window-size=1280,900", "about:blank"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        port_file = os.path.join(profile, "DevToolsActivePort")
        t0 = time.time()
        while not os.path.exists(port_file) or not open(port_file).read().strip():
            assert time.time() - t0 < 60 * SLOW and proc.poll() is None, "chromium did not start"
            time.sleep(0.1)
        port = int(open(port_file).read().split()[0])
        pages = [t for t in requests.get("http://127.0.0.1:%d/json/list" % port, timeout=30).json()
                 if t["type"] == "page"]
        tab = Tab(pages[0]["webSocketDebuggerUrl"])
        tab.call("Page.enable")
        tab.call("Page.navigate", url=server.url + "/")
        while tab.eval("document.readyState") != "complete" or not tab.eval("!!document.getElementById('send')"):
            assert time.time() - t0 < 60 * SLOW
            time.sleep(0.1)
        # A system-like first turn that later turns re-use, then the question.
        tab.eval("document.getElementById('key').value = %s" % json.dumps(server.key))
        for q in ["What is the capital of France?", "And the capital of Italy?"]:
            tab.eval("document.getElementById('q').value = %s" % json.dumps(q))
            tab.eval("document.getElementById('send').click()")
            n = tab.eval("document.querySelectorAll('.turn.assistant').length")
            t1 = time.time()
            while not tab.eval("(() => { const a = document.querySelectorAll('.turn.assistant'); "
                               "return a.length === %d && a[a.length - 1].classList.contains('done'); })()" % n):
                assert time.time() - t1 < 180 * SLOW, "no answer in the page"
                time.sleep(0.2)
        answers = tab.eval("[...document.querySelectorAll('.turn.assistant')].map(e => e.textContent)")
        assert "Paris" in answers[0] and answers[1].strip()
        spans = tab.eval("[...document.querySelectorAll('#prompt span')].map(s => [s.className, s.textContent])")
        classes = [c for c, _ in spans]
        # The second turn's prompt: the first turn came from the cache, the new message was computed.
        assert classes[0] == "src-cached" and "src-computed" in classes, spans
        assert "capital of Italy" in "".join(t for c, t in spans if c == "src-computed")
        assert "capital of France" in "".join(t for c, t in spans if c == "src-cached")
        timings = tab.eval("document.getElementById('timings').textContent")
        assert "TTFT ms" in timings
        shot = tab.call("Page.captureScreenshot", format="png")
        # Into a scratch file, so that a test run leaves the tree as it was;
        # KVSTITCH_PAGE_SHOT=bench/results/serve-page.png refreshes the README's.
        shot_dir = None if os.environ.get("KVSTITCH_PAGE_SHOT") else tempfile.mkdtemp(prefix="kvs-page-")
        out = os.environ.get("KVSTITCH_PAGE_SHOT") or os.path.join(shot_dir, "page.png")
        try:
            with open(out, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
            assert os.path.getsize(out) > 10000
        finally:
            if shot_dir:
                shutil.rmtree(shot_dir, ignore_errors=True)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(profile, ignore_errors=True)
