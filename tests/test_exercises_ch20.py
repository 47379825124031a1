"""The checks of chapter 20's exercises: right answers pass, plausible wrong ones fail with a hint."""
import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done

from course_lib.exercises import ExerciseError, ch20


# --- top-k routing weights ---


def top_k_weights(logits, k):
    probs = F.softmax(logits, dim=-1)
    weights, experts = probs.topk(k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), experts


def softmax_after(logits, k):  # the same thing computed the other way round
    top, experts = logits.topk(k, dim=-1)
    return F.softmax(top, dim=-1), experts


def not_renormalised(logits, k):
    return F.softmax(logits, dim=-1).topk(k, dim=-1)


def raw_logits(logits, k):
    return logits.topk(k, dim=-1)


def lowest(logits, k):
    weights, experts = F.softmax(-logits, dim=-1).topk(k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), experts


@pytest.mark.parametrize("right", [top_k_weights, softmax_after])
def test_top_k_weights_correct(right, capsys):
    ch20.check_top_k_weights(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch20.check_top_k_weights, right)


@pytest.mark.parametrize("wrong, message", [(not_renormalised, "sum to less than 1"), (raw_logits, "raw logits"),
                                            (lowest, "highest-scoring")])
def test_top_k_weights_wrong(wrong, message):
    assert_not_done(ch20.check_top_k_weights, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch20.check_top_k_weights(wrong)


# --- the balancing loss ---


def balancing_loss(logits, k):
    N, E = logits.shape
    probs = F.softmax(logits, dim=-1)
    chosen = probs.topk(k, dim=-1).indices
    f = torch.bincount(chosen.flatten(), minlength=E).float() / N
    return E * (f * probs.mean(0)).sum()


def without_e(logits, k):
    return balancing_loss(logits, k) / logits.shape[1]


def probabilities_twice(logits, k):
    P = F.softmax(logits, dim=-1).mean(0)
    return logits.shape[1] * (P * P).sum()


def per_token_fraction(logits, k):  # f_e as a fraction of the N*k slots: k times too small
    return balancing_loss(logits, k) / k


def test_balancing_loss_correct(capsys):
    ch20.check_balancing_loss(balancing_loss)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch20.check_balancing_loss, balancing_loss)


@pytest.mark.parametrize("wrong, message", [(without_e, "E times too small"), (probabilities_twice, "mean probability"),
                                            (per_token_fraction, "not the expected value")])
def test_balancing_loss_wrong(wrong, message):
    assert_not_done(ch20.check_balancing_loss, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch20.check_balancing_loss(wrong)


# --- active parameters ---


def total(config):
    from course_lib.sizing import count_parameters
    return count_parameters(config)


def active(config):
    expert = 3 * config.n_embd * config.ffn_size
    return total(config) - config.n_layer * (config.moe_experts - config.moe_top_k) * expert


def no_router(config):
    return active(config) - config.n_layer * config.n_embd * config.moe_experts


def two_matrices(config):  # an expert counted as a 2-matrix MLP, not SwiGLU's three
    expert = 2 * config.n_embd * config.ffn_size
    return total(config) - config.n_layer * (config.moe_experts - config.moe_top_k) * expert


def test_active_parameters_correct(capsys):
    ch20.check_active_parameters(active)
    assert_correct(capsys)


@pytest.mark.parametrize("wrong, message", [(total, "that is the total"), (no_router, "routers"),
                                            (two_matrices, "3 \\* C \\* H")])
def test_active_parameters_wrong(wrong, message):
    assert_not_done(ch20.check_active_parameters, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch20.check_active_parameters(wrong)
