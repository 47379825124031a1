"""benchmarks/align_compare.py's accounting of equal compute, and its record: every method spends
the same budget of token passes (to within one of its steps), and the stored runs are what the
script's rule gives."""
import json

import pytest
from benchmark_loader import load_benchmark

from course_lib.tools.chapters import ROOT


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("align_compare")


@pytest.mark.parametrize("budget_steps", [2, 60, 200])
def test_every_method_spends_the_budget(bench, budget_steps):
    budget = budget_steps * bench.step_cost("grpo", bench.BATCH["grpo"])
    for method, batch in bench.BATCH.items():
        steps = bench.steps_for(method, budget, batch)
        spent = bench.setup_cost(method) + steps * bench.step_cost(method, batch)
        assert spent <= budget or steps == 1
        assert budget - spent < bench.step_cost(method, batch)  # one more step would overspend
    assert bench.steps_for("grpo", budget, bench.BATCH["grpo"]) == budget_steps


def test_more_pairs_are_charged_before_the_first_step(bench):
    """DPO's pairs scaled with the budget (align_sampling.py --dpo-pairs scaled): four times the
    prompts cost four times the sampling, and the steps left still spend the budget."""
    budget = 4 * 60 * bench.step_cost("grpo", bench.BATCH["grpo"])
    assert bench.setup_cost("dpo", 4 * 512) == 4 * bench.setup_cost("dpo")
    fixed, scaled = (bench.steps_for("dpo", budget, 32, n) for n in (512, 2048))
    assert scaled < fixed
    spent = bench.setup_cost("dpo", 2048) + scaled * bench.step_cost("dpo", 32)
    assert spent <= budget < spent + bench.step_cost("dpo", 32)


def test_step_costs_count_trained_tokens_three_times(bench):
    # 12-token rows (prompt 6, answer 6); a trained token costs 3 passes, a read one 1
    assert bench.step_cost("grpo", 8, 8) == 64 * (12 + 3 * 12)
    assert bench.step_cost("dpo", 32) == 64 * 12 * 4
    assert bench.step_cost("sft", 64) == 3 * 64 * 10
    assert bench.setup_cost("dpo") == 512 * 8 * 12 and bench.setup_cost("grpo") == 0


def test_the_record_follows_the_rule(bench):
    rec = json.loads((ROOT / "course_lib" / "records" / "align_compare.json").read_text())
    budget = rec["budget_token_passes"]
    assert budget == rec["budget_grpo_steps"] * bench.step_cost("grpo", bench.BATCH["grpo"])
    for name, run in rec["runs"].items():
        assert run["steps"] == bench.steps_for(run["method"], budget, run["batch"]), name
        assert run["token_passes"] == bench.setup_cost(run["method"]) + run[
            "steps"
        ] * bench.step_cost(run["method"], run["batch"]), name
    for method, lr in rec["chosen_learning_rate"].items():  # chosen on seed 0's validation accuracy
        tried = {r["learning_rate"]: r["val"]["accuracy"] for r in rec["runs"].values()
                 if r["method"] == method and r["reward"] == "exact" and r["seed"] == 0}
        assert set(tried) == set(rec["learning_rates"][method])
        assert tried[lr] == max(tried.values())


def test_the_hacking_runs_have_their_control(bench):
    """The proxy (units digit) and the exact reward: GRPO at the same rate, steps and seeds, from
    the same start; every compared run stores each test item's score (paired tests) and its final KL
    to the start."""
    rec = json.loads((ROOT / "course_lib" / "records" / "align_compare.json").read_text())
    lr = rec["hack_learning_rate"]
    assert lr == bench.HACK_LR
    proxy = {r["seed"]: r for r in rec["runs"].values() if r["reward"] == "units"}
    control = {r["seed"]: r for r in rec["runs"].values() if r["reward"] == "exact"
               and r["method"] == "grpo"
               and r["learning_rate"] == lr}
    assert (
        sorted(proxy)
        == rec["summary"]["grpo-units-hack"]["seeds"]
        == rec["summary"]["grpo-exact-hack"]["seeds"]
    )
    assert sorted(proxy) == sorted(control) and len(proxy) >= 3
    for seed, r in proxy.items():
        assert (r["method"], r["learning_rate"], r["steps"],
                r["batch"]) == ("grpo", lr, control[seed]["steps"],
                                                                             control[seed]["batch"])
    assert not any("-format-" in name for name in rec["runs"]) and "hack_start" not in rec
    chosen = [r for r in rec["runs"].values()
              if r["reward"] == "exact"
              and r["learning_rate"] == rec["chosen_learning_rate"][r["method"]]]
    compared = list(proxy.values()) + list(control.values()) + chosen
    for r in compared + [{"test": rec["start"]["test"], "kl_to_start": 0.0}]:
        right = r["test"]["right"]
        assert (len(right) == 200 and set(right) <= {0, 1}
                and sum(right) / 200 == r["test"]["accuracy"])
        assert r["kl_to_start"] >= 0
    assert rec["token_passes_per_step"] == {m: bench.step_cost(m, b) for m,
                                            b in bench.BATCH.items()}
    assert rec["setup_token_passes"] == {m: bench.setup_cost(m) for m in bench.BATCH}
