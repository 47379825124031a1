"""The linter (ruff, pyproject.toml's [tool.ruff]) over course_lib, the tests and the benchmarks:
no unused import or variable, no undefined name. Fix a finding (or, where a name is used in a way
the linter cannot see, say why in a ``# noqa`` comment)."""
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_finds_nothing():
    ruff = shutil.which("ruff") or pytest.fail("ruff is missing: pip install -r requirements.txt")
    found = subprocess.run([ruff, "check", "--no-cache", "course_lib", "tests", "benchmarks"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stdout[-3000:] + found.stderr[-1000:]


def test_ruff_would_see_an_unused_import(tmp_path):
    """The check can fail: the same configuration finds an unused import in a new file."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    ruff = shutil.which("ruff") or pytest.fail("ruff is missing")
    found = subprocess.run([ruff, "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
                            str(bad)],
                           capture_output=True, text=True, timeout=60)
    assert (found.returncode == 1
            and "F401" in found.stdout), found.stdout + found.stderr + sys.version
