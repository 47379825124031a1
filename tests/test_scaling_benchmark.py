"""benchmarks/scaling.py (chapter 19's sweep): bad arguments are refused in one line, the prediction
keeps to the family and to 4 passes over the text, and a merge of unfinished parts writes
nothing."""
import json

import numpy as np
import pytest
from benchmark_loader import load_benchmark

from course_lib.scaling.isoflop import FAMILY, plan_run
from course_lib.scaling import LossLaw



@pytest.fixture(scope="module")
def bench():
    return load_benchmark("scaling", "scaling_benchmark")


@pytest.mark.parametrize("argv, message",
                         [(["--budgets", "3e11"], "no shapes are chosen for budget"),
                                           (["--predict-factor", "2"], "at least 3x the largest"),
                                           (["--part", "3/2"], "1 <= K <= N"),
                          (["--part", "x"], "write K/N"),
                                           (["--seeds", "1", "1"], "a seed is repeated"),
                                           (["--seeds", "-1"],
                                            "argument --seeds: must be at least 0"),
                                           (["--predict-factor", "nan"], "at least 3x the largest"),
                                           (["--resume"], "name it with --out FILE"),
                                           (["--out", "x.json", "--update-record"],
                                            "name two files")])
def test_bad_arguments_are_refused(bench, argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        bench.parse_args(argv)
    assert e.value.code == 2 and message in capsys.readouterr().err


def test_every_window_is_five_sizes_within_four_epochs(bench):
    for budget in bench.BUDGETS:
        plans = [plan_run(s, budget, 65, 1_003_854) for s in bench.SIZES[budget]]
        assert len(plans) == 5 and all(p["epochs"] <= bench.MAX_EPOCHS for p in plans)
        assert all(s in FAMILY for s in bench.SIZES[budget])


def test_prediction_keeps_to_the_family_and_four_epochs(bench):
    law = LossLaw(E=1.3, A=5.0, B=60.0, alpha=0.25, beta=0.33)
    runs = []
    for budget in bench.BUDGETS:
        for shape in bench.SIZES[budget]:
            plan = plan_run(shape, budget, 65, 1_003_854)
            runs.append(dict(plan,
                             loss=float(law(plan["N"], plan["D"])) + 0.002 * np.sin(plan["N"])))
    pred = bench.predict(runs, 1_003_854, 65, 3.0, bench.BUDGETS + [4e11])
    # 3x every budget trained, not only the sweep's
    assert pred["budget"] == 3 * 4e11 and pred["shape"] in FAMILY
    i = FAMILY.index(pred["shape"])
    assert pred["train"] == FAMILY[i - 1:i + 2]  # the choice and its two neighbours in width
    assert pred["epochs"] <= bench.MAX_EPOCHS
    assert set(pred["candidates"]) == set(FAMILY)
    assert pred["predicted_loss"] == pytest.approx(min(
        v for s, v in pred["candidates"].items()
        if plan_run(s, pred["budget"], 65, 1_003_854)["epochs"] <= bench.MAX_EPOCHS), abs=1e-4)


def test_merge_of_missing_or_unfinished_parts_writes_nothing(bench, tmp_path, capsys):
    part = tmp_path / "a.json"
    part.write_text(json.dumps({"command": "x", "runs": []}))
    out = tmp_path / "out.json"
    # a missing part: refused before any work (review 2026-11-28, row 100)
    with pytest.raises(SystemExit) as e:
        bench.main(["--merge", str(part), str(tmp_path / "missing.json"), "--out", str(out)])
    assert (e.value.code == 2 and "missing.json'] not found" in capsys.readouterr().err
            and not out.exists())
    with pytest.raises(SystemExit, match="not merged: .* not finished yet"):
        bench.main(["--merge", str(part), "--out", str(out)])
    assert not out.exists()


def fake_training(bench, monkeypatch, tmp_path,
                  law=LossLaw(E=1.3, A=5.0, B=60.0, alpha=0.25, beta=0.33), watch=None):
    """No training: each run's loss from a known law plus a small seed term; ``watch`` (a path) is
    read whenever a held-out run starts, and what is on disk then is kept in the list returned."""
    seen = []

    def fake_train(plan, *args, seed=1337, **kwargs):
        # a held-out run: what is on disk now?
        if watch is not None and plan["budget"] > max(bench.BUDGETS):
            seen.append(json.loads(watch.read_text()))
        loss = float(law(plan["N"], plan["D"])) + 0.001 * (seed % 7)
        return dict(plan, seed=seed, loss=round(loss, 5), train_s=0.0, curve=[])

    monkeypatch.setattr(bench, "train_planned", fake_train)
    monkeypatch.setattr(bench, "FIRST_WINDOWS", tmp_path / "no_first_windows.json")
    return seen


def test_the_prediction_is_on_disk_before_any_held_out_run_starts(bench, tmp_path, monkeypatch):
    out = tmp_path / "sweep.json"
    seen = fake_training(bench, monkeypatch, tmp_path, watch=out)
    bench.main(["--out", str(out)])
    record = json.loads(out.read_text())
    pred = record["prediction"]
    assert len(record["runs"]) == sum(len(v) for v in bench.SIZES.values()) * len(bench.SEEDS)
    assert len(seen) == len(record["held_out"]) == 3 * len(bench.SEEDS)
    assert all(s["prediction"] == pred for s in seen) and seen[0]["held_out"] is None
    assert all(r["finished_at"] <= pred["made_at"] for r in record["runs"])
    assert all(r["started_after_prediction"] == pred["made_at"] <= r["finished_at"]
               for r in record["held_out"])
    assert {(r["shape"], r["seed"])
            for r in record["held_out"]} == {(s, k) for s in pred["train"] for k in bench.SEEDS}
    assert pred["budget"] == 3 * max(bench.BUDGETS)
    assert record["predictions"] == [pred]
    # a file name, not this machine's path
    assert record["command"] == "python benchmarks/scaling.py --out sweep.json"


def test_parts_side_by_side_merge_into_the_record_one_process_makes(bench, tmp_path, monkeypatch):
    fake_training(bench, monkeypatch, tmp_path)
    whole, a, b = tmp_path / "whole.json", tmp_path / "a.json", tmp_path / "b.json"
    bench.main(["--out", str(whole), "--seeds", "1", "2"])
    for k, part in ((1, a), (2, b)):  # the sweep in two parts
        bench.main(["--part", f"{k}/2", "--out", str(part), "--seeds", "1", "2"])
    merged = tmp_path / "merged.json"
    bench.main(["--merge", str(a), str(b), "--out", str(merged), "--seeds", "1", "2",
                "--no-held-out"])
    # the held-out runs in two parts, each from a copy of the record with its prediction
    for part in (a, b):
        part.write_text(merged.read_text())
        bench.main(["--resume", "--part", f"{1 + (part == b)}/2", "--out", str(part), "--seeds",
                    "1", "2"])
    assert 0 < len(json.loads(a.read_text())["held_out"]) < 6
    bench.main(["--resume", "--merge", str(a), str(b), "--out", str(merged), "--seeds", "1", "2"])
    one, two = json.loads(whole.read_text()), json.loads(merged.read_text())
    strip = lambda runs: sorted((r["budget"], r["shape"], r["seed"], r["loss"])  # noqa: E731
                                for r in runs)
    assert (strip(one["runs"]) == strip(two["runs"])
            and strip(one["held_out"]) == strip(two["held_out"]))
    assert one["prediction"]["law"] == pytest.approx(two["prediction"]["law"])
    assert [m["file"] for m in two["merged_from"]] == ["a.json", "b.json", "a.json", "b.json"]


def test_a_part_never_predicts(bench, tmp_path, monkeypatch, capsys):
    fake_training(bench, monkeypatch, tmp_path)
    out = tmp_path / "a.json"
    bench.main(["--part", "1/2", "--out", str(out), "--budgets", "1.25e10"])
    assert (json.loads(out.read_text())["prediction"] is None
            and "join the parts" in capsys.readouterr().out)


def test_a_changed_sweep_supersedes_the_prediction_and_keeps_it(bench, tmp_path, monkeypatch):
    fake_training(bench, monkeypatch, tmp_path)
    out = tmp_path / "sweep.json"
    bench.main(["--out", str(out), "--seeds", "1", "--budgets", "1.25e10", "2.5e10", "5e10",
                "1e11"])
    first = json.loads(out.read_text())
    assert first["prediction"]["budget"] == 3e11
    # the sweep grows by 2e11
    bench.main(["--out", str(out), "--seeds", "1", "--resume", "--no-held-out"])
    record = json.loads(out.read_text())
    assert record["prediction"]["budget"] == 6e11 and record["held_out"] is None
    assert record["superseded"] == [dict(prediction=first["prediction"],
                                         held_out=first["held_out"])]
    assert record["predictions"] == [first["prediction"], record["prediction"]]


def test_the_first_windows_count_as_trained(bench, tmp_path, monkeypatch):
    fake_training(bench, monkeypatch, tmp_path)
    first = tmp_path / "no_first_windows.json"
    bench.main(["--first-windows", "--out", str(first)])
    assert {r["budget"] for r in json.loads(first.read_text())["runs"]} == {2e11, 4e11}
    out = tmp_path / "sweep.json"
    bench.main(["--out", str(out), "--seeds", "1", "--no-held-out"])
    pred = json.loads(out.read_text())["prediction"]
    assert pred["budget"] == 3 * 4e11
    assert ["4e+11"] == sorted({f"{b:g}" for b, s,
                                k in pred["fitted_to"]} - {f"{b:g}" for b in bench.BUDGETS})
    assert all(s in FAMILY for b, s, k in pred["fitted_to"])  # only the one-block family is fitted


def test_the_repetition_control_only_adds_to_the_record(bench, tmp_path, monkeypatch):
    fake_training(bench, monkeypatch, tmp_path)
    out = tmp_path / "sweep.json"
    bench.main(["--out", str(out), "--seeds", "1", "2"])
    before = json.loads(out.read_text())
    bench.main(["--repetition", "--out", str(out), "--seeds", "1", "2"])
    after = json.loads(out.read_text())
    for field in ("runs", "prediction", "held_out", "predictions", "superseded"):
        assert after[field] == before[field]  # the held-out test is untouched
    control = after["repetition_control"]
    assert {(r["budget"], r["shape"], r["seed"])
            for r in control} == {(b, s, k) for b, s in bench.REPETITION for k in (1, 2)}
    for r in control:  # the same N and D as the run on the whole split, twice the passes
        whole = plan_run(r["shape"], r["budget"], 65, before["train_tokens"])
        assert (r["N"], r["D"]) == (whole["N"], whole["D"])
        assert r["epochs"] == pytest.approx(2 * whole["epochs"], rel=1e-4)
        assert r["started_at"] <= r["finished_at"]
    assert after["commands"][-1].endswith("python benchmarks/scaling.py --repetition --out "
                                          "sweep.json --seeds 1 2")
    # resumes: nothing to train again
    bench.main(["--repetition", "--out", str(out), "--seeds", "1", "2"])
    assert json.loads(out.read_text())["repetition_control"] == control


def test_the_half_split_spans_the_whole_text(bench):
    import torch
    train = torch.arange(1000)
    half = bench.half_split(train, chunks=20)
    # chunk 18 ends at 950: the last tenth is in
    assert len(half) == 500 and half[0] == 0 and half[-1] == 949
    assert len(set(half.tolist())) == 500


def test_the_record_is_written_only_when_asked_and_never_restarted(bench, tmp_path, monkeypatch,
                                                                   capsys):
    """Review 2026-11-28, rows 31-33: no --out, no record (the shipped one is written only with
    --update-record); a folder or a file used as a folder is refused before the first run; a new
    sweep never starts over a record: --resume continues it."""
    fake_training(bench, monkeypatch, tmp_path)
    shipped = tmp_path / "shipped.json"
    monkeypatch.setattr(bench, "RECORD", shipped)
    monkeypatch.chdir(tmp_path)
    bench.main(["--seeds", "5", "--budgets", "1.25e10", "--no-predict"])
    assert list(tmp_path.iterdir()) == []  # printed only
    bench.main(["--update-record", "--seeds", "5", "--budgets", "1.25e10", "--no-predict"])
    whole = shipped.read_text()
    assert len(json.loads(whole)["runs"]) == 5
    (tmp_path / "small.txt").write_text("x")
    for argv, message in [(["--update-record"], "already holds a record: add --resume"),
                          (["--out", str(tmp_path)], "is a folder"),
                          (["--out", str(tmp_path / "small.txt" / "s.json")],
                           "is a file, not a folder")]:
        with pytest.raises(SystemExit) as e:
            bench.main(argv + ["--seeds", "5", "--budgets", "1.25e10", "--no-predict"])
        assert e.value.code == 2 and message in capsys.readouterr().err
    assert (shipped.read_text() == whole
            and sorted(p.name for p in tmp_path.iterdir()) == ["shipped.json", "small.txt"])
    bench.main(["--update-record", "--resume", "--seeds", "5", "6", "--budgets", "1.25e10",
                "--no-predict"])
    assert len(json.loads(shipped.read_text())["runs"]) == 10  # continued, the first five kept


def test_the_repetition_help_says_how_the_half_is_drawn(bench, capsys):
    """Review 19-m7: --help said "the first half of the training split"; the control trains on every
    other one of REPETITION_CHUNKS chunks (half_split), so that the half spans the whole text."""
    with pytest.raises(SystemExit):
        bench.parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("first half" not in text
            and f"every other one of its {bench.REPETITION_CHUNKS} chunks" in text)


def _law_fit_runs():
    """The runs chapter 19 fits the law to, in its order, as the bootstrap script takes them."""
    return load_benchmark("scaling_law_bootstrap", "scaling_law_bootstrap_benchmark").law_fit_runs()


def test_the_law_bootstrap_record_holds_the_chapters_runs_and_resamples():
    """scaling_law_bootstrap.json (chapter 19 reads its 400 resampled laws instead of refitting
    them): the runs the sweep's prediction was fitted to, in the chapter's order (a case resample
    draws by index), the resamples' indices as NumPy draws them on every machine, 400 rows of four
    statistics, and a law that predicts the held-out run as a fit here does (to 1e-3: the fits
    themselves may end a little elsewhere on another CPU, along the law's ridge)."""
    from benchmark_loader import ROOT
    from course_lib.scaling import LossLaw, case_resamples_sha256, fit_loss_law

    record = json.loads((ROOT / "course_lib" / "records" / "scaling_law_bootstrap.json")
                        .read_text())
    sweep, runs = _law_fit_runs()
    assert record["fitted_to"] == sweep["prediction"]["fitted_to"]
    assert record["runs_in_order"] == [[r["budget"], r["shape"], r["seed"]] for r in runs]
    assert (record["resamples"], record["seed"], record["dropped"]) == (400, 0, 0)
    # the indices the fits were given are those NumPy draws from the seed
    assert record["resamples_sha256"] == case_resamples_sha256(len(runs), 400, 0)
    assert case_resamples_sha256(len(runs), 400, 1) != record["resamples_sha256"]  # can fail
    assert np.array(record["values"]).shape == (400, 4)
    assert record["statistics"] == ["alpha", "beta", "a", "prediction"]
    law = fit_loss_law(*([r[k] for r in runs] for k in ("N", "D", "loss")))
    N, D = record["chosen"]["N"], record["chosen"]["D"]
    assert abs(LossLaw(**record["law"])(N, D) - law(N, D)) < 1e-3


def test_on_the_records_cpu_its_first_resamples_refit_exactly():
    """Where this CPU is the record's (its name, the reference numeric environment of the test
    processes), the record's first two rows are what the script's statistic gives on the first two
    resamples, bit for bit: the values are the fits' (on another CPU a fit can end elsewhere on the
    law's ridge, so only the resamples are compared there, above)."""
    from benchmark_loader import ROOT
    from course_lib.scaling import bootstrap, fit_loss_law
    from course_lib.tools.op_fingerprints import cpu_name

    record = json.loads((ROOT / "course_lib" / "records" / "scaling_law_bootstrap.json")
                        .read_text())
    if cpu_name() != record["cpu"]:
        pytest.skip(f"the record was made on {record['cpu']}, this is {cpu_name()}")
    script = load_benchmark("scaling_law_bootstrap", "scaling_law_bootstrap_benchmark")
    _, runs = _law_fit_runs()
    law = fit_loss_law(*([r[k] for r in runs] for k in ("N", "D", "loss")))
    first, _ = bootstrap(runs, lambda s: script.law_statistics(s, law, record["chosen"]), n=2,
                         seed=record["seed"])
    assert first.tolist() == record["values"][:2]


def test_the_law_bootstrap_statistic_is_the_chapters():
    """The script's statistic is chapter 19's law_exponents: the chapter's function, taken from
    the notebook, and the script's give the same numbers on one resample, on this machine."""
    import nbformat

    from benchmark_loader import ROOT
    from course_lib.scaling import fit_loss_law, resample_runs

    script = load_benchmark("scaling_law_bootstrap", "scaling_law_bootstrap_benchmark")
    _, runs = _law_fit_runs()
    nb = nbformat.read(ROOT / "book" / "ch19_scaling_laws.ipynb", as_version=4)
    [cell] = [c.source for c in nb.cells if "def law_exponents(" in c.source]
    source = cell[cell.index("def law_exponents("):]
    source = source[:source.index("\n\n")]
    columns = lambda rs: ([r["N"] for r in rs], [r["D"] for r in rs], [r["loss"] for r in rs])
    law = fit_loss_law(*columns(runs))
    chosen = {"N": 53_504, "D": 3_741_120}
    namespace = {"fit_loss_law": fit_loss_law, "columns": columns, "law": law, "chosen": chosen}
    exec(source, namespace)
    sample = resample_runs(runs, np.random.default_rng(3))
    assert namespace["law_exponents"](sample) == script.law_statistics(sample, law, chosen)
