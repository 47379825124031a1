"""course_lib.scaling.isoflop: the sweep's shapes, what a budget buys each, and one run trained to
its plan."""
import pytest
import torch

from course_lib.scaling.isoflop import (FAMILY, LADDER, TRAIN, WARMUP_FRACTION, matmul_parameters,
                                        plan_run, shape_config,
                                train_planned)
from course_lib.model import GPT
from course_lib.sizing import flops_per_token
from course_lib.tokenizers import CharTokenizer

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40


@pytest.mark.parametrize("shape", list(LADDER))
def test_n_is_the_n_of_the_flop_count(shape):
    config = shape_config(shape, 65)
    model = GPT(config)
    lookups = model.wte.weight.numel() + model.wpe.weight.numel()
    assert matmul_parameters(config) == model.num_parameters() - lookups
    attention = 12 * config.n_layer * config.block_size * config.n_embd
    assert flops_per_token(config) == 6 * matmul_parameters(config) + attention
    assert config.n_embd // config.n_head == 16 or config.n_head == 1


def test_the_family_is_one_block_and_grows():
    assert all(LADDER[s][0] == 1 for s in FAMILY) and len(FAMILY) >= 5
    sizes = [matmul_parameters(shape_config(s, 65)) for s in FAMILY]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


def test_plan_spends_the_budget_in_whole_steps():
    plan = plan_run("L2-C48", 1e11, 65, train_tokens=1_000_000)
    tokens_per_step = TRAIN["batch_size"] * 64
    assert plan["D"] == plan["steps"] * tokens_per_step
    assert plan["flops"] == plan["flops_per_token"] * plan["D"]
    # the nearest whole step
    assert abs(plan["flops"] - 1e11) <= plan["flops_per_token"] * tokens_per_step / 2
    assert plan["epochs"] == pytest.approx(plan["D"] / 1_000_000)
    assert plan["warmup_iters"] == round(WARMUP_FRACTION * plan["steps"])


def test_unknown_shape_is_refused():
    with pytest.raises(ValueError, match="unknown shape 'L9-C999'"):
        plan_run("L9-C999", 1e11, 65, 1000)


def test_a_planned_run_trains_to_its_end_and_repeats():
    tok = CharTokenizer.train(TEXT)
    data = torch.tensor(tok.encode(TEXT))
    train, val = data[:2000], data[2000:]
    plan = plan_run("L1-C16", 5e8, tok.vocab_size, len(train))
    one = train_planned(plan, train, val, tok, curve_points=5)
    two = train_planned(plan, train, val, tok, curve_points=5)
    assert one["loss"] == two["loss"]  # seeded: the same run twice
    assert one["curve"][-1][0] == plan["steps"] and len(one["curve"]) <= 5
    assert one["loss"] < one["curve"][0][1]  # it learned something
    assert {k: one[k] for k in plan} == plan
