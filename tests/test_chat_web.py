"""The chat page's server: the reply streamed as server-sent events, the conversation kept and
reset, 4xx answers to malformed, oversized and concurrent requests (and the server keeps
serving), requests another site's page could make refused (403, 415), a client that goes away
stops the generation; then the page in a real browser
(Playwright driving Debian's Chromium, as the website test does): type, see the streamed
reply with its calculator call, reset."""
import contextlib
import json
import shutil
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi",
                    reason="the web chat's packages are not installed (pip install fastapi uvicorn "
                    "sse-starlette)")
import anyio  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from chat_helpers import TOK, Cycling, ids_of  # noqa: E402
from course_lib.chat.engine import NO_REPLY, ChatEngine  # noqa: E402
from course_lib.chat.template import CALC, CALC_END, END  # noqa: E402
from course_lib.chat.web import MAX_BODY_BYTES, ChatServer, check_port, create_app  # noqa: E402

REPLY = ids_of(CALC, "2+3", CALC_END, "5", END)


ADDRESS = "http://127.0.0.1:8000"  # create_app's default address: the Host its requests must name
JSON = {"content-type": "application/json"}


def client_for(model=None):
    engine = ChatEngine(model or Cycling(REPLY), TOK)
    app = create_app(engine)
    return TestClient(app, base_url=ADDRESS), app.state.server, engine


def events(response_text: str) -> list[tuple[str, str]]:
    """(event, data) pairs of a server-sent events stream."""
    out = []
    for block in response_text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line
                      and not line.startswith(":"))
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out


def test_the_page_and_a_streamed_reply_with_its_calculator_call():
    client, _, engine = client_for()
    page = client.get("/")
    assert page.status_code == 200 and '<form id="form">' in page.text and 'id="reset"' in page.text
    with client.stream("POST", "/api/chat", json={"message": "What is 2+3?"}) as response:
        assert (response.status_code == 200
                and response.headers["content-type"].startswith("text/event-stream"))
        got = events("".join(response.iter_text()))
    assert got == [("tool", "2+3"), ("result", "5"), ("text", "5"), ("done", "")]
    answer = client.get("/api/history").json()
    history = answer["messages"]
    assert history == engine.messages and history[0] == {"role": "user", "content": "What is 2+3?"}
    # 17-M3
    assert (answer["about"] == engine.about()
            and "start each new topic with a reset" in answer["about"])
    assert (client.post("/api/reset", headers=JSON).json() == {"messages": []}
            and engine.messages == [])


@pytest.mark.parametrize("body, status, phrase", [
    (b"not json", 400, "must be JSON"),
    (json.dumps({"text": "hi"}).encode(), 400, "must be JSON"),
    (json.dumps(["hi"]).encode(), 400, "must be JSON"),
    (json.dumps({"message": 5}).encode(), 422, "non-empty text"),
    (json.dumps({"message": "   "}).encode(), 422, "non-empty text"),
    (json.dumps({"message": "caf\u00e9"}).encode(), 422, "unknown character"),
    (json.dumps({"message": "x" * 100}).encode(), 422, "newest exchange alone"),
    (json.dumps({"message": "x" * (MAX_BODY_BYTES + 1)}).encode(), 413, "larger than"),
])
def test_bad_requests_get_a_4xx_and_the_server_keeps_serving(body, status, phrase):
    client, _, engine = client_for()
    response = client.post("/api/chat", content=body, headers={"content-type": "application/json"})
    assert response.status_code == status and phrase in response.json()["detail"]
    assert engine.messages == []
    with client.stream("POST", "/api/chat", json={"message": "2+3?"}) as response:
        assert events("".join(response.iter_text()))[-1] == ("done", "")


def test_a_body_without_a_declared_length_is_cut_at_the_limit_too():
    client, _, _ = client_for()
    chunks = (b"x" * 1000 for _ in range(20))  # sent chunked: no Content-Length
    response = client.post("/api/chat", content=chunks, headers=JSON)
    assert response.status_code == 413


def test_while_a_reply_is_written_others_get_a_clear_busy_answer():
    client, server, engine = client_for()
    server.lock.acquire()  # a reply under way
    try:
        response = client.post("/api/chat", json={"message": "Hi"})
        assert response.status_code == 429 and "busy" in response.json()["detail"]
        assert client.post("/api/reset", headers=JSON).status_code == 429
    finally:
        server.lock.release()
    assert client.post("/api/reset", headers=JSON).status_code == 200


def test_a_client_that_goes_away_stops_the_generation_and_frees_the_server():
    model = Cycling(ids_of("abcdefghij", END))
    engine = ChatEngine(model, TOK)
    server = ChatServer(engine)

    async def go_away_after_two_pieces():
        stream = server.events("Hi")
        first, second = await stream.__anext__(), await stream.__anext__()
        await stream.aclose()  # what sse-starlette does when the client disconnects
        return first, second

    first, second = anyio.run(go_away_after_two_pieces)
    assert ((first["event"], json.loads(first["data"])) == ("text", "a")
            and json.loads(second["data"]) == "b")
    assert model.calls == 2  # no token written after the client left
    assert (engine.messages[-1] == {"role": "assistant", "content": "ab"}
            and not server.lock.locked())


@pytest.mark.parametrize("body", [b"[" * 8000, b'{"message": ' + b"[" * 3000 + b"]" * 3000 + b"}"])
def test_json_nested_too_deeply_is_a_400_and_one_log_line(body, caplog):
    """Review 2026-11-28 W1 (rows 3-4): the parser's RecursionError
    is a bad request, not a 500 with a traceback."""
    client, _, engine = client_for()
    with caplog.at_level("WARNING", logger="course_lib.chat.web"):
        response = client.post("/api/chat", content=body, headers=JSON)
    assert response.status_code == 400 and "must be JSON" in response.json()["detail"]
    assert [r.getMessage() for r in caplog.records] == [
        f"chat page: refused a request body of JSON nested too deeply ({len(body)} bytes)"]
    assert engine.messages == []


EVIL = "https://evil.example"


@pytest.mark.parametrize("method, path, headers, status, phrase", [
    # review 2026-11-28 W3, rows 5-7: another site's
    # page, and a DNS-rebinding page (its own host name)
    ("POST", "/api/chat", {"origin": EVIL, "content-type": "text/plain"}, 403,
     "https://evil.example is refused"),
    ("POST", "/api/chat", {"origin": EVIL, **JSON}, 403, "only this server's own page"),
    ("POST", "/api/reset", {"origin": EVIL}, 403, "is refused"),
    # a sandboxed frame, a file:// page
    ("POST", "/api/reset", {"origin": "null"}, 403, "is refused"),
    ("GET", "/api/history", {"host": "evil.example:8000"}, 403,
     "'evil.example:8000' is not this server's address"),
    ("GET", "/", {"host": "127.0.0.1:9999"}, 403, "not this server's address"),
    ("GET", "/api/history", {"origin": "http://127.0.0.1:9999"}, 403, "is refused"),
    # rows 78-82: a POST whose body is not declared JSON
    # (what another site can send without asking first)
    ("POST", "/api/chat", {"content-type": "text/plain"}, 415,
     "Content-Type: application/json (this request's type: text/plain)"),
    ("POST", "/api/chat", {"content-type": "application/x-www-form-urlencoded"},
     415, "application/json"),
    ("POST", "/api/chat", {"content-type": "multipart/form-data; boundary=x"}, 415,
     "type: multipart/form-data)"),
    ("POST", "/api/chat", {"content-type": ""}, 415, "type: none)"),
    ("POST", "/api/chat", {"content-type": "application/xml"}, 415, "application/json"),
    ("POST", "/api/reset", {}, 415, "application/json"),
])
def test_requests_another_site_could_make_are_refused(method, path, headers, status, phrase):
    client, _, engine = client_for()
    # a conversation to protect
    with client.stream("POST", "/api/chat", json={"message": "2+3?"}) as response:
        response.read()
    before = list(engine.messages)
    body = json.dumps({"message": "What is 5+5?"}).encode() if method == "POST" else None
    response = client.request(method, path, content=body, headers=headers)
    assert response.status_code == status and phrase in response.json()["detail"], response.text
    assert engine.messages == before and len(before) == 2  # nothing said, nothing wiped


def test_the_page_s_own_requests_pass_and_it_may_not_be_framed():
    """The page's own origin (127.0.0.1 or localhost at the server's port) is accepted; the page
    sends X-Frame-Options and a CSP that allows its own script and style only (review row 83)."""
    client, _, engine = client_for()
    for name in ("127.0.0.1:8000", "localhost:8000"):
        own = {"host": name, "origin": f"http://{name}", **JSON}
        with client.stream("POST", "/api/chat", content=json.dumps({"message": "2+3?"}),
                           headers=own) as response:
            assert (response.status_code == 200
                    and events(response.read().decode())[-1] == ("done", ""))
        assert client.get("/api/history", headers={"host": name}).status_code == 200
    page = client.get("/")
    csp = page.headers["content-security-policy"]
    assert page.headers["x-frame-options"] == "DENY" and "frame-ancestors 'none'" in csp
    assert ("default-src 'none'" in csp and "'unsafe-inline'" not in csp
            and "script-src 'sha256-" in csp)
    assert client.post("/api/reset", headers=JSON).status_code == 200 and engine.messages == []
    # no port in Host
    on_port_80 = TestClient(create_app(engine, port=80), base_url="http://localhost")
    assert on_port_80.get("/api/history").status_code == 200


def test_a_server_on_every_interface_cannot_check_the_host_but_still_the_origin():
    engine = ChatEngine(Cycling(REPLY), TOK)
    client = TestClient(create_app(engine, host="0.0.0.0", port=8000),
                        base_url="http://192.168.1.7:8000")
    assert client.get("/api/history").status_code == 200
    assert client.post("/api/reset", headers={"origin": EVIL, **JSON}).status_code == 403
    assert client.post("/api/reset", headers={"origin": "http://192.168.1.7:8000",
                                              **JSON}).status_code == 200


def test_a_port_in_use_or_out_of_range_is_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        with pytest.raises(OSError, match="choose another --port"):
            check_port("127.0.0.1", s.getsockname()[1])
    with pytest.raises(ValueError, match=r"--port must be in \[1, 65535\]"):
        check_port("127.0.0.1", 0)


def test_a_host_that_is_not_this_machine_s_is_named_as_the_problem():
    """Review 2026-11-28 W4 (rows 84-85): a bad --host said "choose another --port"."""
    fix = (r": give an address of this machine: 127.0.0.1 \(the default: this machine only\), or "
           r"0.0.0.0")
    with pytest.raises(OSError, match=r"^--host no.such.host.invalid is not a host name this "
                                      r"machine knows \(.*\)" + fix):
        check_port("no.such.host.invalid", 18450)
    with pytest.raises(OSError, match=r"^--host 10.255.255.1 is not an address of this machine "
                                      r"\(.*\)" + fix):
        check_port("10.255.255.1", 18451)


@pytest.mark.slow  # a real process that loads the shipped chat model
def test_ctrl_c_stops_the_server_in_one_line_and_status_130():
    """Review 2026-11-28 W5 (row 86): Ctrl-C on the running server printed nothing and exited 0
    (uvicorn.run swallows the KeyboardInterrupt); now one line and 130, as every command."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "course_lib", "chat", "--web", "--port",
                             str(port), "--device", "cpu"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
                            env=dict(os.environ, PYTHONPATH=str(root), PYTHONUNBUFFERED="1"),
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert proc.stdout.readline().startswith(f"chat page on http://127.0.0.1:{port}/")
        deadline = time.time() + 60
        while True:  # the line comes before uvicorn listens: wait until it answers
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert time.time() < deadline, "the server never listened"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130 and err == "interrupted (Ctrl-C): the server stopped\n", (
        proc.returncode, err)


# --- the page in a real browser -------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def served(request):
    """The app on a free port of 127.0.0.1, served by uvicorn in a thread; a model that writes
    slowly enough (40 ms a token) that the reply arrives
    in pieces (or, parametrized, another reply)."""
    import uvicorn

    reply = getattr(request, "param", ids_of(CALC, "2+3", CALC_END, "The sum is 5.", END))
    engine = ChatEngine(Cycling(reply, delay=0.04), TOK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(engine, port=port), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", engine
    server.should_exit = True
    thread.join(10)


COUNT_UPDATES = """() => {
  window.updates = 0;
  new MutationObserver(() => window.updates++).observe(
    document.getElementById('log'), {childList: true, subtree: true, characterData: true});
}"""


@contextlib.contextmanager
def chat_page(url):
    """(playwright's sync_api, a page of Chromium at
    ``url``), or the test skipped with the reason."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: `apt-get install -y chromium`, or `make "
                    "browser`)")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="the playwright package is not installed")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM,
                                    args=["--no-sandbox", "--disable-gpu",
                                          "--disable-dev-shm-usage", "--no-first-run"])
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(url + "/")
        yield sync_api, page
        browser.close()


@pytest.mark.slow  # a real browser
def test_the_page_in_a_real_browser_type_see_the_streamed_reply_reset(served):
    url, engine = served
    with chat_page(url) as (sync_api, page):
        # what the context holds and drops
        sync_api.expect(page.locator("#about")).to_have_text(engine.about())
        page.evaluate(COUNT_UPDATES)
        page.fill("#message", "What is 2+3?")
        page.click("#send")
        reply = page.locator(".msg.assistant").last
        sync_api.expect(reply).to_have_text("[calc 2+3 = 5]The sum is 5.", timeout=20_000)
        assert page.locator(".msg.user").last.text_content() == "What is 2+3?"
        assert page.evaluate("window.updates") > 10  # the reply came token by token, not at once
        assert reply.locator(".tool").count() == 2  # the calculator call is shown
        page.reload()  # the conversation is kept by the server
        sync_api.expect(page.locator(".msg.assistant")).to_have_text("[calc 2+3 = 5]The sum is 5.")
        page.click("#reset")
        sync_api.expect(page.locator(".msg")).to_have_count(0)
        assert engine.messages == []


@pytest.mark.slow  # a real browser
@pytest.mark.parametrize("served", [ids_of(END)],
                         indirect=True)  # a model that ends its turn at once
def test_the_page_shows_an_empty_reply_a_refused_message_and_a_long_one_as_such(served):
    """An empty reply is said in words (not an empty box the reader takes for a broken page), a
    message the server refuses is marked as not sent, and a 5,000-character word does not widen
    the page (it was 47,641 px wide)."""
    url, engine = served
    with chat_page(url) as (sync_api, page):
        page.fill("#message", "How much is 7+5?")
        page.click("#send")
        sync_api.expect(page.locator(".msg.notice").last).to_have_text(NO_REPLY, timeout=20_000)
        page.fill("#message", "x" * 5000)  # too long for the model's context: refused by the server
        page.click("#send")
        sync_api.expect(page.locator(".msg.error")).to_have_count(1, timeout=20_000)
        refused = page.locator(".msg.user").last
        assert "refused" in refused.get_attribute("class") and len(refused.text_content()) == 5000
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert len(engine.messages) == 2  # the refused message never joined the conversation
