// The course's additions to sphinx-book-theme (issue #55); Jupyter Book adds every _static/*.js to every page.
(function () {
  function ready(f) { if (document.readyState !== "loading") f(); else document.addEventListener("DOMContentLoaded", f); }

  // A printed output whose columns line up over several lines is a table: _static/course.css keeps
  // its rows whole (it scrolls with a visible bar if wider than the page) instead of wrapping them.
  // Returns the columns where a field starts after a gap of 2+ spaces in at least 3 lines (and in at
  // least half of the lines), or null when there are fewer than two such columns.
  const GAP = /(?<=\S)  +(?=\S)/g;
  function gapEnds(line) { return Array.from(line.matchAll(GAP), m => m.index + m[0].length); }
  function tableColumns(text) {
    const lines = text.split("\n").filter(l => l.trim());
    if (lines.length < 3) return null;
    const count = new Map();
    for (const line of lines) new Set(gapEnds(line)).forEach(c => count.set(c, (count.get(c) || 0) + 1));
    const need = Math.max(3, Math.floor(lines.length / 2));
    const columns = new Set(Array.from(count).filter(([c, n]) => n >= need).map(([c]) => c));
    return columns.size >= 2 ? columns : null;
  }

  // In a table, a line that is not a row (a command above it, a note under it) still wraps.
  function wrapOtherLines(pre, columns) {
    if (Array.from(pre.children).some(e => e.textContent)) return;  // coloured output (ANSI spans): leave it
    const isRow = line => {  // a rule, a line with two gaps or more, or one gap at a column of the table
      const gaps = gapEnds(line);
      return /^[\s\-=+|:]*$/.test(line) || gaps.length >= 2 || gaps.some(c => columns.has(c));
    };
    const lines = pre.textContent.split("\n");
    if (lines.every(isRow)) return;
    pre.textContent = "";
    lines.forEach((line, i) => {
      if (i) pre.appendChild(document.createTextNode("\n"));
      if (isRow(line)) {
        if (line) pre.appendChild(document.createTextNode(line));
      } else {
        const span = document.createElement("span");
        span.className = "course-wraps";
        span.textContent = line;
        pre.appendChild(span);
      }
    });
  }

  // The theme's "page contents" button in the article header: pydata-sphinx-theme only listens to the
  // first .secondary-toggle of the page (in the site header, hidden in this theme), so forward the click.
  function forwardContentsButton() {
    const all = document.querySelectorAll(".secondary-toggle");
    if (all.length < 2) return;
    const target = all[0];
    for (let i = 1; i < all.length; i++) {
      all[i].addEventListener("click", e => { e.preventDefault(); e.stopPropagation(); target.click(); });
    }
  }

  ready(function () {
    document.querySelectorAll("div.cell_output pre, div.output pre").forEach(pre => {
      const columns = tableColumns(pre.textContent);
      if (columns) {
        pre.classList.add("course-table");
        wrapOtherLines(pre, columns);
      }
    });
    forwardContentsButton();
  });
})();
