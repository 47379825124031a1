"""The linter (ruff, pyproject.toml's [tool.ruff]) over course_lib, the tests and the benchmarks:
no unused import or variable, no undefined name, no line over 100 columns. Fix a finding (or,
where a name is used in a way the linter cannot see, say why in a ``# noqa`` comment).

The 100-column rule holds for every file (issue 45 fitted the last ones): no file may be excused
from it in pyproject.toml's per-file-ignores."""
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def ruff_path() -> str:
    return shutil.which("ruff") or pytest.fail("ruff is missing: pip install -r requirements.txt")


def excused_from_e501() -> list[str]:
    """The files pyproject.toml excuses from the 100-column rule."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    ignores = config["tool"]["ruff"]["lint"].get("per-file-ignores", {})
    return sorted(path for path, rules in ignores.items() if "E501" in rules)


def test_ruff_finds_nothing():
    found = subprocess.run([ruff_path(), "check", "--no-cache", "course_lib", "tests",
                            "benchmarks"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stdout[-3000:] + found.stderr[-1000:]


def test_ruff_would_see_an_unused_import(tmp_path):
    """The check can fail: the same configuration finds an unused import in a new file."""
    bad = tmp_path / "bad.py"
    bad.write_text("import os\n")
    found = subprocess.run([ruff_path(), "check", "--no-cache", "--config",
                            str(ROOT / "pyproject.toml"), str(bad)],
                           capture_output=True, text=True, timeout=60)
    assert found.returncode == 1 and "F401" in found.stdout, (found.stdout + found.stderr
                                                             + sys.version)


def test_ruff_would_see_a_line_over_100_columns(tmp_path):
    """The check can fail: a line of 101 columns is a finding, one of 100 is not."""
    fits, wide = tmp_path / "fits.py", tmp_path / "wide.py"
    fits.write_text("x = '" + "a" * 94 + "'\n")   # 100 columns
    wide.write_text("x = '" + "a" * 95 + "'\n")   # 101 columns
    config = ["--no-cache", "--config", str(ROOT / "pyproject.toml")]
    ok = subprocess.run([ruff_path(), "check", *config, str(fits)], capture_output=True, text=True,
                        timeout=60)
    found = subprocess.run([ruff_path(), "check", *config, str(wide)], capture_output=True,
                           text=True, timeout=60)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert found.returncode == 1 and "E501" in found.stdout, found.stdout + found.stderr


def test_no_file_is_excused_from_100_columns():
    excused = excused_from_e501()
    assert not excused, (f"pyproject.toml excuses {excused} from the 100-column rule (E501): fit "
                         "their lines into 100 columns and delete the entries instead")
