"""benchmarks/scaling.py (chapter 19's sweep): bad arguments are refused in one line, the prediction
keeps to the family and to 4 passes over the text, and a merge of unfinished parts writes nothing."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from course_lib.isoflop import FAMILY, plan_run
from course_lib.scaling import LossLaw

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("scaling_benchmark", ROOT / "benchmarks" / "scaling.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("argv, message", [(["--budgets", "3e11"], "no shapes are chosen for budget"),
                                           (["--predict-factor", "2"], "at least 3x the largest")])
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
            runs.append(dict(plan, loss=float(law(plan["N"], plan["D"])) + 0.002 * np.sin(plan["N"])))
    pred = bench.predict({"runs": runs}, 1_003_854, 65, 3.0)
    assert pred["budget"] == 3 * max(bench.BUDGETS) and pred["shape"] in FAMILY
    assert pred["epochs"] <= bench.MAX_EPOCHS
    assert set(pred["candidates"]) == set(FAMILY)
    assert pred["predicted_loss"] == pytest.approx(min(
        v for s, v in pred["candidates"].items()
        if plan_run(s, pred["budget"], 65, 1_003_854)["epochs"] <= bench.MAX_EPOCHS), abs=1e-4)


def test_merge_of_unfinished_parts_writes_nothing(bench, tmp_path, capsys):
    part = tmp_path / "a.json"
    part.write_text(json.dumps({"command": "x", "runs": []}))
    out = tmp_path / "out.json"
    bench.main(["--merge", str(part), str(tmp_path / "missing.json"), "--out", str(out)])
    assert "not merged" in capsys.readouterr().out and not out.exists()


def test_the_prediction_is_on_disk_before_the_held_out_run_starts(bench, tmp_path, monkeypatch):
    out = tmp_path / "sweep.json"
    law = LossLaw(E=1.3, A=5.0, B=60.0, alpha=0.25, beta=0.33)
    seen = []

    def fake_train(plan, *args, **kwargs):  # no training: a loss from a known law
        if plan["budget"] > max(bench.BUDGETS):  # the held-out run: what is on disk now?
            seen.append(json.loads(out.read_text()))
        return dict(plan, seed=1337, loss=round(float(law(plan["N"], plan["D"])), 5), train_s=0.0, curve=[])

    monkeypatch.setattr(bench, "train_planned", fake_train)
    bench.main(["--out", str(out)])
    record = json.loads(out.read_text())
    assert len(seen) == 1 and seen[0]["prediction"] is not None and seen[0]["held_out"] is None
    assert all(r["finished_at"] <= seen[0]["prediction"]["made_at"] for r in seen[0]["runs"])
    assert record["held_out"]["started_after_prediction"] == record["prediction"]["made_at"]
    assert record["predictions"] == [record["prediction"]]
    assert record["command"] == f"python benchmarks/scaling.py --out {out}"
