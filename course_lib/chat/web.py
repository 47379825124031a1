"""The chat in a browser: ``python -m course_lib chat --web`` (chapter 17).

A local web page that streams the reply as the model writes it, keeps the conversation, shows
the calculator calls and can be reset. Served on 127.0.0.1 (this machine only) unless told
otherwise. Built on FastAPI (request parsing, JSON answers, a test client), uvicorn (the
server) and sse-starlette (server-sent events: the reply streams over one HTTP response, and a
client that goes away is noticed). Hand-written, each of those is where servers go wrong
(partial reads, disconnects, keep-alive); the three are small, well kept, pure Python, and
installed only by those who want the page (``pip install fastapi uvicorn sse-starlette``).

The routes:

- ``GET /``: the page;
- ``POST /api/chat`` with ``{"message": "..."}``: the reply as server-sent events (``text``,
  ``tool``, ``result``, ``notice``, then ``done``; each event's data is a JSON string). A body
  over ``MAX_BODY_BYTES`` is answered 413, a body that is not such JSON 400, a message the
  model cannot take (empty, too long, a character it cannot read) 422, and while another reply
  is being written 429 ("busy"): one model, one conversation, one reply at a time;
- ``POST /api/reset``: start again (429 while a reply is being written);
- ``GET /api/history``: the conversation so far, and what its context holds and drops
  (:meth:`ChatEngine.about`), which the page shows when it loads.

A client that disconnects mid-reply stops the generation (after the token under way); the
conversation keeps what was written, as in the terminal.

Only the page itself may use the routes. Any web page open in the user's browser can send
requests to 127.0.0.1, so a request is refused (403) unless its ``Host`` is this server's own
address (a page that reached it by DNS rebinding names its own) and its ``Origin``, when the
browser sends one, is that address too; a POST must be ``Content-Type: application/json``
(415 otherwise), which a page of another site cannot send without asking first (CORS), and
this server never says yes. The page may not be framed by another one, and runs only its own
script (``X-Frame-Options``, ``Content-Security-Policy``).
"""

import base64
import errno
import hashlib
import json
import logging
import re
import socket
import threading

from .engine import NO_REPLY, ChatEngine

MAX_BODY_BYTES = 8192  # a request body larger than this is refused before it is read whole
PAGE = r"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Chat with a small GPT</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font-family: system-ui, sans-serif; max-width: 44rem; margin: 2rem auto; padding: 0 1rem; }
#log { border: 1px solid #ccc; border-radius: 6px; padding: 0.5rem; min-height: 12rem; }
.msg { margin: 0.4rem 0; white-space: pre-wrap; overflow-wrap: anywhere; }
.refused { opacity: 0.6; }
.refused::after { content: " (not sent)"; font-style: italic; }
.user::before { content: "you: "; font-weight: bold; }
.assistant::before { content: "assistant: "; font-weight: bold; }
.tool { font-family: monospace; background: #eef; padding: 0 0.2rem; }
.notice, .error { color: #a40; font-style: italic; }
form { display: flex; gap: 0.5rem; margin-top: 0.5rem; }
#message { flex: 1; }
</style></head>
<body><main>
<h1>Chat with a small GPT</h1>
<p id="about"></p>
<div id="log" aria-live="polite"></div>
<form id="form"><input id="message" autocomplete="off" placeholder="What is 12+7?" aria-label="message">
<button id="send" type="submit">Send</button><button id="reset" type="button">Reset</button></form>
</main>
<script>
const log = document.getElementById("log"), input = document.getElementById("message");
const send = document.getElementById("send");
function add(cls, text) {
  const div = document.createElement("div");
  div.className = "msg " + cls; div.textContent = text || ""; log.appendChild(div); return div;
}
function span(parent, cls, text) {
  const s = document.createElement("span"); s.className = cls; s.textContent = text; parent.appendChild(s); return s;
}
function show(messages) {
  log.textContent = "";
  for (const m of messages) {
    if (m.role === "system") continue;
    const div = add(m.role, typeof m.content === "string" ? m.content : "");
    if (typeof m.content !== "string") for (const p of m.content) {
      if (p.type === "text") div.appendChild(document.createTextNode(p.text));
      else span(div, "tool", p.type === "tool" ? "[calc " + p.text : " = " + p.text + "]");
    }
  }
}
function handle(block, reply) {
  let event = "message", data = "";
  for (const line of block.split("\n")) {
    if (line.startsWith("event:")) event = line.slice(6).trim();
    else if (line.startsWith("data:")) data += line.slice(5).trim();
  }
  if (!data) return;
  const text = JSON.parse(data);
  if (event === "text") reply.appendChild(document.createTextNode(text));
  else if (event === "tool") span(reply, "tool", "[calc " + text);
  else if (event === "result") span(reply, "tool", " = " + text + "]");
  else if (event === "notice") {
    const notice = add("notice", text);  // a notice before any of the reply stands above it
    if (!reply.hasChildNodes()) log.insertBefore(notice, reply);
  }
  else if (event === "error") add("error", text);
}
async function chat(message) {
  const sent = add("user", message);
  const res = await fetch("/api/chat", {method: "POST", headers: {"Content-Type": "application/json"},
                                        body: JSON.stringify({message})});
  if (!res.ok) { sent.classList.add("refused"); add("error", (await res.json()).detail); return; }
  const reply = add("assistant", ""), reader = res.body.getReader(), decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) break;
    buffer = (buffer + decoder.decode(value, {stream: true})).replace(/\r\n/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) { handle(buffer.slice(0, end), reply); buffer = buffer.slice(end + 2); }
  }
  if (!reply.textContent.trim()) add("notice", NO_REPLY_TEXT);
}
document.getElementById("form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const message = input.value.trim();
  if (!message) return;
  input.value = ""; send.disabled = true;
  try { await chat(message); } catch (err) { add("error", String(err)); }
  send.disabled = false; input.focus();
});
document.getElementById("reset").addEventListener("click", async () => {
  const res = await fetch("/api/reset", {method: "POST", headers: {"Content-Type": "application/json"}});
  if (res.ok) show((await res.json()).messages); else add("error", (await res.json()).detail);
});
fetch("/api/history").then(r => r.json()).then(h => {
  document.getElementById("about").textContent = h.about; show(h.messages);
});
</script></body></html>
""".replace("NO_REPLY_TEXT", json.dumps(NO_REPLY))


LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
EVERY_INTERFACE = ("0.0.0.0", "::", "")
LOG = logging.getLogger(__name__)


def _sha256_source(pattern: str) -> str:
    """A CSP source for the page's one inline element ``pattern`` matches (the browser runs it only if
    its hash is this one)."""
    text = re.search(pattern, PAGE, re.S).group(1)
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# The page's headers: no other site may frame it (clickjacking), and it runs only its own script and
# style and talks only to this server.
PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": f"default-src 'none'; script-src {_sha256_source(r'<script>(.*?)</script>')}; "
                               f"style-src {_sha256_source(r'<style>(.*?)</style>')}; connect-src 'self'; "
                               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
}


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """The ``Host`` headers a request to this server may carry: its own address, and this machine's
    loopback names, at its port (the port left out when it is 80, as browsers do). None when it
    listens on every interface: it cannot know its names, and serve() has warned."""
    if host in EVERY_INTERFACE:
        return None
    names = {f"[{host}]" if ":" in host else host, *LOOPBACK}
    return {f"{name}:{port}" for name in names} | (names if port == 80 else set())


def _web_modules():
    try:
        import anyio
        import fastapi
        import sse_starlette
    except ImportError:
        raise ValueError("the web chat needs three more packages: pip install fastapi uvicorn sse-starlette "
                         "(or chat in the terminal: leave out --web)") from None
    return anyio, fastapi, sse_starlette


class ChatServer:
    """One engine (one conversation) behind the routes, and the lock that lets one reply be
    written at a time."""

    def __init__(self, engine: ChatEngine):
        self.engine, self.lock = engine, threading.Lock()

    def history(self) -> list[dict]:
        return self.engine.messages

    async def events(self, text: str):
        """The reply to ``text`` as server-sent events (dicts for sse-starlette). Each piece is
        computed in a worker thread; closing this generator (a client gone) closes the engine's
        stream, which keeps the reply so far, and frees the lock."""
        anyio, _, _ = _web_modules()
        if not self.lock.acquire(blocking=False):  # another request got there first
            yield {"event": "error", "data": json.dumps("busy: another reply is being written")}
            return
        stream = self.engine.stream(text)
        try:
            while True:
                piece = await anyio.to_thread.run_sync(next, stream, None)
                if piece is None:
                    break
                yield {"event": piece.kind, "data": json.dumps(piece.text)}
            yield {"event": "done", "data": json.dumps("")}
        finally:
            stream.close()
            self.lock.release()


def create_app(engine: ChatEngine, max_body_bytes: int = MAX_BODY_BYTES, host: str = "127.0.0.1", port: int = 8000):
    """The FastAPI application of the page and its routes (see the module's docstring), for a
    server at ``host``:``port`` (the only address its requests may name)."""
    _, fastapi, sse_starlette = _web_modules()
    from fastapi.responses import HTMLResponse, JSONResponse

    hosts = allowed_hosts(host, port)

    def same_site(request: fastapi.Request):
        """Refuse what another site's page could send (see the module's docstring), before any route."""
        named = request.headers.get("host", "").lower()
        if hosts is not None and named not in hosts:
            raise fastapi.HTTPException(403, f"Host {named!r} is not this server's address: open the page at "
                                              f"http://{sorted(hosts)[0]}/")
        origin = request.headers.get("origin")
        if origin is not None and origin.lower() != f"http://{named}":
            raise fastapi.HTTPException(403, f"a request from the page of {origin} is refused: only this server's "
                                              "own page may use it")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if request.method == "POST" and kind != "application/json":
            raise fastapi.HTTPException(415, "send the body as Content-Type: application/json (this request's "
                                              f"type: {kind or 'none'})")

    app = fastapi.FastAPI(title="course_lib chat", docs_url=None, redoc_url=None,
                          dependencies=[fastapi.Depends(same_site)])
    app.state.server = server = ChatServer(engine)

    def refuse(status: int, why: str):
        return JSONResponse({"detail": why}, status_code=status)

    @app.get("/", response_class=HTMLResponse)
    def page():
        return HTMLResponse(PAGE, headers=PAGE_HEADERS)

    @app.get("/api/history")
    def history():  # and what a user must know about this model's context (the page shows it)
        return {"messages": server.history(), "about": engine.about()}

    @app.post("/api/reset")
    def reset():
        if server.lock.locked():
            return refuse(429, "busy: a reply is being written; reset when it is done")
        engine.reset()
        return {"messages": server.history()}

    @app.post("/api/chat")
    async def chat(request: fastapi.Request):
        body = await read_limited(request, max_body_bytes)
        if body is None:
            return refuse(413, f"the request is larger than {max_body_bytes} bytes: send a shorter message")
        try:
            message = json.loads(body)["message"]
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            if isinstance(e, RecursionError):  # e.g. 8,000 nested "[": the parser's stack, not a server error
                LOG.warning("chat page: refused a request body of JSON nested too deeply (%d bytes)", len(body))
            return refuse(400, 'the body must be JSON of the form {"message": "..."}')
        if server.lock.locked():
            return refuse(429, "busy: another reply is being written; try again when it is done")
        try:
            engine.check_message(message)
        except ValueError as e:
            return refuse(422, str(e))
        return sse_starlette.EventSourceResponse(server.events(message))

    return app


async def read_limited(request, limit: int) -> bytes | None:
    """The request's body, or None as soon as it is known to exceed ``limit`` bytes."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return body


def check_port(host: str, port: int) -> None:
    """Refuse, in one line, a port out of range or already taken, or a host that is not an
    address of this machine (before the server starts); each message names the option to change."""
    if not 1 <= port <= 65535:
        raise ValueError(f"--port must be in [1, 65535], got {port}")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:  # as uvicorn binds it
        try:
            s.bind((host, port))
        except OSError as e:
            raise OSError(_cannot_bind(host, port, e)) from None


def _cannot_bind(host: str, port: int, e: OSError) -> str:
    own = "give an address of this machine: 127.0.0.1 (the default: this machine only), or 0.0.0.0 (every interface)"
    if isinstance(e, socket.gaierror):  # the name does not resolve
        return f"--host {host} is not a host name this machine knows ({e.strerror}): {own}"
    if e.errno == errno.EADDRNOTAVAIL:
        return f"--host {host} is not an address of this machine ({e.strerror}): {own}"
    if e.errno == errno.EACCES:
        return (f"cannot serve on {host}:{port} ({e.strerror}): a port below 1024 needs administrator rights; "
                "choose another --port, e.g. 8000")
    if e.errno == errno.EADDRINUSE:
        return f"cannot serve on {host}:{port} ({e.strerror}: another program listens there): choose another --port"
    return f"cannot serve on {host}:{port} ({e.strerror}): check --host and --port"


def serve(engine: ChatEngine, host: str = "127.0.0.1", port: int = 8000) -> int:
    """Serve the page until Ctrl-C."""
    check_port(host, port)
    app = create_app(engine, host=host, port=port)
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {host}: anyone who can reach this machine can chat with the model"
              + (" (and requests naming any host are answered)" if host in EVERY_INTERFACE else ""))
    print(f"chat page on http://{host}:{port}/ (Ctrl-C stops the server)", flush=True)
    # Not uvicorn.run, which swallows the KeyboardInterrupt: the Server, after it has shut down
    # cleanly on Ctrl-C, raises it again, and the command line says so in one line, status 130.
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
    return 0
