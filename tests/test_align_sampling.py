"""course_lib.align.sampling and course_lib.align.expert: pass@k equals HumanEval's reference code
and keeps its laws, best-of-N, majority vote, the policy's entropy against torch's Categorical, the
multiple-choice letter parser, the SFT micro-batch step (accumulated micro-batches give the whole
batch's gradient) and expert iteration's rejection sampling."""
from __future__ import annotations

import copy
import itertools

import numpy as np
import pytest
import torch

from course_lib import align
from course_lib.align import task_splits
from course_lib.align.expert import expert_iteration, sft_microbatch_step, verified_samples
from course_lib.align.grpo import masked_mean
from course_lib.align.rewards import format_reward
from course_lib.align.sampling import (best_of_n, exact_pass_at_k, majority_vote,
                                       parse_answer_letter, pass_at_k, pass_at_k_curve,
                                       per_token_entropy, self_consistency, subsets_mean)
from course_lib.checkpoint import load_model, load_tokenizer
from course_lib.runs.align import arithmetic_base


def humaneval_estimate_pass_at_k(num_samples, num_correct, k):
    """HumanEval's reference (openai/human-eval, human_eval/evaluation.py), copied as it is."""
    def estimator(n: int, c: int, k: int) -> float:
        if n - c < k:
            return 1.0
        return 1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1))

    if isinstance(num_samples, int):
        num_samples_it = itertools.repeat(num_samples, len(num_correct))
    else:
        assert len(num_samples) == len(num_correct)
        num_samples_it = iter(num_samples)
    return np.array([estimator(int(n), int(c), k) for n, c in zip(num_samples_it, num_correct)])


def test_pass_at_k_equals_humaneval_and_the_exact_binomials():
    correct = list(range(0, 65))
    for k in (1, 2, 5, 16, 63, 64):
        ours = [pass_at_k(64, c, k) for c in correct]
        assert np.array_equal(np.array(ours), humaneval_estimate_pass_at_k(64, correct, k))
        assert np.allclose(ours, [exact_pass_at_k(64, c, k) for c in correct], rtol=0, atol=1e-12)
    assert pass_at_k_curve([0, 3], 64, [1, 4]) == {1: [0.0, pass_at_k(64, 3, 1)],
                                                   4: [0.0, pass_at_k(64, 3, 4)]}


def test_pass_at_k_laws():
    for n, c in [(10, 0), (10, 1), (10, 9), (64, 5), (200, 17)]:
        curve = [pass_at_k(n, c, k) for k in range(1, n + 1)]
        assert curve[0] == pytest.approx(c / n, abs=1e-12)  # k = 1: the share right
        assert all(b >= a - 1e-12 for a, b in zip(curve, curve[1:]))  # more tries never hurt
        assert all(0.0 <= x <= 1.0 for x in curve)
        assert curve[-1] == (1.0 if c > 0 else 0.0)  # all n drawn: right iff any is right
    assert pass_at_k(10, 10, 3) == 1.0 and pass_at_k(10, 8, 3) == 1.0  # fewer than k wrong answers
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001)  # no overflow where C(1000, 500) would


@pytest.mark.parametrize("n,c,k", [(10, 11, 1), (10, -1, 1), (10, 2, 0), (10, 2, 11), (10.0, 2, 1)])
def test_pass_at_k_refuses_impossible_counts(n, c, k):
    with pytest.raises(ValueError, match="n"):
        pass_at_k(n, c, k)


def test_best_of_n_takes_the_verifiers_favourite():
    right = [False, False, True, False]
    assert best_of_n([1.0, 1.0, 1.0, 0.0], right, 4) is False  # a tie: the first of them
    assert best_of_n([0.0, 0.0, 1.0, 0.0], right, 4) is True
    assert best_of_n([0.0, 0.0, 1.0, 0.0], right, 2) is False  # the right one was not drawn
    # an exact verifier: any right one wins
    assert best_of_n([float(r) for r in right], right, 4) is True
    with pytest.raises(ValueError, match="n must be"):
        best_of_n([1.0], [True], 2)


def test_majority_vote_and_self_consistency():
    assert majority_vote(["12", "13", "13", None, None, None]) == "13"  # None never wins
    # ties: seen first
    assert majority_vote(["12", "13"]) == "12" and majority_vote(["13", "12"]) == "13"
    assert majority_vote([None, None]) is None
    answers = ["155", "145", "145", "155", "155"]
    assert self_consistency(answers, "155", 5) and not self_consistency(answers, "155", 3)
    with pytest.raises(ValueError, match="n must be"):
        self_consistency(answers, "155", 6)


def test_subsets_mean_averages_random_subsets():
    values = [True] * 3 + [False] * 5
    assert subsets_mean(values, 8, any) == 1.0
    assert subsets_mean(values, 1, lambda s: s[0], draws=4000) == pytest.approx(3 / 8, abs=0.03)
    assert subsets_mean(values, 2, any, draws=8) == subsets_mean(values, 2, any, draws=8)  # seeded


def test_per_token_entropy_equals_torchs_categorical():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0)) * 3
    expected = torch.distributions.Categorical(logits=logits).entropy()
    assert per_token_entropy(logits).shape == (3, 5)
    assert torch.allclose(per_token_entropy(logits), expected, atol=1e-6)
    assert torch.allclose(per_token_entropy(torch.zeros(2, 7)), torch.full((2,), float(np.log(7))))
    peaked = torch.tensor([[0.0, -1e9, -1e9], [-float("inf"), 0.0, -float("inf")]])
    assert torch.equal(per_token_entropy(peaked), torch.zeros(2))  # a sure token: 0, not NaN


@pytest.mark.parametrize("text,letter", [
    ("B", "B"), ("(C) because the rest are wrong", "C"), ("The answer is (D).", "D"),
    ("Answer: A", "A"), ("answer is c", None), ("A good answer is B", "B"),
    ("I think the answer is A. No, the answer is C.", "C"), ("C. It ends with a vowel", "C"),
    ("It is (B), clearly", "B"), ("I do not know", None), ("E", None), ("", None)])
def test_parse_answer_letter(text, letter):
    assert parse_answer_letter(text) == letter


def test_parse_answer_letter_other_letters_and_bad_letters():
    assert parse_answer_letter("E", "ABCDE") == "E"
    with pytest.raises(ValueError, match="upper-case letters"):
        parse_answer_letter("A", "abcd")


def test_masked_mean_of_nothing_is_zero():
    assert masked_mean(torch.ones(2, 3), torch.zeros(2, 3)).item() == 0.0
    assert masked_mean(torch.tensor([[1.0, 5.0]]), torch.tensor([[1.0, 0.0]])).item() == 1.0


def test_sft_microbatch_steps_accumulate_to_the_whole_batchs_gradient():
    g = torch.Generator().manual_seed(0)
    w0 = torch.randn(6, 4, generator=g)
    mask = (torch.rand(6, 4, generator=g) > 0.3).float()
    w = w0.clone().requires_grad_(True)
    logps = torch.nn.functional.logsigmoid(w)  # (B, T): stand-ins for log-probabilities
    loss, meta = sft_microbatch_step(logps, mask, grad_accum_steps=1, normalize_constant=2.0)
    whole = w.grad.clone()
    assert loss.item() == pytest.approx((-(logps.detach() * mask).sum() / 2.0).item())
    assert (meta["tokens"].item() == mask.sum().item()
            and meta["nll"].item() == pytest.approx(loss.item()))
    v = w0.clone().requires_grad_(True)
    for rows in (slice(0, 2), slice(2, 4), slice(4, 6)):  # three micro-batches of 2 rows
        micro, meta = sft_microbatch_step(torch.nn.functional.logsigmoid(v[rows]), mask[rows], 3,
                                          2.0 / 3)
        assert micro.item() == pytest.approx(meta["nll"].item() / 3)
    # a constant normaliser: no per-batch reweighting
    assert torch.allclose(v.grad, whole, atol=1e-6)


@pytest.mark.parametrize("kwargs,message", [({"grad_accum_steps": 0}, "grad_accum_steps"),
                                            ({"grad_accum_steps": 1, "normalize_constant": 0.0},
                                             "normalize_constant")])
def test_sft_microbatch_step_refuses_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        sft_microbatch_step(torch.zeros(2, 3, requires_grad=True), torch.ones(2, 3), **kwargs)
    with pytest.raises(ValueError, match="same"):
        sft_microbatch_step(torch.zeros(2, 3, requires_grad=True), torch.ones(3, 2), 1)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    path = arithmetic_base(tmp_path_factory.mktemp("ei") / "base.pt")
    model, ckpt = load_model(path, "cpu")
    return model, load_tokenizer(ckpt, path)


def test_verified_samples_keep_only_what_the_verifier_pays(base):
    model, tokenizer = base
    items = task_splits(0)["train"][:6]
    kept = verified_samples(model, tokenizer, items, 8, torch.Generator().manual_seed(0),
                            reward=format_reward)
    again = verified_samples(model, tokenizer, items, 8, torch.Generator().manual_seed(0),
                             reward=format_reward)
    # seeded; a random GPT writes a number then END sometimes
    assert kept == again and 0 < len(kept) <= 48
    assert all(format_reward(k["prompt"], k["answer"] + "\n") == 1.0 for k in kept)
    assert {k["prompt"] for k in kept} <= {i["prompt"] for i in items}


def test_expert_iteration_trains_only_on_accepted_samples(base, monkeypatch):
    monkeypatch.setattr(align, "EVAL_ITEMS", 4)
    model, tokenizer = base
    settings = {"batch_size": 4, "learning_rate": 1e-3, "eval_interval": 2, "eval_iters": 1,
                "warmup_iters": 1, "max_iters": 100}
    before = [p.clone() for p in model.parameters()]
    _, history = expert_iteration(copy.deepcopy(model), tokenizer, task_splits(0), rounds=2,
                                  prompts_per_round=4, samples=2, settings=settings,
                                  reward=lambda p, c: 0.0)
    # nothing verified: no step
    assert [h["accepted"] for h in history] == [0, 0] and "loss" not in history[0]
    trained, history = expert_iteration(copy.deepcopy(model), tokenizer, task_splits(0), rounds=2,
                                        prompts_per_round=4, samples=4, settings=settings,
                                        reward=format_reward, epochs=2)
    assert [h["round"] for h in history] == [0, 1] and all(h["prompts"] == 4 for h in history)
    assert all(0 < h["accepted"] <= 16 and 0 < h["solved"] <= 4 and "loss" in h for h in history)
    _, stopped = expert_iteration(copy.deepcopy(model), tokenizer, task_splits(0), 5, 4, 4,
                                  settings, reward=format_reward, keep_going=lambda h: len(h) < 2)
    assert len(stopped) == 2  # keep_going said stop before the third round
    # 2 epochs of batches of 4, rounded up
    assert all(h["steps"] == -(-2 * h["accepted"] // 4) for h in history)
    assert not all(torch.equal(a, b) for a, b in zip(before, trained.parameters()))
    # the copies trained, not model
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(ValueError, match="at least 1"):
        expert_iteration(model, tokenizer, task_splits(0), 0, 4, 2, settings)
