# The two commands of the README:
#   make book   installs everything and builds the website into _build/html
#   make test   installs everything and runs every test: course_lib's unit tests, nbval over
#               every chapter, the strict book build, the Colab and student-notebook checks and
#               the real-browser check of every page
PYTHON ?= python3
PIP := $(PYTHON) -m pip
# tests/nbval_students.py: after each chapter, its student notebook's exercises run in the same kernel
NBVAL := --nbval --nbval-sanitize-with tests/nbval_sanitize.cfg --nbval-cell-timeout=600 -p tests.nbval_students
# One test process per core, at most 4 (pytest-xdist): a file's tests, and so a chapter's cells,
# stay together in one process, in order, the long files first (tests/conftest.py).
WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(4, len(os.sched_getaffinity(0)) \
  if hasattr(os, 'sched_getaffinity') else (os.cpu_count() or 1)))")
PARALLEL := -n $(WORKERS) --dist loadfile --no-loadscope-reorder
# The environment of every test process and chapter kernel (ISA, threads, OpenMP's waiting
# threads asleep) is set in one place, course_lib/tools/numerics.py, applied by tests/conftest.py
# and book/conftest.py.

.PHONY: install browser book test unit gpu-test notebooks screenshots execute figures clean

install:
	$(PIP) install -q -r requirements.txt

# Debian's Chromium for the real-browser test (Playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing and this is not root: the browser test will be skipped"; fi; }

# jupyter-book build -W --keep-going . (every warning an error), defined in course_lib/tools/book.py
book: install
	$(PYTHON) -m course_lib.tools book build

# The strict book build is a test (tests/test_website.py), so it runs beside the chapters. The 30
# slowest tests and chapter cells are listed at the end: the suite must stay under 20 minutes on 2
# cores, and this is where to look when it grows.
test: install browser
	$(PYTHON) -m pytest tests book $(NBVAL) $(PARALLEL) --durations=30

# Quicker loops while writing: the unit tests without the slow ones (strict book build, fresh venv,
# torchrun, browser, benchmark scripts), listing the 15 slowest (a test of ten seconds or more is
# marked slow), or nbval alone: make notebooks [NB="book/ch04_....ipynb ..."].
# Chapters always run in the reference numeric environment (course_lib/tools/numerics.py, applied by
# book/conftest.py), whatever this machine's CPU and core count.
unit:
	$(PYTHON) -m pytest tests -m "not slow" --durations=15 $(PARALLEL)
notebooks:
	$(PYTHON) -m pytest $(or $(NB),book) $(NBVAL) $(PARALLEL)
# The CUDA lane (course_lib/tools/gpu_lane.py): on a machine with a CUDA GPU, the unit tests with the
# GPU as the default device (tests marked gpu included) and every chapter executed on the GPU without
# comparing outputs, in a few lines of summary; without CUDA it skips with one line.
gpu-test:
	@$(PYTHON) -m course_lib.tools gpu-lane $(GPU_LANE_ARGS)
# The book build, then every page in a real browser with a full-page screenshot of each in _build/screenshots/
screenshots: install browser
	$(PYTHON) -m pytest tests/test_website.py --screenshots

# Re-execute chapters and store their outputs in the reference numeric environment (after editing them):
# make execute [NB=book/ch01_text_and_tokens.ipynb]
execute:
	$(PYTHON) -m course_lib.tools book sync
	$(PYTHON) -m course_lib.tools book execute $(NB)

# Redraw the architecture diagrams (book/figures/*.svg) from book/figures/make_figures.py
figures:
	$(PYTHON) book/figures/make_figures.py

clean:
	rm -rf _build
