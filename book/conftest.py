"""pytest's hooks for the chapters, loaded whenever pytest collects book/ (``make test``,
``make notebooks``, or ``python -m pytest book/chNN_....ipynb --nbval`` by hand).

Every chapter kernel that nbval starts, and the student-notebook check that runs in it, computes
in the reference numeric environment (course_lib/tools/numerics.py): the environment of this
process is pinned before any kernel or test worker starts, and kernels inherit it.

Then one of three modes, chosen in the first seconds and printed in the run's header:

- bitwise: this host's per-kernel fingerprints equal those of the host that stored the outputs
  (course_lib/records/numerics_reference.json), so every stored output is compared exactly;
- tolerance: they differ (another CPU vendor, another torch), so the header names the kernels that
  differ and each printed number is compared within the tolerance its chapter declares, cells that
  declare themselves host-dependent only run (course_lib/tools/tolerant_outputs.py);
- run only: the host cannot compute the reference at all (ARM, x86-64 without AVX2): every chapter
  runs and fails on errors, no output is compared.

``COURSE_NUMERICS_MODE=bitwise|tolerance`` chooses the mode without measuring (the test workers
inherit the one the first process chose). ``COURSE_NUMERICS_HOST="VAR=VALUE ..."`` sets variables
over the pin in every kernel, so that one machine can act as another host (tests/test_numerics.py).
"""
from __future__ import annotations

import os

from course_lib.tools import numerics, op_fingerprints, tolerant_outputs

MODE_VARIABLE = "COURSE_NUMERICS_MODE"
HOST_VARIABLE = "COURSE_NUMERICS_HOST"
NOTE_VARIABLE = "COURSE_NUMERICS_NOTE"
MODES = ("bitwise", "tolerance")


def simulated_host() -> dict[str, str]:
    """The variables of ``COURSE_NUMERICS_HOST`` ("VAR=VALUE VAR=VALUE")."""
    pairs = os.environ.get(HOST_VARIABLE, "").split()
    bad = [p for p in pairs if "=" not in p]
    if bad:
        raise ValueError(f"{HOST_VARIABLE} takes VAR=VALUE pairs separated by spaces, not {bad[0]!r}")
    return dict(p.split("=", 1) for p in pairs)


def choose_mode() -> tuple[str, str]:
    """(mode, the one line the run's header prints about it)."""
    reason = numerics.unsupported_host()
    if reason is not None:
        return "run only", numerics.host_note(reason)
    chosen = os.environ.get(MODE_VARIABLE)
    if chosen is not None:
        if chosen not in MODES:
            raise ValueError(f"{MODE_VARIABLE}={chosen!r}: use one of {', '.join(MODES)}, or leave it unset")
        return chosen, os.environ.get(NOTE_VARIABLE) or f"numerics: {chosen} mode, chosen by {MODE_VARIABLE}"
    ref = op_fingerprints.reference()
    host = op_fingerprints.host_fingerprints(simulated_host())
    differ = op_fingerprints.differences(host, ref)
    if not differ:
        return "bitwise", (f"numerics: bitwise mode: this host computes every kernel as the reference "
                           f"({ref['cpu']}, {numerics.DESCRIPTION}); stored outputs are compared exactly")
    torch_note = f" (torch {host['torch']} here, {ref['torch']} there)" if host["torch"] != ref["torch"] else ""
    return "tolerance", (f"numerics: tolerance mode: {len(differ)} of {len(ref['ops']) + 1} kernel fingerprints "
                         f"differ from the reference host's ({ref['cpu']}){torch_note}: {', '.join(differ)}; printed numbers "
                         f"are compared within each chapter's declared tolerance, host-dependent cells only run")


_mode, _note = "bitwise", ""


def pytest_configure(config):
    global _mode, _note
    if not (getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False)):
        return
    numerics.apply_reference_environment()
    _mode, _note = choose_mode()
    # pytest-xdist's workers start after this and inherit the environment: measured once
    if _mode in MODES:
        os.environ[MODE_VARIABLE], os.environ[NOTE_VARIABLE] = _mode, _note
    os.environ.update(simulated_host())  # the kernels act as that host
    if _mode == "run only":
        config.option.nbval_lax = True  # run every cell; compare only cells marked NBVAL_CHECK_OUTPUT (none are)
    elif _mode == "tolerance":
        _compare_within_tolerance()


def pytest_report_header(config):
    if getattr(config.option, "nbval", False) or getattr(config.option, "nbval_lax", False):
        return _note
    return None


def _compare_within_tolerance():
    """Make nbval's comparison of a cell tolerant: where the exact comparison fails, the cell
    passes when its outputs agree within the tolerance its chapter declares."""
    from nbval.plugin import IPyNbCell, transform_streams_for_comparison

    exact = IPyNbCell.compare_outputs
    if getattr(exact, "tolerant", False):
        return

    def compare_outputs(self, test, ref, skip_compare=None):
        if exact(self, test, ref, skip_compare):
            return True
        tolerance = tolerant_outputs.declared(self.parent.nb.metadata, self.cell.metadata)
        why = tolerant_outputs.cell_disagreement(
            transform_streams_for_comparison(ref), transform_streams_for_comparison(test), tolerance,
            skip=skip_compare or self.parent.skip_compare, sanitize=self.sanitize)
        if why is not None:
            self.comparison_traceback.append(f"tolerance mode: {why}")
            return False
        self.comparison_traceback = []
        return True

    compare_outputs.tolerant = True
    IPyNbCell.compare_outputs = compare_outputs
