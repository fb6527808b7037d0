"""oslo serve over real HTTP, with real clients (requests, and OpenAI's own
Python package): OpenAI's routes against `oslo generate` on each prompt
alone, streaming, chat with a chat template, seeded sampling, stop strings,
many concurrent clients, a client that disconnects (its request is
cancelled), hostile input (every bad body gets an OpenAI-style JSON error,
never a crash or a hang), an API key, metrics, SIGTERM, and two ranks under
oslo-run (equal to one rank; a rank killed mid-stream ends the stream and
the server, never a hang).

Usage: test_serve_http.py OSLO OSLO_RUN MODEL_DIR CHAT_TEMPLATE WORKDIR
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

try:
    import requests
    import openai
except ImportError as e:  # the tests' venv has them (tools/test-venv.sh)
    print(f"SKIP: {e}")
    sys.exit(77)

OSLO, OSLO_RUN, MODEL, TEMPLATE, WORK = sys.argv[1:6]
os.makedirs(WORK, exist_ok=True)
FAILS = []
CHECKS = 0


def check(cond, what):
    global CHECKS
    CHECKS += 1
    if not cond:
        FAILS.append(what)
        print("FAIL:", what, flush=True)


class Server:
    """`oslo serve` (under oslo-run when ranks > 1) on a free port."""

    def __init__(self, name, *extra, ranks=1):
        self.log = open(os.path.join(WORK, name + ".log"), "w+")
        cmd = [OSLO, "serve", "--model", MODEL, "--port", "0", "--served-model-name", "tiny",
               "--kv-blocks", "96", "--block-size", "4", "--max-seqs", "8",
               "--max-step-tokens", "64", "--threads", "1", "--timeout", "20", *extra]
        if ranks > 1:
            cmd = [OSLO_RUN, "--nproc-per-node", str(ranks)] + cmd
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, text=True,
                                     start_new_session=True)
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if not m:
            self.proc.kill()
            self.log.seek(0)
            raise SystemExit(f"{name}: no address on stdout ({line!r}); log:\n{self.log.read()}")
        self.url = m.group(1)
        self.host, self.port = self.url[len("http://"):].split(":")
        self.port = int(self.port)

    def post(self, path, body, **kw):
        data = body if isinstance(body, (bytes, str)) else json.dumps(body)
        return requests.post(self.url + path, data=data, timeout=60,
                             headers={"Content-Type": "application/json", **kw.pop("headers", {})},
                             **kw)

    def metrics(self):
        text = requests.get(self.url + "/metrics", timeout=10).text
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc.poll() is None:
            if sig == signal.SIGKILL:  # the whole session: oslo-run and its ranks
                os.killpg(self.proc.pid, sig)
            else:
                self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return None


def generate_alone(prompt, n):
    """`oslo generate` on one prompt alone (greedy): the prompt and its continuation."""
    out = subprocess.run([OSLO, "generate", "--model", MODEL, "--prompt", prompt,
                          "--max-new-tokens", str(n), "--threads", "1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout[len("[0] "):].rstrip("\n")


def error_of(r, status, code=None, param=None, what=""):
    check(r.status_code == status, f"{what}: HTTP {r.status_code}, expected {status}: {r.text}")
    try:
        e = r.json()["error"]
    except Exception:
        check(False, f"{what}: the body is not an OpenAI error: {r.text!r}")
        return
    check(isinstance(e.get("message"), str) and e["message"], f"{what}: no message: {e}")
    check("type" in e, f"{what}: no type: {e}")
    if code is not None:
        check(e.get("code") == code, f"{what}: code {e.get('code')!r}, expected {code!r}")
    if param is not None:
        check(e.get("param") == param, f"{what}: param {e.get('param')!r}, expected {param!r}")


PROMPTS = ["Hello world", "The quick brown fox", "Once upon a time", "a b c d e f",
           "Serving engines batch", "x", "To be or not to be", "In the beginning"]


def basics(s):
    r = requests.get(s.url + "/health", timeout=10)
    check(r.status_code == 200 and r.json()["status"] == "ok", f"/health: {r.text}")
    r = requests.get(s.url + "/v1/models", timeout=10).json()
    check(r["object"] == "list" and r["data"][0]["id"] == "tiny", f"/v1/models: {r}")
    check(requests.get(s.url + "/v1/models/tiny", timeout=10).json()["id"] == "tiny", "model card")
    error_of(requests.get(s.url + "/v1/models/other", timeout=10), 404, "model_not_found",
             what="unknown model card")

    # Greedy completions equal `oslo generate` on each prompt alone.
    for p in PROMPTS[:3]:
        r = s.post("/v1/completions", {"model": "tiny", "prompt": p, "max_tokens": 12,
                                       "temperature": 0, "echo": True})
        check(r.status_code == 200, f"completion: {r.text}")
        j = r.json()
        want = generate_alone(p, 12)
        check(j["choices"][0]["text"] == want,
              f"greedy {p!r}: {j['choices'][0]['text']!r} != generate's {want!r}")
        check(j["object"] == "text_completion" and j["id"].startswith("cmpl-"), f"shape: {j}")
        u = j["usage"]
        check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and
              0 < u["completion_tokens"] <= 12, f"usage: {u}")
        check(j["choices"][0]["finish_reason"] in ("length", "stop"), f"finish: {j}")

    # OpenAI's client: the same text streamed and not.
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0)
    full = client.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=20, temperature=0)
    pieces, finishes = [], []
    for c in client.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=20,
                                       temperature=0, stream=True,
                                       stream_options={"include_usage": True}):
        if c.choices:
            pieces.append(c.choices[0].text)
            finishes.append(c.choices[0].finish_reason)
        else:
            usage = c.usage
    check("".join(pieces) == full.choices[0].text,
          f"streamed {''.join(pieces)!r} != whole {full.choices[0].text!r}")
    check(finishes[-1] == full.choices[0].finish_reason and
          all(f is None for f in finishes[:-1]), f"stream finishes {finishes}")
    check(usage.completion_tokens == full.usage.completion_tokens, "stream usage")

    # Prompts as token ids, several prompts, n > 1 with a seed.
    ids = client.completions.create(model="tiny", prompt=[10, 20, 30], max_tokens=5,
                                    temperature=0)
    check(len(ids.choices) == 1 and ids.usage.prompt_tokens == 3, f"id prompt: {ids}")
    many = client.completions.create(model="tiny", prompt=PROMPTS[:3], max_tokens=6,
                                     temperature=0)
    check([c.index for c in many.choices] == [0, 1, 2], "several prompts: indexes")
    for i, c in enumerate(many.choices):
        one = client.completions.create(model="tiny", prompt=PROMPTS[i], max_tokens=6,
                                        temperature=0)
        check(c.text == one.choices[0].text, f"several prompts: choice {i}")
    a = client.completions.create(model="tiny", prompt="Seeds", max_tokens=10, seed=7, n=2,
                                  temperature=0.9, top_p=0.9)
    b = client.completions.create(model="tiny", prompt="Seeds", max_tokens=10, seed=7,
                                  temperature=0.9, top_p=0.9)
    check(a.choices[0].text == b.choices[0].text, "seeded sampling repeats (choice 0 = seed)")
    c8 = client.completions.create(model="tiny", prompt="Seeds", max_tokens=10, seed=8,
                                   temperature=0.9, top_p=0.9)
    check(a.choices[1].text == c8.choices[0].text, "choice 1 samples with seed + 1")

    # Stop strings: the text ends before the stop string, finish "stop".
    text = full.choices[0].text
    if len(text) > 6:
        stop = text[3:6]
        r = client.completions.create(model="tiny", prompt=PROMPTS[3], max_tokens=20,
                                      temperature=0, stop=[stop])
        check(r.choices[0].text == text[:text.index(stop)] and
              r.choices[0].finish_reason == "stop", f"stop {stop!r}: {r.choices[0]}")
    # Chat without a chat template: a clear 400.
    error_of(s.post("/v1/chat/completions", {"model": "tiny",
                                              "messages": [{"role": "user", "content": "hi"}]}),
             400, "chat_template_missing", what="chat without a template")


def hostile(s):
    c = "/v1/completions"
    good = {"model": "tiny", "prompt": "hi", "max_tokens": 4}
    error_of(s.post(c, b'{"model": "tiny", "prompt": '), 400, "invalid_json", what="cut JSON")
    error_of(s.post(c, b"not json at all"), 400, "invalid_json", what="not JSON")
    error_of(s.post(c, b'{"model": "tiny", "prompt": "\xff\xfe bad"}'), 400, "invalid_json",
             what="bad UTF-8")
    error_of(s.post(c, b"[1, 2]"), 400, what="an array body")
    error_of(s.post(c, b"[" * 200000 + b"]" * 200000), 400, what="nested 200000 deep")
    error_of(s.post(c, dict(good, model="gpt-4")), 404, "model_not_found", "model", "unknown model")
    error_of(s.post(c, dict(good, max_tokens=10**12)), 400, "context_length_exceeded",
             "max_tokens", "huge max_tokens")
    error_of(s.post(c, dict(good, max_tokens=2**70)), 400, what="max_tokens past int64")
    error_of(s.post(c, dict(good, max_tokens="abc")), 400, param="max_tokens", what="text max")
    error_of(s.post(c, dict(good, max_tokens=0)), 400, param="max_tokens", what="max_tokens 0")
    error_of(s.post(c, dict(good, temperature=5)), 400, param="temperature", what="temperature 5")
    error_of(s.post(c, dict(good, top_p=0)), 400, param="top_p", what="top_p 0")
    error_of(s.post(c, dict(good, n=0)), 400, param="n", what="n 0")
    error_of(s.post(c, dict(good, frobnicate=1)), 400, param="frobnicate", what="unknown field")
    error_of(s.post(c, dict(good, prompt="")), 400, param="prompt", what="empty prompt")
    error_of(s.post(c, dict(good, prompt=[])), 400, param="prompt", what="empty id list")
    error_of(s.post(c, dict(good, prompt=[1, 99999])), 400, param="prompt", what="id outside")
    error_of(s.post(c, dict(good, prompt=[1, -1])), 400, param="prompt", what="negative id")
    error_of(s.post(c, dict(good, prompt={"a": 1})), 400, param="prompt", what="object prompt")
    error_of(s.post(c, dict(good, prompt="x" * 5000)), 400, "context_length_exceeded",
             what="prompt past the context")
    error_of(s.post(c, dict(good, logprobs=3)), 400, param="logprobs", what="logprobs")
    error_of(s.post(c, dict(good, presence_penalty=1)), 400, param="presence_penalty",
             what="presence_penalty")
    error_of(s.post(c, dict(good, stop=["ok", 3])), 400, param="stop", what="bad stop")
    error_of(s.post(c, dict(good, stop="")), 400, param="stop", what="empty stop")
    error_of(s.post(c, dict(good, stream_options={"include_usage": True})), 400,
             param="stream_options", what="stream_options without stream")
    error_of(s.post(c, {"prompt": "hi"}), 400, param="model", what="no model")
    error_of(s.post(c, b"{}" + b" " * (9 << 20)), 413, what="9 MiB body")
    error_of(requests.get(s.url + "/nope", timeout=10), 404, what="unknown route")
    error_of(requests.get(s.url + c, timeout=10), 404, what="GET on a POST route")
    ch = "/v1/chat/completions"
    error_of(s.post(ch, {"model": "tiny", "messages": []}), 400, param="messages",
             what="no messages")
    error_of(s.post(ch, {"model": "tiny", "messages": [{"role": "wizard", "content": "x"}]}),
             400, param="messages[0].role", what="bad role")
    error_of(s.post(ch, {"model": "tiny", "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
        400, param="messages[0].content", what="image part")
    # A raw socket: garbage, then a truncated request; the server answers
    # or closes, and keeps serving.
    for junk in (b"\x00\x01\x02garbage\r\n\r\n", b"POST /v1/completions HTTP/1.1\r\n"
                 b"Content-Length: 100\r\n\r\n{\"model\""):
        with socket.create_connection((s.host, s.port), timeout=10) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            try:
                sock.recv(4096)
            except OSError:
                pass
    # A client that stalls mid-request (slowloris) is dropped after
    # --http-timeout (3 s here), not held forever.
    with socket.create_connection((s.host, s.port), timeout=20) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
        t0 = time.time()
        try:
            data = sock.recv(4096)
        except OSError:
            data = b""
        waited = time.time() - t0
        check(2 <= waited <= 15, f"a stalled client dropped after {waited:.1f} s ({data[:60]!r})")
    r = s.post(c, good)
    check(r.status_code == 200, f"still serving after hostile input: {r.text}")
    m = s.metrics()
    check(m.get('oslo_http_errors_total{status="400"}', 0) >= 20, "metrics count the 400s")


def concurrent(s):
    # Each prompt's greedy text alone first, then all at once from 32 clients.
    body = lambda p: {"model": "tiny", "prompt": p, "max_tokens": 16, "temperature": 0}
    alone = {p: s.post("/v1/completions", body(p)).json()["choices"][0]["text"] for p in PROMPTS}
    work = [PROMPTS[i % len(PROMPTS)] for i in range(32)]

    def one(i):
        p = work[i]
        if i % 2:
            r = s.post("/v1/completions", dict(body(p), stream=True), stream=True)
            text = ""
            for line in r.iter_lines():
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    text += json.loads(line[6:])["choices"][0]["text"]
            return p, text
        return p, s.post("/v1/completions", body(p)).json()["choices"][0]["text"]

    with ThreadPoolExecutor(32) as ex:
        results = list(ex.map(one, range(32)))
    bad = [(p, t) for p, t in results if t != alone[p]]
    check(not bad, f"32 concurrent clients: {len(bad)} differ from alone, e.g. {bad[:2]}")
    m = s.metrics()
    check(m["oslo_requests_running"] == 0 and m["oslo_kv_blocks_used"] == 0,
          f"idle after the burst: running {m['oslo_requests_running']}, "
          f"blocks {m['oslo_kv_blocks_used']}")


def disconnect_leaves_nothing(s):
    """A client gone mid-stream: whether its request was cancelled or had
    already finished (the tiny model is fast), nothing of it stays."""
    r = s.post("/v1/completions", {"model": "tiny", "prompt": "Going away", "max_tokens": 100,
                                   "temperature": 0, "ignore_eos": True, "stream": True},
               stream=True)
    for line in r.iter_lines():
        if line.startswith(b"data: "):
            break
    r.close()  # not read to the end: urllib3 closes the connection
    t0 = time.time()
    while time.time() - t0 < 20:
        m = s.metrics()
        if m["oslo_requests_running"] == 0 and m["oslo_kv_blocks_used"] == 0:
            break
        time.sleep(0.2)
    check(m["oslo_requests_running"] == 0 and m["oslo_kv_blocks_used"] == 0,
          "nothing left of a client gone mid-stream")


def find_rank(server, rank):
    """The pid of `rank` of a server under oslo-run."""
    ranks = subprocess.run(["pgrep", "-f", "oslo serve"], capture_output=True, text=True)
    for pid in ranks.stdout.split():
        try:
            env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in env and pid != str(server.proc.pid):
            return int(pid)
    return None


def disconnect(s, auth):
    """A client that goes away while its request waits is noticed (the
    keep-alive written while waiting fails) and its request cancelled. Rank
    1 is stopped (SIGSTOP) meanwhile, so that the request cannot finish
    first."""
    victim = find_rank(s, 1)
    check(victim is not None, "found rank 1")
    if not victim:
        return
    before = s.metrics().get('oslo_requests_finished_total{reason="cancelled"}', 0)
    os.kill(victim, signal.SIGSTOP)
    try:
        r = s.post("/v1/completions", {"model": "tiny", "prompt": "Going away",
                                       "max_tokens": 100, "temperature": 0, "stream": True},
                   headers=auth, stream=True)
        check(r.status_code == 200, f"stream accepted: {r.status_code}")
        r.close()
        time.sleep(3.5)  # two keep-alives: the second write fails
    finally:
        os.kill(victim, signal.SIGCONT)
    t0 = time.time()
    while time.time() - t0 < 20:
        m = s.metrics()
        if m.get('oslo_requests_finished_total{reason="cancelled"}', 0) > before and \
                m["oslo_requests_running"] == 0:
            break
        time.sleep(0.2)
    check(m.get('oslo_requests_finished_total{reason="cancelled"}', 0) > before,
          "a client that disconnects cancels its request")
    check(m["oslo_kv_blocks_used"] == 0, "its blocks are freed")


def chat(s):
    client = openai.OpenAI(base_url=s.url + "/v1", api_key="sekret", max_retries=0)
    msgs = [{"role": "user", "content": "Hello there"}]
    r = client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10, temperature=0)
    rendered = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n")
    want = s.post("/v1/completions", {"model": "tiny", "prompt": rendered, "max_tokens": 10,
                                      "temperature": 0},
                  headers={"Authorization": "Bearer sekret"}).json()
    check(r.choices[0].message.role == "assistant" and
          r.choices[0].message.content == want["choices"][0]["text"],
          f"chat = completion of the rendered template: {r.choices[0].message.content!r} vs "
          f"{want['choices'][0]['text']!r}")
    # The chat prompt is not given BOS: prompt_tokens counts the render.
    check(r.usage.prompt_tokens <= want["usage"]["prompt_tokens"], "chat usage")
    parts = []
    first = None
    for c in client.chat.completions.create(model="tiny", messages=msgs, max_tokens=10,
                                            temperature=0, stream=True):
        if first is None:
            first = c.choices[0].delta.role
        parts.append(c.choices[0].delta.content or "")
    check(first == "assistant" and "".join(parts) == r.choices[0].message.content,
          "chat streamed = whole")
    # Content as parts, "developer" as system.
    r2 = client.chat.completions.create(
        model="tiny", max_tokens=10, temperature=0,
        messages=[{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}])
    check(r2.choices[0].message.content == r.choices[0].message.content, "text parts")
    # The API key.
    error_of(requests.post(s.url + "/v1/completions", timeout=10,
                           json={"model": "tiny", "prompt": "x"}), 401, "invalid_api_key",
             what="no API key")
    check(requests.get(s.url + "/health", timeout=10).status_code == 200, "/health needs no key")


def main():
    a = Server("one", "--http-timeout", "3")
    try:
        basics(a)
        hostile(a)
        concurrent(a)
        disconnect_leaves_nothing(a)
        # SIGTERM with a stream in flight: it ends with "abort"; exit 0.
        r = a.post("/v1/completions", {"model": "tiny", "prompt": "Long", "max_tokens": 120,
                                       "temperature": 0, "ignore_eos": True, "stream": True},
                   stream=True)
        lines = r.iter_lines()
        next(l for l in lines if l.startswith(b"data: "))
        rc_box = []
        t = threading.Thread(target=lambda: rc_box.append(a.stop(signal.SIGTERM)))
        t.start()
        finish = None
        for line in lines:
            if line.startswith(b"data: {"):
                finish = json.loads(line[6:])["choices"][0]["finish_reason"] or finish
        t.join()
        check(finish in ("abort", "length"), f"stream at SIGTERM ends with {finish!r}")
        check(rc_box == [0], f"SIGTERM: exit status {rc_box}")
    finally:
        a.stop(signal.SIGKILL)

    b = Server("two", "--chat-template", TEMPLATE, "--api-key", "sekret", ranks=2)
    try:
        chat(b)
        auth = {"Authorization": "Bearer sekret"}
        for p in PROMPTS[:3]:
            r = b.post("/v1/completions", {"model": "tiny", "prompt": p, "max_tokens": 12,
                                           "temperature": 0, "echo": True}, headers=auth)
            check(r.status_code == 200 and r.json()["choices"][0]["text"] == generate_alone(p, 12),
                  f"TP 2 greedy {p!r}: {r.text}")
        disconnect(b, auth)
        # Rank 1 killed mid-step: stopped first (SIGSTOP) so that the
        # step of the request below waits for it, then killed. The stream
        # ends (an error event, or the connection closes) and the whole
        # server stops: no hang.
        victim = find_rank(b, 1)
        check(victim is not None, "found rank 1")
        if victim:
            os.kill(victim, signal.SIGSTOP)
        r = b.post("/v1/completions", {"model": "tiny", "prompt": "Doomed", "max_tokens": 120,
                                       "temperature": 0, "ignore_eos": True, "stream": True},
                   headers=auth, stream=True)
        lines = r.iter_lines()
        time.sleep(1)
        t0 = time.time()
        if victim:
            os.kill(victim, signal.SIGKILL)
        ended = None
        try:
            for line in lines:
                if line.startswith(b"data: {"):
                    j = json.loads(line[6:])
                    if "error" in j:
                        ended = "error"
                    elif j["choices"][0]["finish_reason"]:
                        ended = j["choices"][0]["finish_reason"]
        except requests.exceptions.RequestException:
            ended = "connection closed"
        check(ended != "length", f"a killed rank ends the stream early ({ended})")
        rc = b.proc.wait(60)
        check(rc != 0, f"the server stops with a failure (exit {rc})")
        check(time.time() - t0 < 60, "no hang")
        print(f"rank 1 killed: stream ended by {ended!r}, oslo-run exit {rc}, "
              f"{time.time() - t0:.1f} s")
    finally:
        b.stop(signal.SIGKILL)
    print(f"{CHECKS} checks, {len(FAILS)} failed")
    sys.exit(1 if FAILS else 0)


if __name__ == "__main__":
    main()
