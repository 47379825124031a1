"""course_lib.tools.gpu_lane (``make gpu-test``): one line and exit 0 without CUDA, a summary of a
few lines on a GPU; and the ``gpu`` marker's tests are skipped with one reason where CUDA is
absent."""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from course_lib.tools import gpu_lane
from course_lib.tools.__main__ import main as tools_main

ROOT = Path(__file__).resolve().parent.parent


def test_without_cuda_the_lane_skips_with_one_line(monkeypatch, capsys):
    monkeypatch.setattr(gpu_lane, "cuda_available", lambda: False)
    monkeypatch.setattr(gpu_lane, "run_unit_tests",
                        lambda *a: pytest.fail("ran the tests without a GPU"))
    assert tools_main(["gpu-lane"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [gpu_lane.SKIP_LINE] and err == ""


@pytest.mark.skipif(torch.cuda.is_available() or shutil.which("make") is None,
                    reason="checks the skip of make gpu-test on a machine without CUDA, with make")
def test_make_gpu_test_skips_cleanly_without_cuda():
    # this test's interpreter, not the python3 on PATH (which may have no torch)
    done = subprocess.run(["make", "-s", "gpu-test", f"PYTHON={sys.executable}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [gpu_lane.SKIP_LINE] and done.stderr == ""


@pytest.mark.slow  # a pytest run in a subprocess
@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="checks the skip reason on a machine without CUDA")
def test_gpu_marked_tests_are_skipped_with_one_reason_without_cuda():
    done = subprocess.run([sys.executable, "-m", "pytest", "tests/test_gpu.py", "-q", "-rs", "-p",
                           "no:cacheprovider"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert (skipped and all("needs a CUDA GPU (torch.cuda.is_available() is False)" in line
                            for line in skipped))
    assert " passed" not in done.stdout and "failed" not in done.stdout


def _fake_lane(monkeypatch, unit_exit=0, chapter_error=None):
    monkeypatch.setattr(gpu_lane, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Fake GPU")
    unit = {
        "exit": unit_exit,
        "seconds": 300.0,
        "counts": {"passed": 978, "failed": unit_exit, "skipped": 5},
        "failures": ["FAILED tests/test_x.py::test_y - RuntimeError: boom"] if unit_exit else [],
    }
    monkeypatch.setattr(gpu_lane, "run_unit_tests", lambda workers, **limits: unit)
    chapters = [{"chapter": n, "name": f"ch{n:02d}", "seconds": 10.0 * n,
                 "error": chapter_error if n == 8 else None}
                for n in range(1, 16)]
    monkeypatch.setattr(gpu_lane, "run_chapters", lambda numbers, timeout, **limits: chapters)


def test_on_a_gpu_the_summary_is_a_few_lines_and_the_details_go_to_json(monkeypatch, capsys,
                                                                        tmp_path):
    _fake_lane(monkeypatch)
    assert tools_main(["gpu-lane", "--json", str(tmp_path / "lane.json")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("gpu-test on Fake GPU (torch ")
    assert "978 passed, 0 failed, 5 skipped" in lines[1] and "15 of 15 ran to the end" in lines[2]
    details = json.loads((tmp_path / "lane.json").read_text())
    assert details["unit"]["counts"]["passed"] == 978 and len(details["chapters"]) == 15


def test_on_a_gpu_a_failure_is_named_and_the_exit_status_is_1(monkeypatch, capsys):
    _fake_lane(monkeypatch, unit_exit=1, chapter_error="RuntimeError: view size is not compatible")
    assert tools_main(["gpu-lane"]) == 1
    out = capsys.readouterr().out
    assert ("FAILED tests/test_x.py::test_y" in out
            and "ch08 stopped: RuntimeError: view size" in out)
    assert len(out.splitlines()) <= 6


def test_pytest_counts_reads_the_summary_line():
    out = "....\nFAILED a::b\n= 2 failed, 970 passed, 5 skipped, 1 xfailed, 3 errors in 12.30s ="
    assert gpu_lane._pytest_counts(out) == {"failed": 2, "passed": 970, "skipped": 5, "xfailed": 1,
                                            "error": 3}
    assert gpu_lane._pytest_counts("") == {}


def test_chapters_run_in_the_hosts_environment_and_errors_are_one_line(monkeypatch):
    """Outputs are not compared and the pinned CPU environment does not apply: the kernel gets
    the host's environment, with this checkout on its import path."""
    seen = []

    def fake_execute(path, timeout, env, time_left):
        seen.append((Path(path).name, env))
        return "ValueError: a bad cell" if "ch02" in Path(path).name else None

    monkeypatch.setattr(gpu_lane, "execute_chapter", fake_execute)
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "host-value")
    results = gpu_lane.run_chapters([1, 2], timeout=5)
    assert ([r["chapter"] for r in results] == [1, 2]
            and [name[:4] for name, _ in seen] == ["ch01", "ch02"])
    assert results[0]["error"] is None and results[1]["error"] == "ValueError: a bad cell"
    env = seen[0][1]
    assert env["ATEN_CPU_CAPABILITY"] == "host-value" and str(ROOT) in env["PYTHONPATH"].split(":")


def test_a_bad_json_path_is_refused_before_any_work_and_the_file_is_written_atomically(
    monkeypatch, capsys, tmp_path
):
    """--json wrote its file with Path.write_text after the whole lane (issue 46): a folder or a
    device failed after hours of work, and a reader could see half a file. Now checked first, on any
    machine, and written through course_lib.utils.write_text_atomic, as eval's --json."""
    (tmp_path / "adir").mkdir()
    for path, why in ((tmp_path / "adir", "is a folder: name a file in it"),
                      ("/dev/null", "is not a regular file")):
        monkeypatch.setattr(gpu_lane, "cuda_available",
                            lambda: pytest.fail("worked before checking --json"))
        assert tools_main(["gpu-lane", "--json", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: --json {path} ") and why in err and err.count("\n") == 1
    _fake_lane(monkeypatch)
    written = []
    monkeypatch.setattr(gpu_lane, "write_text_atomic", lambda path, text: written.append(path))
    assert tools_main(["gpu-lane", "--json", str(tmp_path / "lane.json")]) == 0
    assert written == [str(tmp_path / "lane.json")]


def test_json_dash_writes_the_details_to_stdout_and_the_summary_to_stderr(monkeypatch, capsys):
    _fake_lane(monkeypatch)
    assert tools_main(["gpu-lane", "--json", "-"]) == 0
    out, err = capsys.readouterr()
    assert (json.loads(out)["unit"]["counts"]["passed"] == 978
            and err.startswith("gpu-test on Fake GPU"))


def test_progress_counts_read_a_run_stopped_before_its_summary():
    out = "..F.s [ 40%]\n.E..x\nnot a progress line: F.\n"
    assert gpu_lane._progress_counts(out) == {"passed": 6, "failed": 1, "error": 1, "skipped": 1,
                                              "xfailed": 1}


def _notebook(path, source):
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    nbformat.write(nb, path)
    return path


@pytest.mark.slow  # starts Jupyter kernels
def test_a_chapter_runs_in_a_child_its_error_is_one_line_and_the_time_limit_stops_it(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    good = _notebook(tmp_path / "good.ipynb", "x = 1 + 1")
    bad = _notebook(tmp_path / "bad.ipynb", "raise ValueError('a bad cell')")
    slow = _notebook(tmp_path / "slow.ipynb", "import time\ntime.sleep(120)")
    assert gpu_lane.execute_chapter(good, 60, env, None) is None
    assert gpu_lane.execute_chapter(bad, 60, env, None) == "ValueError: a bad cell"
    start = time.monotonic()
    assert gpu_lane.execute_chapter(slow, 600, env, 8.0) == gpu_lane.STOPPED
    assert time.monotonic() - start < 60  # stopped at its limit, kernel and all, not after 120 s


def test_chapters_past_the_time_limit_are_listed_not_run_and_are_not_failures(monkeypatch,
                                                                             capsys):
    calls = []
    monkeypatch.setattr(gpu_lane, "execute_chapter",
                        lambda path, timeout, env, left: calls.append(left) or gpu_lane.STOPPED)
    results = gpu_lane.run_chapters([1, 2], timeout=5, jobs=2, time_limit=30)
    assert all(r["not_run"] == gpu_lane.STOPPED and r["error"] is None for r in results)
    assert all(0 < left <= 30 for left in calls)
    results = gpu_lane.run_chapters([1, 2], timeout=5, time_limit=-1)  # the limit already passed
    assert [r["not_run"] for r in results] == ["the lane's time limit came first"] * 2
    lines = gpu_lane.summary("GPU", None, results)
    assert "0 of 2 ran to the end" in lines[1] and "2 not run or stopped" in lines[1]


def test_a_unit_run_stopped_by_its_time_limit_is_not_a_failure(monkeypatch, capsys):
    _fake_lane(monkeypatch)
    stopped = {"exit": None, "seconds": 100.0, "counts": {"passed": 900}, "failures": [],
               "timed_out": True}
    monkeypatch.setattr(gpu_lane, "run_unit_tests", lambda workers, **limits: stopped)
    assert tools_main(["gpu-lane", "--unit-time", "100", "--jobs", "4"]) == 0
    assert "900 passed when its time limit stopped it" in capsys.readouterr().out


@pytest.mark.parametrize("option", ["--jobs", "--unit-time", "--chapters-time"])
def test_limits_must_be_positive_whole_numbers(option, capsys):
    with pytest.raises(SystemExit) as stop:
        tools_main(["gpu-lane", option, "0"])
    assert stop.value.code == 2
    assert "must be a whole number of at least 1, got '0'" in capsys.readouterr().err
