"""Every script of benchmarks/: it runs with tiny settings (so that none can silently break again,
as attention_throughput.py did), it writes a record only when asked and never the shipped records
of course_lib/records/, and a bad argument is one line naming the problem and the fix, with status 2
before any work (the 2026-11-28 review: B2, B3, B4, B5; rows 30-59 and 99-105)."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch
from benchmark_loader import BENCHMARKS, ROOT, load_benchmark

RECORDS = ROOT / "course_lib" / "records"

# The scripts: every file of benchmarks/ that runs as one (bench_args.py and ch14_setup.py are
# shared modules). Each with settings that make it take seconds, and the option that names its
# record.
SCRIPTS = sorted(p.stem for p in BENCHMARKS.glob("*.py")
                 if 'if __name__ == "__main__"' in p.read_text())
TINY = {
    "ablation_ch14": (["--steps", "1", "--eval-batches", "1", "--seeds", "0", "--variants", "RoPE"],
                      "--json"),
    # a 60-step SFT start (right sometimes, which DPO needs; the default 300 steps were most of
    # the smoke test's time)
    "align_compare": (["--tiny", "--start-steps", "60", "--out-dir", "{tmp}/ac"], "--record"),
    "align_sampling": (["--tiny", "--out-dir", "{tmp}/ac"], "--record"),
    "align_speed": (["--repeats", "1", "--threads", "1"], "--json"),
    "attention_throughput": (["--rounds", "1", "--steps", "1"], None),
    "bpe": (["--repeats", "1", "--vocab-size", "260", "--naive-chars", "2000"], None),
    "chat_cache": (["--turns", "1", "--reply-tokens", "2", "--repeats", "1",
                    "--preset", "shakespeare-char-cpu"], "--out"),
    "chat_count_probe": (["--shipped", "--per-count", "1"], "--json"),
    "chat_model_runs": (["--shipped", "--name", "tiny", "--limit", "1"], "--json"),
    "chat_robustness": (["--limit", "3"], "--json"),
    "chat_scores": (["--models-dir", "{tmp}/chat", "--iters", "1", "--seeds", "0", "--no-base",
                     "--limit", "16"], "--record"),
    "chat_sft": (["--iters", "1", "--seeds", "0", "--out-dir", "{tmp}/chat"], None),
    "classify_speakers": (["--only", "probe last", "--seeds", "0", "--steps", "1"], "--out"),
    "eval_speed": (["--items", "1", "--repeats", "1", "--threads", "1", "--batch-size", "4"],
                   "--json"),
    "finetune_dates": (["--only", "dates full", "--seeds", "0", "--steps", "1", "--eval", "1"],
                       "--out"),
    "gptq_reference": (["--layers", "1", "--calibration", "2"], "--json"),
    "induction_long_context": (["--out", "{tmp}/ctx", "--block-size", "128", "--max-iters", "2",
                                "--passages", "4", "--max-length", "40"], "--json"),
    "induction_phase": (["--iters", "2", "--fixed-iters", "2",
                         "--probe-every", "1", "--seeds", "0"], "--json"),
    "kv_cache": (["--repeats", "1", "--preset", "shakespeare-char-cpu", "--prompt-len", "56"],
                 None),
    "linear_attention": (["--contexts", "8,16", "--iters", "1", "--seeds", "0",
                          "--eval-batches", "1", "--recall-iters", "1", "--pairs", "2"], "--json"),
    "moe_vs_dense": (["--iters", "2", "--seeds", "0", "--eval-batches", "1", "--load-every", "1",
                      "--variants", "dense", "MoE, no balancing"], "--out"),
    "norm_speed": (["--repeats", "2", "--shape", "2", "4", "8"], "--json"),
    "quantize": (["--val-windows", "2", "--calibration", "2", "--granularities", "group",
                  "--qat-steps", "1", "--seeds", "0", "--speed-repeats", "1",
                  "--embeddings", "int8", "--qat-bits", "3", "--control-gptq",
                  "--parts", "ptq", "qat", "speed", "calibration", "asym",
                  "--calibration-seeds", "1"],
                 "--json"),
    "quantize_int4": (["--repeats", "1", "--rows", "1", "--large-rows", "1", "--large", "64,32"],
                      "--json"),
    "gpu_speedrun": (["--device", "cpu", "--tiny", "--nanogpt-seconds", "60", "--search-time",
                      "0"], "--json"),
    "report_cards": (["--models", "bigram", "--limit", "2", "--work", "{tmp}/work"], "--json"),
    "rope_beyond_context": (["--steps", "1", "--eval-batches", "1", "--long", "72"], "--json"),
    "scale": (["--steps", "1", "--warmup", "0", "--rounds", "1", "--skip-compile",
               "--skip-torchrun"], "--json"),
    # one run of the five (--part 1/5: the smallest width), the path every part of a sweep takes
    "scaling": (["--budgets", "1.25e10", "--seeds", "5", "--no-predict", "--part", "1/5"], "--out"),
    "scaling_law_bootstrap": (["--resamples", "2"], "--json"),
    "seq2seq_dates": (["--steps", "1", "--threads", "1"], None),
    "speculative": (["--prompts", "1", "--tokens", "4", "--max-k", "2", "--repeats", "1",
                     "--draft-steps", "2"], "--json"),
    "speculative_mtp": (["--steps", "2", "--prompts", "1", "--tokens", "4", "--repeats", "1"],
                        "--json"),
    # seed 5 and a curve of 3 evaluations: the checks of speedrun_record() below
    "speedrun": (["--max-iters", "3", "--seeds", "5", "--curve-evals", "3"], "--json"),
    "speedrun_mtp": (["--max-iters", "2", "--seeds", "1",
                      "--cost-rounds", "1", "--cost-steps", "1"], "--json"),
    "speedrun_rope": (["--max-iters", "2", "--seeds", "1", "--evals", "1"], "--json"),
    "train_shakespeare_cpu": (["--max-iters", "1", "--precise-eval-iters", "1"], None),
}
# exit status 1 when its goal does not hold, as after 2 steps
GOAL_NOT_MET = {"speedrun", "gpu_speedrun"}
ORDER = sorted(SCRIPTS,
               key=lambda s: s == "chat_scores")  # chat_scores scores the models chat_sft trains


def records_digest() -> str:
    """One hash of every shipped record (names and bytes)."""
    h = hashlib.sha256()
    for path in sorted(RECORDS.rglob("*")):
        h.update(str(path.relative_to(RECORDS)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


def test_every_script_has_tiny_settings():
    """A new script gets its line in TINY, so that the test below runs it too."""
    assert sorted(TINY) == SCRIPTS


@pytest.fixture(scope="module")
def shared_tmp(tmp_path_factory):
    return tmp_path_factory.mktemp("benchmarks")


@pytest.mark.slow
@pytest.mark.parametrize("name", ORDER)
def test_each_script_runs_with_tiny_settings_and_writes_only_the_record_asked_for(name, shared_tmp):
    argv, option = TINY[name]
    argv = [a.replace("{tmp}", str(shared_tmp)) for a in argv]
    record = shared_tmp / f"{name}.json"
    before = records_digest()
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    command = [sys.executable, str(BENCHMARKS / f"{name}.py"), *argv,
               *([option, str(record)] if option else [])]
    done = subprocess.run(command, cwd=shared_tmp, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode in ((0, 1) if name in GOAL_NOT_MET else (0,)), (done.stdout[-2000:]
                                                                           + done.stderr[-3000:])
    assert "Traceback" not in done.stderr
    assert records_digest() == before, f"{name} changed course_lib/records/ without --update-record"
    if option:
        assert isinstance(json.loads(record.read_text()), dict)
    if name == "finetune_dates":  # review 15-m1: each run records the command that made it
        runs = json.loads(record.read_text()).values()
        assert runs and all(r["command"].startswith("python benchmarks/finetune_dates.py --only "
                                                    "'dates full'")
                            for r in runs)
    if name == "speedrun":
        speedrun_record(json.loads(record.read_text()), done.stdout)
    assert not [p for p in shared_tmp.rglob("*.tmp")] + [p for p in shared_tmp.rglob("*.partial")]


def speedrun_record(result: dict, stdout: str):
    """The speedrun benchmark (issue 24) on 3 steps: both presets, one run each, barely trained,
    each ending on the whole validation split, the speedrun's curve at steps 0 to 3."""
    assert "wall-time ratio speedrun / baseline" in stdout and "does NOT hold" in stdout
    speedrun = "shakespeare-char-speedrun"
    assert set(result["runs"]) == {"shakespeare-char-cpu", speedrun} and result["seeds"] == [5]
    for runs in result["runs"].values():
        [run] = runs
        assert run["wall_s"] <= run["wall_exit_s"] and run["val_loss"] > 2.5
        assert run["curve"][-1]["estimate"] == "whole validation split"
    # --curve-evals 3 on 3 steps: the speedrun evaluates at steps 0, 1, 2, 3
    assert [p["step"] for p in result["runs"][speedrun][0]["curve"][:-1]] == [0, 1, 2, 3]


def refused(capsys, run, *fragments) -> str:
    """``run()`` exits with status 2 before any work, its last line naming the problem."""
    with pytest.raises(SystemExit) as e:
        run()
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "error: " in err[-1] and "Traceback" not in "\n".join(err), err
    for fragment in fragments:
        assert fragment in err[-1], err[-1]
    return err[-1]


MUST_BE_1 = "must be at least 1, got 0"
BAD_ARGUMENTS = [  # (review row, script, argv, what the error line says)
    (34, "align_speed", ["--repeats", "0"], MUST_BE_1), (35, "align_speed",
                                                         ["--threads", "0"], MUST_BE_1),
    (36, "eval_speed", ["--items", "0"], MUST_BE_1), (37, "eval_speed",
                                                      ["--repeats", "0"], MUST_BE_1),
    (38, "chat_cache", ["--preset", "foo"], "unknown preset 'foo': choose one of"),
    (39, "kv_cache", ["--preset", "foo"], "unknown preset 'foo'"),
    (41, "bpe", ["--vocab-size", "10"], "must be at least 257, got 10"),
                 (42, "bpe", ["--repeats", "0"], MUST_BE_1),
    (43, "attention_throughput", ["--rounds", "0"], MUST_BE_1),
    (45, "scale", ["--steps", "0"], MUST_BE_1), (46, "speedrun", ["--max-iters", "0"], MUST_BE_1),
    (47, "train_shakespeare_cpu", ["--seed", "-1"], "argument --seed: must be at least 0"),
    (48, "seq2seq_dates", ["--steps", "0"], MUST_BE_1), (49, "seq2seq_dates",
                                                         ["--threads", "0"], MUST_BE_1),
    (53, "report_cards", ["--models", "foo"], "unknown model(s) ['foo']: choose among bigram"),
    (54, "moe_vs_dense", ["--iters", "0"], MUST_BE_1), (55, "moe_vs_dense", ["--seeds", "a,b"],
                                                        "write seeds as 0,1,2"),
    (56, "finetune_dates", ["--steps", "0"], MUST_BE_1), (57, "classify_speakers",
                                                          ["--steps", "0"], MUST_BE_1),
    (58, "chat_sft", ["--iters", "0"], MUST_BE_1), (59, "speedrun_rope",
                                                    ["--evals", "0"], MUST_BE_1),
    (101, "chat_cache", ["--turns", "0"], MUST_BE_1), (102, "report_cards",
                                                       ["--limit", "0"], MUST_BE_1),
    (103, "finetune_dates", ["--seeds", "-1"], "must be at least 0, got -1"),
    (104, "align_compare", ["--budget", "0", "--tiny"], MUST_BE_1),
    (105, "align_compare", ["--seeds", "1", "--tiny"],
     "--tiny sets the budget and the seeds: leave out --seeds"),
    (None, "align_sampling", ["--budgets", "0"], MUST_BE_1),
    (None, "finetune_dates", ["--out", "x.json", "--update-record"], "name two files: give one"),
    (None, "chat_sft", ["--collect", "."], "name it with --record FILE, or --update-record"),
    (None, "ablation_ch14", ["--seeds", "-2"], "must be at least 0"),
    (None, "scaling_law_bootstrap", ["--resamples", "0"], MUST_BE_1),
    (None, "scaling_law_bootstrap", ["--update-record", "--resamples", "5"],
     "--update-record writes the record chapter 19 prints: 400 resamples, seed 0"),
    (None, "scale", ["--update-record", "--skip-compile"],
     "--update-record writes the record chapter 12 prints"),
    (None, "scale", ["--update-record", "--steps", "5"],
     "--update-record writes the record chapter 12 prints"),
    (None, "scale", ["--rounds", "0"], MUST_BE_1),
    (None, "linear_attention", ["--parts", "speed"],
     "--parts: choose from memory, compare, recall"),
    (None, "linear_attention", ["--iters", "0"], MUST_BE_1),
    (None, "linear_attention", ["--arms", "A,X"], "--arms: choose from A, A-full, L, LLLA; got X"),
    (None, "rope_beyond_context", ["--seed", "x"], "expected a whole number, got 'x'"),
    (None, "speculative", ["--tokens", "60"], "must fit in block_size 64"),
    (None, "speculative", ["--repeats", "0"], MUST_BE_1),
    (None, "speculative_mtp", ["--tokens", "60"], "must fit in block_size 64"),
    (None, "speculative_mtp", ["--checkpoint", "none.pt"], "no such file"),
    (None, "speedrun_mtp", ["--cost-rounds", "0"], MUST_BE_1),
    (None, "speedrun_mtp", ["--weight", "-1"], "mtp_weight must be in [0, 10]"),
    (None, "quantize", ["--qat-steps", "0"], MUST_BE_1), (None, "quantize", ["--seeds", "a"],
                                                          "write seeds as 0,1,2"),
    (None, "quantize", ["--qat-bits", "1"], "must be at least 2, got 1"),
    (None, "quantize", ["--embeddings", "int4"], "invalid choice: 'int4'"),
    (None, "quantize", ["--threads", "0"], MUST_BE_1),
    (None, "report_cards", ["--work", "/dev/null/x"],
     "--work /dev/null/x: a file stands where a folder is needed"),
    (None, "chat_model_runs", ["--shipped", "--name", "x", "--cpu-minutes", "-1"],
     "must be at least 0, got -1"),
    (None, "chat_model_runs", ["--checkpoint", "none.pt", "--name", "x"],
     "is not a file: give a chat-sft run's"),
    (None, "chat_model_runs", ["--shipped"], "--name is needed"),
    (None, "chat_model_runs", ["--score-v3", "x"], "expected NAME=CKPT with CKPT a file"),
    (None, "chat_model_runs", ["--rescore-letters", "x"], "expected NAME=CKPT with CKPT a file"),
    (None, "chat_model_runs", ["--score-blind-identity", "x"],
     "expected NAME=CKPT with CKPT a file"),
    (None, "chat_model_runs",
     ["--rescore-letters", f"x={ROOT / 'course_lib' / 'weights' / 'chat-char-cpu.pt'}"],
     "--rescore-letters x: no such run in the record"),
    (None, "chat_count_probe", ["--per-count", "0"], MUST_BE_1),
    (None, "chat_count_probe", ["--per-count", "2"], "no model: give --model NAME=CKPT"),
    (None, "chat_count_probe", ["--model", "x=none.pt"], "expected NAME=CKPT with CKPT a file"),
    (None, "chat_model_runs", ["--paired", "x"], "expected B=A, two run names"),
    (None, "chat_model_runs", ["--paired", "x=chat-char-cpu"], "--paired x: no such run"),
    (None, "chat_model_runs", ["--paired", "x=y", "--from", "none.json"],
     "--from none.json is not a file"),
    (None, "chat_robustness", ["--checkpoint", "none.pt"],
     "is not a file: give a chat-sft run's ckpt.pt"),
    (None, "gptq_reference", ["--reference", "none"], "none: no gptq.py and quant.py there"),
    (None, "gptq_reference", ["--update-record"], "give --reference PATH"),
    (None, "gptq_reference", ["--whole-model"], "--whole-model runs the reference"),
    (None, "quantize", ["--calibration-seeds", "x"], "write seeds as 0,1,2"),
    (None, "quantize_int4", ["--rows", "0"], "each at least 1"),
    (None, "quantize_int4", ["--large", "30,8"], "K must be a multiple of 32"),
    (None, "quantize_int4", ["--repeats", "0"], MUST_BE_1),
    (None, "induction_long_context", ["--max-length", "200"],
     "needs a context of 400, more than --block-size 256"),
    (None, "induction_long_context", ["--passages", "0"], MUST_BE_1),
    (None, "induction_long_context",
     ["--examine-only", "--out", "none"], "none holds no checkpoint"),
    (None, "gpu_speedrun", ["--device", "cpu"], "give --nanogpt PATH (a checkout of"),
    (None, "gpu_speedrun", ["--nanogpt", "nowhere"], "no train.py, model.py, configurator.py"),
    (None, "gpu_speedrun", ["--nanogpt-seconds", "0", "--device", "cpu"],
     "--nanogpt-seconds must be above 0"),
    # the default device is cuda: refused in one line on a machine without one
    *([] if torch.cuda.is_available() else
      [(None, "gpu_speedrun", ["--nanogpt-seconds", "60"], "--device cuda: no CUDA GPU here")]),
]


@pytest.mark.parametrize("row, name, argv, message", BAD_ARGUMENTS,
                         ids=[f"{n}-{a[0]}" for _, n, a, _ in BAD_ARGUMENTS])
def test_a_bad_argument_is_one_line_and_status_2(row, name, argv, message,
                                                 capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    module = load_benchmark(name, f"bench_{name}")
    refused(capsys, lambda: module.main(argv), message)
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
@pytest.mark.parametrize("name", ["kv_cache", "attention_throughput", "chat_sft"])
def test_a_device_this_machine_lacks_is_refused(name, capsys):  # rows 40, 44
    refused(capsys, lambda: load_benchmark(name, f"bench_{name}").main(["--device", "cuda"]),
            "device 'cuda' is not available on this machine")


def test_a_record_path_is_checked_before_any_work(capsys, tmp_path):
    """A folder, a checkpoint and '-' as a record: refused in one line, before anything runs."""
    ckpt = tmp_path / "ckpt.pt"
    torch.save({"w": torch.zeros(1)}, ckpt)
    chat_cache = load_benchmark("chat_cache", "bench_chat_cache")
    refused(capsys, lambda: chat_cache.main(["--out", str(tmp_path)]),
            "is a folder: name a file in it")
    refused(capsys, lambda: chat_cache.main(["--out", str(ckpt)]), "holds a checkpoint")
    refused(capsys, lambda: chat_cache.main(["--out", "-"]), "name one")
    moe = load_benchmark("moe_vs_dense", "bench_moe_vs_dense")
    part = tmp_path / "a.json"
    part.write_text(json.dumps({"iters": 2, "seeds": "0", "command": "x", "runs": []}))
    refused(capsys, lambda: moe.main(["--merge", str(part), "--out", str(part)]),
            "is this command's input")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "ckpt.pt"]


def test_a_trial_run_writes_no_record(capsys, tmp_path, monkeypatch):
    """Review row 51: chat_cache.py with no --out printed its numbers and replaced the shipped
    record; now it prints them only."""
    monkeypatch.chdir(tmp_path)
    before = records_digest()
    chat_cache = load_benchmark("chat_cache", "bench_chat_cache")
    argv = ["--turns", "1", "--reply-tokens", "2", "--repeats", "1",
            "--preset", "shakespeare-char-cpu", "--threads", "1"]
    assert chat_cache.main(argv) == 0
    assert '"same_tokens": true' in capsys.readouterr().out
    assert records_digest() == before and list(tmp_path.iterdir()) == []


def test_report_cards_makes_its_work_folder_only_for_what_it_writes_there(capsys, tmp_path,
                                                                          monkeypatch):
    """Issue 46: report_cards.py made runs/report_cards/ before anything, and left it empty behind a
    refused or a trial run; only the fine-tunes write there, and they make it."""
    monkeypatch.chdir(tmp_path)
    report_cards = load_benchmark("report_cards", "bench_report_cards")
    monkeypatch.setattr(report_cards, "report_card", lambda *a,
                        **k: {"bits_per_byte": 1.0, "tasks": []})
    monkeypatch.setattr(report_cards, "text_nll", lambda model, ids: (1.0, 1))
    report_cards.main(["--models", "bigram", "--limit", "2"])
    assert "bigram: bpb 1.0" in capsys.readouterr().out and list(tmp_path.iterdir()) == []


def test_the_chat_models_card_holds_its_robustness_row(tmp_path, monkeypatch):
    """Issue 54: report_cards.py's ``chat`` model (the shipped chat model) gets, beside the tasks,
    its score on the frozen robustness set, overall and per task, with the set's SHA-256."""
    report_cards = load_benchmark("report_cards", "bench_report_cards")
    monkeypatch.setattr(report_cards, "report_card", lambda *a,
                        **k: {"bits_per_byte": 1.0, "tasks": []})
    monkeypatch.setattr(report_cards, "text_nll", lambda model, ids: (1.0, 1))
    row = {"score": 0.5, "stderr": 0.1, "interval": [0.3, 0.7], "n": 4}
    monkeypatch.setattr(report_cards, "score_robustness", lambda m,
                        t: {"all": row, "dates": row, "rows": []})
    report_cards.main(["--models", "chat", "--limit", "2", "--json", str(tmp_path / "cards.json")])
    card = json.loads((tmp_path / "cards.json").read_text())["models"]["chat"]
    assert card["robustness"] == {"sha256": report_cards.ROBUSTNESS_V2_SHA256,
                                  "set": "version 2 (the development set)",
                                  "all": row, "dates": row}
    assert "chapter 17's shipped chat model" in card["description"]

def test_a_progress_write_never_replaces_a_whole_record(tmp_path):
    """bench_args.RecordFile: progress goes to a new file, or one the run continues; not over a
    whole record another run made (only the finished record replaces it)."""
    bench_args = load_benchmark("bench_args")
    whole = tmp_path / "whole.json"
    whole.write_text('{"runs": [1, 2, 3]}')
    fresh = bench_args.RecordFile(whole)
    fresh.progress({"runs": [1]})
    assert json.loads(whole.read_text()) == {"runs": [1, 2, 3]}
    fresh.finish({"runs": [4, 5]})
    assert json.loads(whole.read_text()) == {"runs": [4, 5]}
    bench_args.RecordFile(whole, continues=True).progress({"runs": [4, 5, 6]})
    assert json.loads(whole.read_text()) == {"runs": [4, 5, 6]}
    new = bench_args.RecordFile(tmp_path / "new.json")
    new.progress({"runs": [1]})
    assert json.loads((tmp_path / "new.json").read_text()) == {"runs": [1]}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.json", "whole.json"]


def test_moe_vs_dense_docstring_table_is_the_records():
    """Review 20-m5: the docstring's table had gone stale (1.710 +- 0.008 over two seeds, where the
    record holds three). Each cell is the mean +- standard deviation of its record's runs, one
    column per variant the record holds, in its order (a variant a record lacks is a dash)."""
    import re
    import statistics

    doc = (BENCHMARKS / "moe_vs_dense.py").read_text()
    for steps in (400, 800, 1600):
        record = json.loads((RECORDS / f"moe_vs_dense_{steps}.json").read_text())
        runs = record["runs"]
        row = re.search(rf"^ +{steps} +(.*)$", doc, re.M).group(1)
        # a dash per absent one
        assert len(re.findall(r"(?<!\S)-(?!\S)", row)) + len(record["variants"]) == 5, row
        cells = []
        for variant in record["variants"]:
            losses = [r["val_loss"] for r in runs if r["variant"] == variant]
            cells.append(f"{statistics.mean(losses):.3f} +- {statistics.stdev(losses):.3f}")
        assert re.findall(r"\d\.\d{3} \+- \d\.\d{3}", row) == cells, (steps, row, cells)


def test_chat_model_runs_rejudges_the_stored_replies_by_todays_rules():
    """--rejudge: a stored reply the old lenient spelling rule counted right (``s-w-e-e-t-e``) is
    wrong by the exact rule, the run's scores follow,
    and the shipped record is already judged so."""
    runs = load_benchmark("chat_model_runs", "bench_chat_model_runs")
    from course_lib.chat.robustness import is_right, load_robustness_set
    items = load_robustness_set()
    spelling = next(n for n, i in enumerate(items) if i["task"] == "spelling")
    replies = [{"request": i["request"], "reply": i["answer"], "right": True} for i in items]
    replies[spelling]["reply"] = items[spelling]["answer"] + "-e"
    record = runs.rejudge({"runs": [{"name": "x", "robustness_replies": replies}]})
    run = record["runs"][0]
    assert run["robustness_replies"][spelling]["right"] is False
    assert (run["robustness"]["spelling"]["score"] < 1
            and run["robustness"]["all"]["n"] == len(items))
    shipped = json.loads((RECORDS / "chat_model_runs.json").read_text())
    for r in shipped["runs"]:
        assert [x["right"] for x in r["robustness_replies"]] == [
            is_right(i, x["reply"]) for i, x in zip(items, r["robustness_replies"])], r["name"]



def test_the_chat_records_judge_letters_in_template_by_the_last_number():
    """Issue 54: every run whose in-template letters replies are stored is judged by today's rule
    (``chat.scores.judge``, the last number in the reply) and its letters score follows from them;
    the worked-reply runs, marked wrong by exact match before, are among them."""
    from course_lib.chat.data import load_conversations
    from course_lib.chat.scores import judge, reference

    refs = [reference(c) for c in load_conversations("test") if c["task"] == "letters"]
    judged = 0
    for name in ("chat_model_runs", "chat_count_first_runs"):
        for run in json.loads((RECORDS / f"{name}.json").read_text())["runs"]:
            row = next((r for r in run.get("in_template_rows", []) if r["task"] == "letters"
                        and "outputs" in r), None)
            if row is None:
                continue
            assert judge("letters", row["outputs"], refs) == row["per_item"], run["name"]
            assert run["in_template"]["letters"]["score"] == sum(row["per_item"]) / len(refs)
            judged += 1
    assert judged >= 21  # 12 of chat_model_runs (the models at hand), the 9 count-first runs


def test_rescore_letters_scores_a_recorded_run_again_and_keeps_its_replies(tmp_path):
    """--rescore-letters NAME=CKPT: the run's in-template letters row is the shipped model's score
    by today's rule, its replies stored (a run that kept no per-item rows gets one); other runs and
    rows are untouched."""
    runs = load_benchmark("chat_model_runs", "bench_chat_model_runs")
    from course_lib.chat.data import load_conversations
    from course_lib.chat.engine import load_chat_model
    from course_lib.chat.scores import score_task

    other = {"name": "y", "in_template": {"letters": {"score": 0.5}}}
    source = tmp_path / "in.json"
    source.write_text(json.dumps({"runs": [{"name": "x: a run", "in_template": {
        "letters": {"score": 0.0}, "dates": {"score": 1.0}}}, other]}))
    from course_lib.chat.engine import CHAT_MODEL_PATH as shipped
    out = tmp_path / "out.json"
    assert runs.main(["--rescore-letters", f"x={shipped}", "--limit", "30", "--from", str(source),
                      "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    x = record["runs"][0]
    model, tokenizer = load_chat_model(shipped)
    expected = score_task(model.float(), tokenizer, load_conversations("test")[:30], "letters")
    assert x["in_template"]["letters"]["score"] == expected["score"]
    assert x["in_template"]["dates"] == {"score": 1.0} and record["runs"][1] == other
    assert x["in_template_rows"] == [{"task": "letters", "per_item": expected["per_item"],
                                      "outputs": expected["outputs"]}]
    assert "last integer" in record["letters_rule"]


def test_chat_robustness_scores_a_blind_set_into_its_own_record(tmp_path):
    """--set v4 (and v3): the set's requests scored per model, paired with the model before, into
    a record holding the set's SHA-256, what it is held out from and each reply."""
    bench = load_benchmark("chat_robustness", "bench_chat_robustness")
    from course_lib.chat import robustness as rb
    from course_lib.chat.engine import CHAT_MODEL_PATH, CHAT_V1_MODEL_PATH

    out = tmp_path / "v4.json"
    assert bench.main(["--set", "v4", "--limit", "2", "--checkpoint", str(CHAT_V1_MODEL_PATH),
                       "--checkpoint", str(CHAT_MODEL_PATH), "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["set"]["sha256"] == rb.ROBUSTNESS_V4_SHA256
    assert "--wide-identity" in record["set"]["held_out_check"]
    assert "--word-anywhere" in record["set"]["held_out_check"]
    second = record["models"][1]
    assert [r["request"] for r in second["v4_replies"]] == [
        i["request"] for i in rb.load_robustness_set_v4()[:2]]
    assert second["v4_minus_previous"]["minus"] == record["models"][0]["checkpoint"]


def test_score_blind_identity_stores_each_reply_and_pairs_it(tmp_path):
    """--score-blind-identity NAME=CKPT: the run gets the blind identity set's score and replies
    (the shipped model's, as the engine gives them), the set's SHA-256 goes in the record, and
    --paired compares the set item by item where both runs have it."""
    runs = load_benchmark("chat_model_runs", "bench_chat_model_runs")
    from course_lib.chat.engine import load_chat_model
    from course_lib.chat.identity import BLIND_SHA256, blind_identity_set
    from course_lib.chat.robustness import load_robustness_set_v2, score_robustness

    source = tmp_path / "in.json"
    source.write_text(json.dumps({"runs": [{"name": "x: a run"}]}))
    from course_lib.chat.engine import CHAT_MODEL_PATH as shipped
    out = tmp_path / "out.json"
    assert runs.main(["--score-blind-identity", f"x={shipped}", "--limit", "6", "--from",
                      str(source), "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    model, tokenizer = load_chat_model(shipped)
    expected = score_robustness(model.float(), tokenizer, blind_identity_set()[:6])
    x = record["runs"][0]
    assert x["identity_blind"]["score"] == expected["all"]["score"]
    assert [r["reply"] for r in x["identity_blind_replies"]] == [
        r["reply"] for r in expected["rows"]]
    assert record["identity_blind_sha256"] == BLIND_SHA256
    x["v2_replies"] = [{"request": i["request"], "reply": "", "right": False}
                       for i in load_robustness_set_v2()]
    x["in_template_rows"] = []
    y = {**x, "name": "y", "identity_blind_replies": [
        {**r, "right": True} for r in x["identity_blind_replies"]]}
    paired = runs.compare_pairs({"runs": [x, y]}, [("y", "x")])
    wrong = sum(not r["right"] for r in expected["rows"])
    assert paired["blind identity"]["diff"] == pytest.approx(wrong / 6)
    assert paired["blind identity"]["items_better"] == wrong
    del y["identity_blind_replies"]  # a run without the set: the key is left out, not an error
    assert "blind identity" not in runs.compare_pairs({"runs": [x, y]}, [("y", "x")])


def test_score_v4_scores_a_run_once(tmp_path, capsys):
    """--score-v4 NAME=CKPT: the run gets version 4's score and replies (the model's, as the engine
    gives them) and the set's SHA-256 goes in the record; a second --score-v4 of the same run is
    refused in one line (version 4 is scored once per model)."""
    runs = load_benchmark("chat_model_runs", "bench_chat_model_runs")
    from course_lib.chat.engine import CHAT_MODEL_PATH as shipped
    from course_lib.chat.engine import load_chat_model
    from course_lib.chat.robustness import (ROBUSTNESS_V4_SHA256, load_robustness_set_v4,
                                            score_robustness)

    source, out = tmp_path / "in.json", tmp_path / "out.json"
    source.write_text(json.dumps({"runs": [{"name": "x: a run"}]}))
    args = ["--score-v4", f"x={shipped}", "--limit", "3", "--json", str(out)]
    assert runs.main(args + ["--from", str(source)]) == 0
    record = json.loads(out.read_text())
    model, tokenizer = load_chat_model(shipped)
    expected = score_robustness(model.float(), tokenizer, load_robustness_set_v4()[:3])
    x = record["runs"][0]
    assert x["robustness_v4"]["all"]["score"] == expected["all"]["score"]
    assert [r["reply"] for r in x["v4_replies"]] == [r["reply"] for r in expected["rows"]]
    assert record["robustness_v4_sha256"] == ROBUSTNESS_V4_SHA256
    capsys.readouterr()
    with pytest.raises(SystemExit):
        runs.main(args + ["--from", str(out)])
    assert "already scored on version 4" in capsys.readouterr().err
    # the same checkpoint under another run's name: refused too (by its SHA-256)
    record["runs"].append({"name": "y: the same model again"})
    out.write_text(json.dumps(record))
    with pytest.raises(SystemExit):
        runs.main(["--score-v4", f"y={shipped}", "--limit", "3", "--json", str(out), "--from",
                   str(out)])
    assert "already scored on version 4 (as x)" in capsys.readouterr().err


def test_paired_runs_resample_items_with_their_seeds():
    """--paired B=A ...: each item's difference is averaged over the seeds' pairs and the interval
    resamples items, so an item better in one seed of three counts as a third of an item (not as
    one independent pair among three); runs scored on sets of other lengths are refused."""
    runs = load_benchmark("chat_model_runs", "bench_chat_model_runs")
    from course_lib.chat.robustness import load_robustness_set_v2
    from course_lib.evaluation import bootstrap_interval

    items = load_robustness_set_v2()

    def run(name, first_right):
        replies = [{"request": i["request"], "reply": "", "right": k == 0 and first_right}
                   for k, i in enumerate(items)]
        return {"name": name, "v2_replies": replies,
                "in_template_rows": [{"task": "letters", "per_item": [1.0, 0.0]}]}

    record = {"runs": [run(f"b{s}", s == 0) for s in range(3)] + [run(f"a{s}", False)
                                                                 for s in range(3)]}
    out = runs.compare_pairs(record, [(f"b{s}", f"a{s}") for s in range(3)])
    third = [1 / 3] + [0.0] * (len(items) - 1)  # right in seed 0 only: a third of the item
    assert out["v2 all"]["diff"] == pytest.approx(1 / 3 / len(items))
    assert out["v2 all"]["interval"] == list(bootstrap_interval(third))
    assert (out["v2 all"]["items_better"], out["v2 all"]["items_worse"]) == (1, 0)
    record["runs"][0]["in_template_rows"][0]["per_item"] = [1.0]  # scored on another set
    with pytest.raises(ValueError, match="different lengths"):
        runs.compare_pairs(record, [(f"b{s}", f"a{s}") for s in range(3)])
    letters = out["in-template letters"]
    assert letters["diff"] == 0 and letters["items_better"] == letters["items_worse"] == 0


def test_paired_runs_add_version_3_and_the_development_sets_together_when_scored():
    """--paired on runs scored on version 3 too: its items by task, and both development sets
    together (``v2+v3 all``, and ``v2+v3 spelling and letters``: the spelling and letters items of
    both, which the --word-anywhere pre-registration measures); a run without version 3 has none."""
    runs = load_benchmark("chat_model_runs", "bench_chat_model_runs")
    from course_lib.chat.robustness import load_robustness_set_v2, load_robustness_set_v3

    v2, v3 = load_robustness_set_v2(), load_robustness_set_v3()

    def run(name, right_task):
        replies = lambda items: [{"request": i["request"], "reply": "",
                                  "right": i["task"] == right_task} for i in items]
        return {"name": name, "v2_replies": replies(v2), "v3_replies": replies(v3),
                "in_template_rows": []}

    record = {"runs": [run("b", "spelling"), run("a", None)]}
    out = runs.compare_pairs(record, [("b", "a")])
    n_spelling = sum(i["task"] == "spelling" for i in v2 + v3)
    n_both = sum(i["task"] in ("spelling", "letters") for i in v2 + v3)
    assert out["v3 spelling"]["diff"] == 1.0 and out["v3 letters"]["diff"] == 0.0
    assert out["v2+v3 all"]["diff"] == pytest.approx(n_spelling / len(v2 + v3))
    assert out["v2+v3 spelling and letters"]["diff"] == pytest.approx(n_spelling / n_both)
    assert out["v2+v3 spelling and letters"]["items_better"] == n_spelling
    for r in record["runs"]:
        del r["v3_replies"]
    assert not [k for k in runs.compare_pairs(record, [("b", "a")]) if k.startswith("v3")
                or k.startswith("v2+v3")]


def test_a_scored_run_joins_the_record_and_keeps_what_other_modes_wrote(tmp_path):
    """--shipped/--checkpoint --json FILE adds the run to FILE's runs and keeps the record's other
    keys (the pre-registration, the letters rule, the v3 command) rather than dropping them."""
    runs = load_benchmark("chat_model_runs", "bench_chat_model_runs")
    out = tmp_path / "record.json"
    out.write_text(json.dumps({"runs": [{"name": "old"}], "preregistration": {"text": "p"},
                               "letters_rule": "last number"}))
    assert runs.main(["--shipped", "--name", "new: the shipped model", "--limit", "1",
                      "--json", str(out)]) == 0
    record = json.loads(out.read_text())
    assert [r["name"] for r in record["runs"]] == ["old", "new: the shipped model"]
    assert record["preregistration"] == {"text": "p"} and record["letters_rule"] == "last number"
