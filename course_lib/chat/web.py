"""The chat in a browser: ``python -m course_lib chat --web`` (chapter 17).

A local web page that streams the reply as the model writes it, keeps the conversation, shows
the calculator calls and can be reset. Served on 127.0.0.1 (this machine only) unless told
otherwise. Built on FastAPI (request parsing, JSON answers, a test client), uvicorn (the
server) and sse-starlette (server-sent events: the reply streams over one HTTP response, and a
client that goes away is noticed). Hand-written, each of those is where servers go wrong
(partial reads, disconnects, keep-alive); the three are small, well kept, pure Python, and
installed only by those who want the page (``pip install fastapi uvicorn sse-starlette``).

The routes:

- ``GET /``: the page (``web.html``, shipped beside this module);
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
from pathlib import Path

from .engine import NO_REPLY, ChatEngine

MAX_BODY_BYTES = 8192  # a request body larger than this is refused before it is read whole
# The page (its script and style inline, each allowed by its hash below); the words shown when the
# model writes nothing come from the engine.
PAGE = ((Path(__file__).parent / "web.html").read_text(encoding="utf-8")
        .replace("NO_REPLY_TEXT", json.dumps(NO_REPLY)))


LOOPBACK = ("127.0.0.1", "localhost", "[::1]")
EVERY_INTERFACE = ("0.0.0.0", "::", "")
LOG = logging.getLogger(__name__)


def _sha256_source(pattern: str) -> str:
    """A CSP source for the page's one inline element ``pattern`` matches (the browser runs it only
    if its hash is this one)."""
    text = re.search(pattern, PAGE, re.S).group(1)
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# The page's headers: no other site may frame it (clickjacking), and it runs only its own script and
# style and talks only to this server.
PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; "
                               f"script-src {_sha256_source(r'<script>(.*?)</script>')}; "
                               f"style-src {_sha256_source(r'<style>(.*?)</style>')}; "
                               "connect-src 'self'; "
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
        raise ValueError("the web chat needs three more packages: pip install fastapi uvicorn "
                         "sse-starlette (or chat in the terminal: leave out --web)") from None
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


def create_app(engine: ChatEngine, max_body_bytes: int = MAX_BODY_BYTES,
               host: str = "127.0.0.1", port: int = 8000):
    """The FastAPI application of the page and its routes (see the module's docstring), for a
    server at ``host``:``port`` (the only address its requests may name)."""
    _, fastapi, sse_starlette = _web_modules()
    from fastapi.responses import HTMLResponse, JSONResponse

    hosts = allowed_hosts(host, port)

    def same_site(request: fastapi.Request):
        """Refuse what another site's page could send (see the module's docstring), before any
        route."""
        named = request.headers.get("host", "").lower()
        if hosts is not None and named not in hosts:
            raise fastapi.HTTPException(403, f"Host {named!r} is not this server's address: open "
                                             f"the page at http://{sorted(hosts)[0]}/")
        origin = request.headers.get("origin")
        if origin is not None and origin.lower() != f"http://{named}":
            raise fastapi.HTTPException(403, f"a request from the page of {origin} is refused: "
                                             "only this server's own page may use it")
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if request.method == "POST" and kind != "application/json":
            raise fastapi.HTTPException(415, "send the body as Content-Type: application/json "
                                             f"(this request's type: {kind or 'none'})")

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
            return refuse(413, f"the request is larger than {max_body_bytes} bytes: "
                               "send a shorter message")
        try:
            message = json.loads(body)["message"]
        except (ValueError, KeyError, TypeError, RecursionError) as e:
            # e.g. 8,000 nested "[": the parser's stack, not a server error
            if isinstance(e, RecursionError):
                LOG.warning("chat page: refused a request body of JSON nested too deeply "
                            "(%d bytes)", len(body))
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
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:  # as uvicorn does
        try:
            s.bind((host, port))
        except OSError as e:
            raise OSError(_cannot_bind(host, port, e)) from None


def _cannot_bind(host: str, port: int, e: OSError) -> str:
    own = ("give an address of this machine: 127.0.0.1 (the default: this machine only), "
           "or 0.0.0.0 (every interface)")
    if isinstance(e, socket.gaierror):  # the name does not resolve
        return f"--host {host} is not a host name this machine knows ({e.strerror}): {own}"
    if e.errno == errno.EADDRNOTAVAIL:
        return f"--host {host} is not an address of this machine ({e.strerror}): {own}"
    if e.errno == errno.EACCES:
        return (f"cannot serve on {host}:{port} ({e.strerror}): a port below 1024 needs "
                "administrator rights; choose another --port, e.g. 8000")
    if e.errno == errno.EADDRINUSE:
        return (f"cannot serve on {host}:{port} ({e.strerror}: another program listens there): "
                "choose another --port")
    return f"cannot serve on {host}:{port} ({e.strerror}): check --host and --port"


def serve(engine: ChatEngine, host: str = "127.0.0.1", port: int = 8000) -> int:
    """Serve the page until Ctrl-C."""
    check_port(host, port)
    app = create_app(engine, host=host, port=port)
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: serving on {host}: anyone who can reach this machine can chat with "
              "the model"
              + (" (and requests naming any host are answered)" if host in EVERY_INTERFACE else ""))
    print(f"chat page on http://{host}:{port}/ (Ctrl-C stops the server)", flush=True)
    # Not uvicorn.run, which swallows the KeyboardInterrupt: the Server, after it has shut down
    # cleanly on Ctrl-C, raises it again, and the command line says so in one line, status 130.
    uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning")).run()
    return 0
