"""A chapter needs nothing from the repository but the package, as on Colab.

Builds course_lib's wheel, creates a fresh virtual environment OUTSIDE the repository holding
only the wheel's dependencies (the CPU build of torch 2.13.0 that .ci/run installs, then the
rest from the package index) and ipykernel, and runs notebooks in a kernel of that environment:

1. the shared setup cell, with course_lib missing, installs it from $COURSE_LIB_SOURCE (the
   wheel) -- the path a Colab user takes, where it installs from the repository URL;
2. the first chapter of _toc.yml, copied alone into an empty folder, runs top to bottom with
   course_lib installed, and its exercise checks pass.

Slow (about a minute to install the environment): deselect with -m "not slow".
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import nbformat
import pytest

from course_lib.tools.chapters import ROOT, toc_chapters
from course_lib.tools import assignments

pytestmark = pytest.mark.slow

KERNEL = "course-lib-fresh-venv"
TORCH = "torch==2.13.0"  # the CPU build .ci/run installs (CONTRIBUTING.md, "What CI runs")
PROBE = """\
import json, sys, course_lib
print("PROBE " + json.dumps({"prefix": sys.prefix, "file": course_lib.__file__,
                             "version": course_lib.__version__, "path": sys.path}))"""


# Nothing pointing into the repository; and the fresh venv's modules are compiled to bytecode when
# first imported (pip installs them uncompiled, see `fresh`), as they are on Colab.
NOT_INHERITED = ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME", "PYTHONDONTWRITEBYTECODE")


def run(cmd, cwd: Path):
    """Run a command in ``cwd`` (never the repository: ``python -c`` would import its
    course_lib/)."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), cwd=cwd)
    assert done.returncode == 0, (f"{' '.join(map(str, cmd))} "
                                  f"failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def clean_env(**extra) -> dict:
    """The environment of the child processes: nothing that points into the repository."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(the wheel, the venv's python, a folder with a kernelspec for it)."""
    tmp = tmp_path_factory.mktemp("colab")
    assert ROOT.resolve() not in tmp.resolve().parents, ("the fresh environment must live outside "
                                                         "the repository")

    # 1. the wheel, built from a copy of the package sources (the repository stays untouched)
    src = tmp / "src"
    src.mkdir()
    shutil.copy(ROOT / "pyproject.toml", src)
    for name in ("README.md", "LICENSE", "LICENSE.txt", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, src)
    shutil.copytree(ROOT / "course_lib", src / "course_lib",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    isolation = [] if importlib.util.find_spec("setuptools") and importlib.util.find_spec("wheel") \
        else ["--use-pep517"]
    no_isolation = ["--no-build-isolation"] if not isolation else []
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", *no_isolation, *isolation, "-q",
         "-w", str(tmp / "dist"), str(src.resolve())], cwd=tmp)
    [wheel] = list((tmp / "dist").glob("course_lib-*.whl"))

    # 2. a fresh venv with the wheel's dependencies only (and ipykernel to run a kernel)
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", str(venv)], cwd=tmp)
    python = venv / "bin" / "python"
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        requires = Parser().parsestr(z.read(meta).decode()).get_all("Requires-Dist") or []
    deps = [r for r in requires if "extra ==" not in r]
    # One pip run, without compiling every installed module to bytecode (the kernels compile what
    # they import, once): most of the set-up is torch's thousands of files. Measured, the whole
    # test: 147 s with the compilation, 121 s without.
    run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile",
         TORCH, *deps, "ipykernel"], cwd=tmp)
    missing = subprocess.run([str(python), "-c", "import importlib.util as u; "
                              "raise SystemExit(u.find_spec('course_lib') is not None)"],
                             env=clean_env(), cwd=tmp)
    assert missing.returncode == 0, "course_lib must not be in the fresh environment yet"

    # 3. a kernelspec that runs that venv's python
    kernels = tmp / "jupyter" / "kernels" / KERNEL
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fresh venv", "language": "python"}))
    return wheel, python, tmp


def execute(nb, cwd: Path, tmp: Path, monkeypatch, allow_errors=False, **env):
    from nbclient import NotebookClient

    monkeypatch.setenv("JUPYTER_PATH", str(tmp / "jupyter"))
    for name in NOT_INHERITED:
        monkeypatch.delenv(name, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    NotebookClient(nb, timeout=600, kernel_name=KERNEL, allow_errors=allow_errors,
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def probe(cell) -> dict:
    text = "".join(o.get("text", "") for o in cell.outputs)
    return json.loads(text.split("PROBE ", 1)[1])


def first_chapter():
    chapters = toc_chapters()
    assert chapters, "_toc.yml lists no chapter"
    path = ROOT / f"{chapters[0]}.ipynb"
    assert path.exists(), f"{path} is missing"
    return path


def check_installed_in(info: dict, venv_python: Path) -> None:
    venv = venv_python.parent.parent
    assert Path(info["prefix"]).resolve() == venv.resolve(), (f"the kernel ran {info['prefix']}, "
                                                              "not the fresh venv")
    assert Path(info["file"]).resolve().is_relative_to(venv.resolve()), \
        f"course_lib was imported from {info['file']}, not from the fresh venv"
    assert not any(str(ROOT) in p
                   for p in info["path"]), "the repository is on the kernel's sys.path"


def test_setup_cell_installs_course_lib_from_COURSE_LIB_SOURCE(fresh, monkeypatch):
    wheel, python, tmp = fresh
    setup = next(c for c in nbformat.read(first_chapter(), as_version=4).cells
                 if c.cell_type == "code")
    work = tmp / "install"
    work.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(setup.source),
                                         nbformat.v4.new_code_cell(PROBE)])
    execute(nb, work, tmp, monkeypatch, COURSE_LIB_SOURCE=str(wheel))
    out = "".join(o.get("text", "") for o in nb.cells[0].outputs)
    assert "course_lib is ready; device: cpu" in out, out
    info = probe(nb.cells[1])
    check_installed_in(info, python)
    assert info["version"] in wheel.name


def test_first_chapter_runs_alone_in_the_fresh_environment(fresh, monkeypatch):
    wheel, python, tmp = fresh
    if subprocess.run([str(python), "-c", "import course_lib"], env=clean_env(),
                      cwd=tmp).returncode != 0:
        # this test alone
        run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=tmp)
    source = first_chapter()
    work = tmp / "work"
    work.mkdir()
    shutil.copy(source, work)  # the notebook alone: no book/, no course_lib/, no data beside it
    nb = nbformat.read(work / source.name, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    # course_lib is installed now: the setup cell must not try to install anything (this would fail)
    execute(nb, work, tmp, monkeypatch,
            COURSE_LIB_SOURCE="/nonexistent/course_lib-must-not-be-reinstalled.whl")
    setup_out = "".join(o.get("text", "")
                        for o in next(c for c in nb.cells if c.cell_type == "code").outputs)
    assert "course_lib is ready; device: cpu" in setup_out and "ERROR" not in setup_out, setup_out
    check_installed_in(probe(nb.cells[-1]), python)
    results = assignments.check_results(nb)
    assert results, f"{source.name}: no exercise check ran"
    wrong = [r for r in results if r.status != "correct"]
    assert not wrong, f"{source.name}: checks that did not pass in the fresh environment: {wrong}"
