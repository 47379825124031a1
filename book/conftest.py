"""pytest's hooks for the chapters, loaded whenever pytest collects book/ (``make test``,
``make notebooks``, or ``python -m pytest book/chNN_....ipynb --nbval`` by hand).

Every chapter kernel that nbval starts, and the student-notebook check that runs in it, computes
in the reference numeric environment (course_lib/tools/numerics.py): the environment of this
process is pinned before any kernel or test worker starts, and kernels inherit it. On a host that
cannot compute the reference (ARM, x86-64 without AVX2), nbval still runs every chapter, so
errors are caught, but compares no outputs; the header of the run says so in one line.
"""
from __future__ import annotations

from course_lib.tools import numerics

_reason: str | None = None


def pytest_configure(config):
    global _reason
    if not (getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False)):
        return
    numerics.apply_reference_environment()
    _reason = numerics.unsupported_host()
    if _reason is not None:
        config.option.nbval_lax = True  # run every cell; compare only cells marked NBVAL_CHECK_OUTPUT (none are)


def pytest_report_header(config):
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        return numerics.host_note(_reason)
    return None
