"""The website: built strictly, then every page in a real browser (Playwright driving Debian's
Chromium).

First the book is built as `make book` builds it, with every Sphinx warning an error
(`course_lib.tools.book.build_command`). It runs here, in the test process of this file, rather than
before pytest starts, so that on several cores the other test processes go on with the chapters
meanwhile.

Then, for each page of _toc.yml, served from _build/html by a local server on 127.0.0.1: every
formula typeset by the bundled MathJax (no raw TeX left, no MathJax error), every image loaded, no
request leaving the machine, no console error except known harmless ones, exercise solutions folded
away, and, on chapter pages, the Colab button pointing at the chapter's notebook in the repository
and a working .ipynb download. Then the page's width (issue #55): at 1280x1000, a laptop's screen,
no code or output block is cut (wider than itself, so that the reader scrolls sideways inside it),
except the wide tables of WIDE_BLOCKS, listed with their reasons; at 768 and 390 px (a tablet, a
phone) the text column fits the screen and the page itself never scrolls sideways. With
`--screenshots` (`make screenshots`), a full-page screenshot of each page goes to
_build/screenshots/<page>.png for a person to look at; a tall page takes seconds to capture, so
`make test` leaves them out.

The page checks need Chromium (`make browser`, or `apt-get install -y chromium`) and are skipped
without it; run alone (`-k real_browser`), they need the site built first (`make book`).
"""
from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import threading
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from course_lib.tools.book import build_command
from course_lib.tools.chapters import ROOT, chapter_number, page_source, toc_entries

pytestmark = pytest.mark.slow  # the book build, then a browser, a few seconds a page

HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PAGES = toc_entries()
LOCAL_HOSTS = {"127.0.0.1"}
# Console errors known to be harmless, each with its reason.
HARMLESS_CONSOLE = [
    # sphinx-thebe registers its inline config (`const THEBE_JS_URL = ...`) after the builder has
    # started, so Sphinx writes it twice on every page and the second copy fails. It only configures
    # the "live code" button, which this book does not use (launch_buttons.thebe: false).
    re.compile(r"Identifier 'THEBE_JS_URL' has already been declared"),
]

# Code and output blocks that may stay wider than the page at 1280 px, shown with a scroll bar:
# page -> {text the block contains: why it stays wide}. They are printed tables, which
# _static/course.js marks (pre.course-table) so that their rows do not wrap.
WIDE_BLOCKS = {
    "book/ch12_training_at_scale": {
        "Self CPU %": "torch.profiler's own table, 126 characters wide: seven columns that "
                      "wrapping would scramble",
    },
    "book/ch19_scaling_laws": {
        "N_opt of seed": "the IsoFLOP fit per budget, 141 characters: eleven columns read across",
        "law at its N, D": "the presets against the law, 150 characters: ten columns read across",
    },
}
LAPTOP = {"width": 1280, "height": 1000}
NARROW = [{"width": 768, "height": 1024}, {"width": 390, "height": 844}]  # a tablet, a phone

try:
    from playwright import sync_api
except ImportError:
    sync_api = None


def config() -> dict:
    return yaml.safe_load((ROOT / "_config.yml").read_text())


def expected_colab_link(entry: str) -> str:
    c = config()
    repo = urlparse(c["repository"]["url"]).path.strip("/")
    base = c["launch_buttons"]["colab_url"].rstrip("/")
    book = (c["repository"].get("path_to_book") or "").strip("/")
    path = f"{book}/{entry}" if book else entry
    return f"{base}/github/{repo}/blob/{c['repository'].get('branch', 'main')}/{path}.ipynb"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_the_book_builds_without_a_warning():
    """`make book`'s build; the page checks below then read its _build/html."""
    done = subprocess.run(build_command(), cwd=ROOT, capture_output=True, text=True, timeout=1200)
    log = re.sub(r"\x1b\[[0-9;]*m", "", done.stdout + done.stderr)  # without the terminal colours
    warnings = [line for line in log.splitlines() if "WARNING" in line or "ERROR" in line]
    assert done.returncode == 0, ("the book build failed (Sphinx warnings are errors here):\n"
                                  + "\n".join(warnings[:40] or log.splitlines()[-40:]))


@pytest.fixture(scope="module")
def site():
    if not (HTML / "index.html").exists():
        pytest.fail("_build/html is missing: run the book build first (make book)")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                             functools.partial(QuietHandler, directory=str(HTML)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: `apt-get install -y chromium`, or `make "
                    "browser`): the real-browser checks of the website are skipped")
    if sync_api is None:
        pytest.skip("the playwright package is not installed: the real-browser checks are skipped")
    playwright = sync_api.sync_playwright().start()
    chromium = playwright.chromium.launch(
        executable_path=CHROMIUM,
        args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--disable-background-networking", "--disable-component-update", "--disable-sync",
              "--no-first-run", "--disable-quic"])
    yield chromium
    chromium.close()
    playwright.stop()


# Text of the article as a reader sees it, without code, outputs and typeset math.
ARTICLE_TEXT = """() => {
  const main = document.querySelector('main') || document.body;
  const clone = main.cloneNode(true);
  clone.querySelectorAll(
    'pre, code, mjx-container, script, style, .cell_output, .highlight, .MathJax_Preview')
       .forEach(e => e.remove());
  return clone.textContent;
}"""

IMAGES_LOADED = """() => Array.from(document.images).every(i => i.complete)"""
BROKEN_IMAGES = """() => Array.from(document.images)
  .filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.getAttribute('src'))"""
VISIBLE_SOLUTIONS = """() => Array.from(document.querySelectorAll('main *'))
  .filter(e => e.children.length === 0 && /BEGIN SOLUTION/.test(e.textContent)
               && e.checkVisibility())
  .length"""

# The code and output blocks of a page (solutions unfolded): the ones whose content is wider than
# the block, so that a reader scrolls sideways inside them to read a line.
CUT_BLOCKS = """() => {
  document.querySelectorAll('main details').forEach(d => { d.open = true; });
  const blocks = Array.from(new Set(document.querySelectorAll(
      'main div.cell pre, main div.highlight pre, main div.output pre')))
    .filter(p => p.checkVisibility());
  return {count: blocks.length,
          cut: blocks.filter(p => p.scrollWidth > p.clientWidth + 1).map(p => ({
    text: p.textContent, table: p.classList.contains('course-table'),
    scrolls: ['auto', 'scroll'].includes(getComputedStyle(p).overflowX),
    first: (p.textContent.split('\\n').find(l => l.trim()) || '').slice(0, 60),
    width: p.clientWidth, content: p.scrollWidth}))};
}"""
PAGE_WIDTH = """() => {
  const text = document.querySelector('main article') || document.querySelector('main');
  return {page: document.documentElement.scrollWidth, screen: window.innerWidth,
          text: Math.ceil(text.getBoundingClientRect().right)};
}"""

RAW_TEX = [
    (re.compile(r"\$\$"), "$$"),
    (re.compile(r"\\\(|\\\)|\\\[|\\\]"), r"\( \) \[ \]"),
    (re.compile(r"\\(begin|end)\{"), r"\begin / \end"),
    (re.compile(r"\\(frac|sqrt|sum|mathrm|mathbf|text|cdot|times|top|left|right|ln|log|exp|"
                r"infty|le|ge)\b"), "a TeX command"),
    (re.compile(r"(?<![\w$])\$[^\s$][^$\n]{0,200}?\$(?![\w$])"), "$...$"),
]


@pytest.mark.parametrize("entry", PAGES)
def test_page_in_a_real_browser(entry, site, browser, request):
    html = HTML / f"{entry}.html"
    if not html.exists():
        pytest.fail(f"{html.relative_to(ROOT)} is missing: run the book build first (make book)")
    source = page_source(entry)
    is_notebook = source is not None and source.suffix == ".ipynb"

    context = browser.new_context(viewport=LAPTOP)
    page = context.new_page()
    outside, console, bad_responses = [], [], []

    def route(r):
        url = urlparse(r.request.url)
        if url.scheme in ("data", "blob", "about") or url.hostname in LOCAL_HOSTS:
            r.continue_()
        else:
            outside.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(f"uncaught: {e}"))
    page.on("response",
            lambda r: bad_responses.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    try:
        page.goto(f"{site}/{entry}.html", wait_until="load")

        # formulas: typeset by MathJax, nothing left raw
        n_math = page.locator(".math").count()
        if n_math:
            try:
                page.wait_for_function("() => window.MathJax && MathJax.startup && "
                                       "MathJax.startup.promise",
                                       timeout=20000)
                page.evaluate("() => MathJax.startup.promise.then(() => true)")
            except sync_api.TimeoutError:
                pytest.fail(f"{entry}: MathJax did not load or typeset within 20 s, so its "
                            f"{n_math} formulas show as raw TeX (requests blocked because they "
                            f"left the machine: {outside})")
            typeset = page.locator("mjx-container").count()
            assert typeset >= n_math, (f"{entry}: {n_math} formulas but only {typeset} typeset by "
                                       "MathJax")
            assert page.locator("mjx-merror").count() == 0, f"{entry}: MathJax reports a TeX error"
        text = page.evaluate(ARTICLE_TEXT)
        for pattern, what in RAW_TEX:
            m = pattern.search(text)
            assert m is None, (f"{entry}: raw TeX ({what}) left in the text: "
                               f"...{text[max(0, m.start() - 60): m.end() + 60]!r}...")

        # images: all loaded (lazy ones forced)
        page.evaluate("() => Array.from(document.images).forEach(i => { i.loading = 'eager'; })")
        page.wait_for_function(IMAGES_LOADED, timeout=20000)
        broken = page.evaluate(BROKEN_IMAGES)
        assert not broken, f"{entry}: images that did not load: {broken}"

        # the launch and download buttons of a chapter
        if is_notebook:
            colab = [a.get_attribute("href")
                     for a in page.locator('a[href*="colab.research.google.com"]').all()]
            assert expected_colab_link(entry) in colab, \
                f"{entry}: no Colab link to {expected_colab_link(entry)} (found {colab})"
            downloads = [a.get_attribute("href") for a in page.locator('a[href$=".ipynb"]').all()
                         if "colab" not in (a.get_attribute("href") or "")]
            assert downloads, f"{entry}: no .ipynb download link"
            url = page.evaluate("(h) => new URL(h, document.baseURI).href", downloads[0])
            response = context.request.get(url)
            assert response.ok and response.text().lstrip().startswith("{"), (
                f"{entry}: the .ipynb download {url} does not serve the notebook "
                f"({response.status})"
            )

            # exercises: boxes rendered, solution code folded away
            if "{exercise}" in source.read_text():
                assert page.locator(".exercise").count() > 0, f"{entry}: no exercise box rendered"
                # numbered per chapter (course_lib.tools.exercise_numbers): ch03's first is 3.1
                first = page.locator(".exercise .admonition-title").first.inner_text()
                expected = f"Exercise {chapter_number(entry)}.1"
                assert first.startswith(expected), (f"{entry}: the first exercise is {first!r}, "
                                                    f"not {expected}")
            assert page.evaluate(VISIBLE_SOLUTIONS) == 0, (f"{entry}: solution code is visible "
                                                           "without a click")

        if request.config.getoption("screenshots"):
            SHOTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SHOTS / f"{Path(entry).name}.png"), full_page=True)

        # width (issue #55): the course's stylesheet is there, once (Jupyter Book adds
        # _static/*.css)...
        sheets = page.locator('link[href*="_static/course.css"]').count()
        assert sheets == 1, f"{entry}: _static/course.css is linked {sheets} times, not once"
        # ...on a laptop no block is cut but the listed wide tables...
        blocks = page.evaluate(CUT_BLOCKS)
        allowed = WIDE_BLOCKS.get(entry, {})
        cut = [b for b in blocks["cut"] if not any(key in b["text"] for key in allowed)]
        assert not cut, (f"{entry}: {len(cut)} of {blocks['count']} code/output blocks are cut at "
                         f"{LAPTOP['width']}x{LAPTOP['height']} (content wider than the block; "
                         "wrap the code line, or list a table that must stay wide in WIDE_BLOCKS "
                         "with its reason): "
                         + "; ".join(f"{b['first']!r} ({b['content']} px in {b['width']})"
                                     for b in cut))
        for key in allowed:
            listed = [b for b in blocks["cut"] if key in b["text"]]
            assert listed, (f"{entry}: WIDE_BLOCKS lists {key!r}, but no block containing it is "
                            "cut now: remove it")
            assert all(b["table"] and b["scrolls"] for b in listed), (
                f"{entry}: the wide block {key!r} is not kept as a table with its own scroll bar "
                "(pre.course-table)"
            )
        # ...and on a tablet and a phone the text fits the screen and the page never scrolls
        # sideways
        for size in NARROW:
            page.set_viewport_size(size)
            page.wait_for_timeout(100)
            width = page.evaluate(PAGE_WIDTH)
            assert width["page"] <= width["screen"] and width["text"] <= width["screen"], \
                (f"{entry}: at {size['width']} px the page is {width['page']} px wide and its text "
                 f"column ends at {width['text']} px: the reader would scroll the page sideways")
    finally:
        context.close()

    assert not outside, f"{entry}: requests left the machine: {sorted(set(outside))}"
    assert not bad_responses, f"{entry}: failed requests: {bad_responses}"
    errors = [m for m in console if not any(p.search(m) for p in HARMLESS_CONSOLE)]
    assert not errors, f"{entry}: console errors: {errors}"
