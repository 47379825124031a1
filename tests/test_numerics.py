"""The reference numeric environment (course_lib/tools/numerics.py): chapters are stored and
validated in it, so that one host reproduces them bitwise whatever its thread count or exports.

The proof that the pin works, and that it is needed: one short training under two host conditions
that change its result when nothing is pinned (the thread count a user exports, and torch's kernel
ISA where this CPU has more than one), computed in fresh processes with and without the pin.
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import nbformat
import pytest

from course_lib.tools import numerics
from course_lib.tools.chapters import ROOT, execute_notebook

# Two hosts as a user could have them: one thread (OMP_NUM_THREADS=1 exported), and two threads
# with torch's AVX-512 kernels (taken where the CPU has them; AVX2 elsewhere).
ONE_THREAD = {"OMP_NUM_THREADS": "1"}


def _has_avx512() -> bool:
    """Whether this CPU runs AVX-512 (forcing torch's AVX-512 kernels elsewhere dies of an illegal
    instruction: the project's machines are not all of one kind)."""
    try:
        return " avx512f" in open("/proc/cpuinfo").read()
    except OSError:
        return False


# The second host: 2 threads, with AVX-512 kernels where the CPU has them (else its own default)
TWO_THREADS_AVX512 = {"OMP_NUM_THREADS": "2",
                      **({"ATEN_CPU_CAPABILITY": "avx512"} if _has_avx512() else {})}
STEPS = 10


def test_the_reference_environment_pins_every_variable_over_a_users_exports():
    user = {"HOME": "/home/reader", "OMP_NUM_THREADS": "7", "MKL_NUM_THREADS": "7",
            "ATEN_CPU_CAPABILITY": "avx512"}
    assert numerics.reference_environment(user) == {"HOME": "/home/reader", **numerics.REFERENCE}
    one = numerics.reference_environment(user, threads=1)  # the shipped pretrained model's pin
    assert one == {"HOME": "/home/reader", **numerics.REFERENCE, "OMP_NUM_THREADS": "1",
                   "MKL_NUM_THREADS": "1"}


def test_wait_passively_restarts_the_script_with_sleeping_threads_unless_a_policy_was_chosen(
    monkeypatch,
):
    restarts = []
    monkeypatch.setattr(os, "execve", lambda *args: restarts.append(args))
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the caller's choice stands
    numerics.wait_passively()
    assert restarts == []
    monkeypatch.delenv("OMP_WAIT_POLICY")
    numerics.wait_passively()
    # the same interpreter, its options and the script's arguments
    [(program, argv, env)] = restarts
    assert program == sys.executable and argv == [sys.executable, *sys.orig_argv[1:]]
    assert (env == dict(os.environ, OMP_WAIT_POLICY=numerics.REFERENCE["OMP_WAIT_POLICY"])
            and "PASSIVE" in env.values())


@pytest.mark.slow  # four short trainings in fresh processes
def test_the_pin_makes_two_hosts_train_bitwise_alike_and_without_it_they_differ():
    free = [numerics.fingerprint_in(numerics.host_environment(c), STEPS)
            for c in (ONE_THREAD, TWO_THREADS_AVX512)]
    pinned = [numerics.fingerprint_in(numerics.reference_environment(numerics.host_environment(c)),
                                      STEPS)
              for c in (ONE_THREAD, TWO_THREADS_AVX512)]
    # fingerprint: "ISA threads loss weights-hash"
    assert free[0].split()[1] == "1" and free[1].split()[1] == "2"
    assert free[0] != free[1], ("without the pin, 1 and 2 threads should train differently (the "
                                "control)")
    assert pinned[0] == pinned[1], f"the pin did not make the two hosts agree: {pinned}"
    assert pinned[0].split()[:2] == ["AVX2", str(numerics.THREADS)]


def test_reference_environment_overrides_what_the_user_exported():
    env = numerics.reference_environment({"OMP_NUM_THREADS": "8", "MKL_NUM_THREADS": "1",
                                          "ATEN_CPU_CAPABILITY": "avx512", "HOME": "/home/reader"})
    assert {k: env[k] for k in numerics.REFERENCE} == numerics.REFERENCE
    assert env["HOME"] == "/home/reader"
    assert numerics.host_environment({"OMP_NUM_THREADS": "1"})["OMP_NUM_THREADS"] == "1"
    assert not set(numerics.PINNED) - {"OMP_NUM_THREADS"} & set(numerics.host_environment({}))


@pytest.mark.parametrize("machine, capability, expected", [
    ("x86_64", "AVX2", None),
    # Windows spells it so; a CPU with AVX-512 also computes the AVX2 reference
    ("AMD64", "AVX512", None),
    ("arm64", "DEFAULT", "arm64, not x86-64"),  # Apple silicon
    ("aarch64", "SVE256", "aarch64, not x86-64"),
    ("x86_64", "DEFAULT", "no AVX2"),
])
def test_unsupported_hosts_are_named(machine, capability, expected):
    reason = numerics.unsupported_host(machine, capability)
    if expected is None:
        assert reason is None
    else:
        assert expected in reason
        note = numerics.host_note(reason)
        assert "\n" not in note and "compares no outputs" in note and numerics.DESCRIPTION in note


def probe_notebook(path):
    """A one-cell notebook whose stored output is what the reference environment prints."""
    source = ("import os, torch\n"
              "print(torch.backends.cpu.get_cpu_capability(), torch.get_num_threads(),\n"
              "      *(os.environ.get(k) for k in ('MKL_CBWR', 'ONEDNN_MAX_CPU_ISA', "
              "'MKL_NUM_THREADS')))")
    expected = (" ".join(["AVX2", str(numerics.THREADS), "AVX2", "AVX2",
                          str(numerics.THREADS)]) + "\n")
    cell = nbformat.v4.new_code_cell(source, execution_count=1,
                                     outputs=[nbformat.v4.new_output("stream", name="stdout",
                                                                     text=expected)])
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nbformat.write(nb, path)
    return expected


@pytest.mark.slow  # two short trainings in fresh processes
def test_the_pinned_wait_policy_changes_no_result():
    """OMP_WAIT_POLICY is pinned for speed only: spinning and sleeping threads train bitwise
    alike."""
    reference = numerics.reference_environment()
    assert reference["OMP_WAIT_POLICY"] == "PASSIVE"
    spinning = dict(reference, OMP_WAIT_POLICY="ACTIVE")
    assert numerics.fingerprint_in(spinning, 5) == numerics.fingerprint_in(reference, 5)


@pytest.mark.slow  # a kernel
def test_the_executor_runs_its_kernel_in_the_reference_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a user's export: must not reach the kernel
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    expected = probe_notebook(tmp_path / "probe.ipynb")
    executed = execute_notebook(tmp_path / "probe.ipynb")
    assert "".join(o.get("text", "") for o in executed.cells[0].outputs) == expected


@pytest.mark.slow  # a kernel
def test_the_executors_kernel_imports_this_checkouts_course_lib(tmp_path, monkeypatch):
    """`pip install -e` may point at another checkout (a clean clone's CI run repoints it): what
    is stored must be what THIS course_lib prints."""
    (tmp_path / "course_lib").mkdir()  # another copy, first on the user's path
    (tmp_path / "course_lib" / "__init__.py").write_text("")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # a user's own path stays, after the checkout
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import course_lib, sys; print(course_lib.__file__); print(sys.path.index(%r) > "
        "0)" % str(tmp_path))])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nbformat.write(nb, tmp_path / "where.ipynb")
    printed = "".join(o.get("text", "")
                      for o in execute_notebook(tmp_path / "where.ipynb").cells[0].outputs)
    assert printed == f"{ROOT / 'course_lib' / '__init__.py'}\nTrue\n"


@pytest.mark.slow  # a kernel
def test_the_executor_does_not_run_nbval_skip_cells_and_stores_them_without_outputs(tmp_path):
    """A `# NBVAL_SKIP` cell needs the network or a GPU: nbval never runs it, so the executor does
    not either, instead of storing this machine's download errors (the cell would raise here)."""
    skipped = nbformat.v4.new_code_cell("# NBVAL_SKIP\nraise RuntimeError('no network')",
                                        execution_count=3, metadata={"tags": ["remove-output"]},
                                        outputs=[nbformat.v4.new_output("stream", name="stdout",
                                                                        text="old")])
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1 + 1)"), skipped])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nbformat.write(nb, tmp_path / "skip.ipynb")
    execute_notebook(tmp_path / "skip.ipynb", store=True)
    first, second = nbformat.read(tmp_path / "skip.ipynb", as_version=4).cells
    assert first.outputs[0]["text"] == "2\n"
    assert second.outputs == [] and second.execution_count is None
    assert second.metadata["tags"] == ["remove-output"]  # its own tags kept, the executor's removed


@pytest.mark.slow  # two pytest runs with a kernel each
def test_nbval_kernels_run_in_the_reference_environment_through_book_conftest(tmp_path):
    """book/conftest.py pins the kernels nbval starts; without it, a user's OMP_NUM_THREADS=1
    changes what the probe prints, and nbval fails (so the test can fail)."""
    probe_notebook(tmp_path / "probe.ipynb")
    # not the pin, nor the mode and note that make test's own conftest passed down to its workers
    env = {k: v for k, v in os.environ.items()
           if k not in numerics.PINNED and not k.startswith("COURSE_NUMERICS")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))

    def nbval():
        return subprocess.run([sys.executable, "-m", "pytest", "probe.ipynb", "--nbval", "-p",
                               "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(tmp_path)],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    without = nbval()
    assert without.returncode == 1, without.stdout[-3000:]
    shutil.copy(ROOT / "book" / "conftest.py", tmp_path / "conftest.py")
    # the mode given, not measured (the fingerprints take seconds, and the pin is what is tested:
    # bitwise compares the probe's output exactly)
    env["COURSE_NUMERICS_MODE"] = "bitwise"
    pinned = nbval()
    assert pinned.returncode == 0, pinned.stdout[-3000:]
    assert re.search(r"numerics: bitwise mode", pinned.stdout), pinned.stdout[:2000]


def store_loss(path, loss: float) -> None:
    """The miniature chapter of :func:`training_notebook` with another stored loss: a wrong
    chapter's (no kernel run)."""
    nb = nbformat.read(path, as_version=4)
    nb.cells[0].outputs[0]["text"] = f"loss after 20 steps {loss:.7f}\n"
    nbformat.write(nb, path)


def training_notebook(path):
    """A chapter in miniature: a short training whose loss is printed to 7 decimals (last bits
    show), stored as this host computes it under the pin, and a cell of "sampled text" that
    declares itself host-dependent. Returns the stored loss's line."""
    train = nbformat.v4.new_code_cell("from course_lib.tools.numerics import fingerprint\n"
                                      "print(f'loss after 20 steps "
                                      "{float(fingerprint(20).split()[2]):.7f}')")
    sample = nbformat.v4.new_code_cell("import torch\nprint('ROMEO:', "
                                       "torch.backends.cpu.get_cpu_capability())",
                                       metadata={"numerics": {"host_dependent": "text sampled "
                                                                                "after training"}})
    nb = nbformat.v4.new_notebook(cells=[train, sample])
    nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python",
                                 "name": "python3"}
    nbformat.write(nb, path)
    execute_notebook(path, store=True)
    return nbformat.read(path, as_version=4).cells[0].outputs[0]["text"]


@pytest.mark.slow  # three pytest runs with a kernel each
def test_on_another_host_a_correct_chapter_passes_within_its_tolerance_and_a_wrong_one_fails(
    tmp_path,
):
    """Another host, made on this one: COURSE_NUMERICS_HOST sets torch's portable kernels over the
    pin (ATEN_CPU_CAPABILITY=default), which changes a training's last bits on every x86-64 CPU.
    make test measures that the kernels differ from the reference host's, says so in its header, and
    compares numbers within the tolerance."""
    stored = training_notebook(tmp_path / "ch99_mini.ipynb")
    shutil.copy(ROOT / "book" / "conftest.py", tmp_path / "conftest.py")
    base = {k: v for k, v in os.environ.items() if not k.startswith("COURSE_NUMERICS")}

    def nbval(**env):
        return subprocess.run([sys.executable, "-m", "pytest", "ch99_mini.ipynb", "--nbval", "-p",
                               "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(tmp_path)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env=dict(base, PYTHONPATH=str(ROOT), **env))

    other_host = {"COURSE_NUMERICS_HOST": "ATEN_CPU_CAPABILITY=default"}
    # the control: the last bits do differ there
    exact = nbval(**other_host, COURSE_NUMERICS_MODE="bitwise")
    assert exact.returncode == 1 and "loss after 20 steps" in exact.stdout, exact.stdout[-3000:]
    tolerant = nbval(**other_host)
    assert tolerant.returncode == 0, tolerant.stdout[-3000:]
    header = next(line for line in tolerant.stdout.splitlines() if line.startswith("numerics:"))
    assert header.startswith("numerics: tolerance mode:") and "the short training" in header
    wrong = float(stored.split()[-1]) * 1.1  # a wrong chapter's loss, 10% off
    store_loss(tmp_path / "ch99_mini.ipynb", wrong)
    # tolerance mode given, not measured again (the run above measured it)
    failed = nbval(**other_host, COURSE_NUMERICS_MODE="tolerance")
    assert (failed.returncode == 1
            and "not within rtol" in failed.stdout), (wrong, failed.stdout[-3000:])


def test_a_malformed_numerics_setting_is_one_clear_error(monkeypatch):
    spec = importlib.util.spec_from_file_location("book_conftest", ROOT / "book" / "conftest.py")
    conftest = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(conftest)
    monkeypatch.setenv("COURSE_NUMERICS_HOST", "OMP_NUM_THREADS")
    with pytest.raises(ValueError,
                       match="VAR=VALUE pairs separated by spaces, not 'OMP_NUM_THREADS'"):
        conftest.simulated_host()
    monkeypatch.setattr(numerics, "unsupported_host", lambda: None)
    monkeypatch.setenv("COURSE_NUMERICS_MODE", "fast")
    with pytest.raises(ValueError, match="use one of bitwise, tolerance"):
        conftest.choose_mode()
    monkeypatch.setenv("COURSE_NUMERICS_MODE", "tolerance")
    assert conftest.choose_mode()[0] == "tolerance"


def test_storing_is_refused_on_a_host_that_cannot_compute_the_reference(monkeypatch, tmp_path):
    from course_lib.tools import book

    monkeypatch.setattr(book, "unsupported_host", lambda: "this CPU is arm64, not x86-64")
    notebook = tmp_path / "ch01_x.ipynb"
    probe_notebook(notebook)
    before = notebook.read_bytes()
    with pytest.raises(ValueError, match="arm64.*would not be the reference"):
        book._cmd_execute(type("Args", (), {"paths": [notebook]})())
    assert notebook.read_bytes() == before


def test_storing_is_refused_on_a_host_whose_kernels_differ_from_the_reference(monkeypatch,
                                                                              tmp_path):
    """A chapter stored on an AMD host while the reference is an Intel one would fail bitwise on the
    reference host: refused in one line, before anything runs, unless every chapter is re-executed
    and the host recorded as the new reference."""
    from course_lib.tools import book, op_fingerprints

    ref = op_fingerprints.reference()
    other = dict(ref, ops=dict(ref["ops"], **{"exp fwd": "0" * 16}))
    monkeypatch.setattr(book, "unsupported_host", lambda: None)
    monkeypatch.setattr(op_fingerprints, "host_fingerprints", lambda extra=None: other)
    monkeypatch.setattr(book, "execute_notebook", lambda *a, **k: pytest.fail("executed a chapter"))
    notebook = tmp_path / "ch01_x.ipynb"
    probe_notebook(notebook)
    with pytest.raises(ValueError,
                       match=r"computes 1 kernel fingerprints otherwise.*--new-reference"):
        book._cmd_execute(type("Args", (), {"paths": [notebook], "new_reference": False})())
    with pytest.raises(ValueError, match="give no notebook paths"):
        book._cmd_execute(type("Args", (), {"paths": [notebook], "new_reference": True})())
    assert (op_fingerprints.differences(ref, ref) == []
            and op_fingerprints.differences(other, ref) == ["exp fwd"])


def test_the_reference_record_is_what_the_per_host_tool_writes():
    """records/numerics_reference.json has the per-host tool's fields (ops, cpu, torch), 52
    operations and the short training, so `op_fingerprints.py --compare` reads it."""
    from course_lib.tools import op_fingerprints

    ref = op_fingerprints.reference()
    assert len(ref["ops"]) == 52 and all(len(v) == 16 for v in ref["ops"].values())
    assert (ref["training"].split()[:2] == ["AVX2", str(numerics.THREADS)] and ref["cpu"]
            and ref["torch"])


def test_the_github_workflows_run_the_readme_commands():
    """CI and publishing where maintainers look for them (.github/workflows), validated against
    GitHub's workflow schema offline by check-jsonschema's vendored copy."""
    workflows = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
    assert {w.name for w in workflows} >= {"test.yml", "book.yml"}
    check = shutil.which("check-jsonschema")
    if check is None:
        pytest.skip("check-jsonschema is not installed (pip install -r requirements.txt)")
    done = subprocess.run([check, "--builtin-schema", "vendor.github-workflows",
                           *map(str, workflows)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    test, book_ = ((ROOT / ".github" / "workflows" / n).read_text()
                   for n in ("test.yml", "book.yml"))
    assert "make test" in test and "pull_request" in test
    assert "make book" in book_ and "deploy-pages" in book_


def test_a_benchmark_restarts_itself_in_the_reference_environment(monkeypatch):
    """run_in_reference_environment: where a pinned variable is missing or other (torch reads them
    once, when it loads), the script restarts with the whole pin; where all are set, it goes on."""
    restarts = []
    monkeypatch.setattr(numerics.os, "execve",
                        lambda path, argv, env: restarts.append(env))
    for k, v in numerics.reference_environment().items():
        monkeypatch.setenv(k, v)
    numerics.run_in_reference_environment()
    assert restarts == []
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    numerics.run_in_reference_environment()
    assert len(restarts) == 1
    assert all(restarts[0][k] == v for k, v in numerics.REFERENCE.items())
