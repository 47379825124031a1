"""The chat page's server: the reply streamed as server-sent events, the conversation kept and
reset, 4xx answers to malformed, oversized and concurrent requests (and the server keeps
serving), a client that goes away stops the generation; then the page in a real browser
(Playwright driving Debian's Chromium, as the website test does): type, see the streamed
reply with its calculator call, reset."""
import json
import shutil
import socket
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the web chat's packages are not installed (pip install fastapi uvicorn "
                    "sse-starlette)")
import anyio  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from chat_helpers import TOK, Cycling, ids_of  # noqa: E402
from course_lib.chat_engine import ChatEngine  # noqa: E402
from course_lib.chat_template import CALC, CALC_END, END  # noqa: E402
from course_lib.chat_web import MAX_BODY_BYTES, ChatServer, check_port, create_app  # noqa: E402

REPLY = ids_of(CALC, "2+3", CALC_END, "5", END)


def client_for(model=None):
    engine = ChatEngine(model or Cycling(REPLY), TOK)
    app = create_app(engine)
    return TestClient(app), app.state.server, engine


def events(response_text: str) -> list[tuple[str, str]]:
    """(event, data) pairs of a server-sent events stream."""
    out = []
    for block in response_text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in fields:
            out.append((fields["event"], json.loads(fields["data"])))
    return out


def test_the_page_and_a_streamed_reply_with_its_calculator_call():
    client, _, engine = client_for()
    page = client.get("/")
    assert page.status_code == 200 and '<form id="form">' in page.text and 'id="reset"' in page.text
    with client.stream("POST", "/api/chat", json={"message": "What is 2+3?"}) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        got = events("".join(response.iter_text()))
    assert got == [("tool", "2+3"), ("result", "5"), ("text", "5"), ("done", "")]
    history = client.get("/api/history").json()["messages"]
    assert history == engine.messages and history[0] == {"role": "user", "content": "What is 2+3?"}
    assert client.post("/api/reset").json() == {"messages": []} and engine.messages == []


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
    response = client.post("/api/chat", content=chunks)
    assert response.status_code == 413


def test_while_a_reply_is_written_others_get_a_clear_busy_answer():
    client, server, engine = client_for()
    server.lock.acquire()  # a reply under way
    try:
        response = client.post("/api/chat", json={"message": "Hi"})
        assert response.status_code == 429 and "busy" in response.json()["detail"]
        assert client.post("/api/reset").status_code == 429
    finally:
        server.lock.release()
    assert client.post("/api/reset").status_code == 200


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
    assert (first["event"], json.loads(first["data"])) == ("text", "a") and json.loads(second["data"]) == "b"
    assert model.calls == 2  # no token written after the client left
    assert engine.messages[-1] == {"role": "assistant", "content": "ab"} and not server.lock.locked()


def test_a_port_in_use_or_out_of_range_is_refused():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        with pytest.raises(OSError, match="choose another --port"):
            check_port("127.0.0.1", s.getsockname()[1])
    with pytest.raises(ValueError, match=r"--port must be in \[1, 65535\]"):
        check_port("127.0.0.1", 0)


# --- the page in a real browser ------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def served():
    """The app on a free port of 127.0.0.1, served by uvicorn in a thread; a model that writes
    slowly enough (40 ms a token) that the reply arrives in pieces."""
    import uvicorn

    engine = ChatEngine(Cycling(ids_of(CALC, "2+3", CALC_END, "The sum is 5.", END), delay=0.04), TOK)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(engine), host="127.0.0.1", port=port, log_level="warning"))
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
  new MutationObserver(() => window.updates++).observe(document.getElementById('log'),
                                                       {childList: true, subtree: true, characterData: true});
}"""


@pytest.mark.slow  # a real browser
def test_the_page_in_a_real_browser_type_see_the_streamed_reply_reset(served):
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: `apt-get install -y chromium`, or `make browser`)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="the playwright package is not installed")
    url, engine = served
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                                                     "--disable-dev-shm-usage", "--no-first-run"])
        page = browser.new_page()
        page.goto(url + "/")
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
        browser.close()
