"""The checks of chapter 18's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch
import torch.nn.functional as F
from exercise_helpers import assert_correct, assert_leaves_rng_alone, assert_not_done, not_done

from course_lib.exercises import ExerciseError, ch18


# --- the DPO loss ---


def dpo_loss(pc, pr, rc, rr, beta):
    return F.softplus(-beta * ((pc - rc) - (pr - rr)))


def dpo_loss_logsigmoid(pc, pr, rc, rr, beta):  # the same, written as in the paper
    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr)))


def no_reference(pc, pr, rc, rr, beta):
    return F.softplus(-beta * (pc - pr))


def flipped(pc, pr, rc, rr, beta):
    return F.softplus(beta * ((pc - rc) - (pr - rr)))


def no_beta(pc, pr, rc, rr, beta):
    return F.softplus(-((pc - rc) - (pr - rr)))


def the_mean(pc, pr, rc, rr, beta):
    return dpo_loss(pc, pr, rc, rr, beta).mean()


@pytest.mark.parametrize("right", [dpo_loss, dpo_loss_logsigmoid])
def test_dpo_loss_correct(right, capsys):
    ch18.check_dpo_loss(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch18.check_dpo_loss, right)


@pytest.mark.parametrize("wrong, message", [(no_reference, "ignores the reference"),
                                            (flipped, "prefers the rejected"),
                                            (no_beta, "leaves out beta"), (the_mean, r"\(B,\)")])
def test_dpo_loss_wrong(wrong, message):
    assert_not_done(ch18.check_dpo_loss, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch18.check_dpo_loss(wrong)


# --- group-normalised advantages ---


def advantages(rewards, group_size):
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, keepdim=True) + 1e-4)).view(-1)


def centred_only(rewards, group_size):
    grouped = rewards.view(-1, group_size)
    return (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)


def whole_batch(rewards, group_size):
    return (rewards - rewards.mean()) / (rewards.std() + 1e-4)


def population_std(rewards, group_size):
    grouped = rewards.view(-1, group_size)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    return (centred / (grouped.std(dim=1, unbiased=False, keepdim=True) + 1e-4)).view(-1)


def test_group_advantages_correct(capsys):
    ch18.check_group_advantages(advantages)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch18.check_group_advantages, advantages)


@pytest.mark.parametrize("wrong, message",
                         [(centred_only, "not divided"), (whole_batch, "whole batch"),
                                            (population_std, "population std")])
def test_group_advantages_wrong(wrong, message):
    assert_not_done(ch18.check_group_advantages, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch18.check_group_advantages(wrong)


# --- the clipped objective ---


def clipped_loss(logps, old_logps, advantages, epsilon):
    ratio = torch.exp(logps - old_logps)
    A = advantages.unsqueeze(1)
    return -torch.min(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)


def clipped_loss_max_form(logps, old_logps, advantages, epsilon):  # -min(a, b) = max(-a, -b)
    ratio = torch.exp(logps - old_logps)
    A = advantages[:, None]
    return torch.maximum(-ratio * A, -ratio.clamp(1 - epsilon, 1 + epsilon) * A)


def with_max(logps, old_logps, advantages, epsilon):
    ratio = torch.exp(logps - old_logps)
    A = advantages.unsqueeze(1)
    return -torch.max(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)


def clipped_term_only(logps, old_logps, advantages, epsilon):
    return -torch.exp(logps - old_logps).clamp(1 - epsilon, 1 + epsilon) * advantages.unsqueeze(1)


def ratio_of_logps(logps, old_logps, advantages, epsilon):
    ratio = logps / old_logps
    A = advantages.unsqueeze(1)
    return -torch.min(ratio * A, ratio.clamp(1 - epsilon, 1 + epsilon) * A)


def not_negated(logps, old_logps, advantages, epsilon):
    return -clipped_loss(logps, old_logps, advantages, epsilon)


@pytest.mark.parametrize("right", [clipped_loss, clipped_loss_max_form])
def test_clipped_objective_correct(right, capsys):
    ch18.check_clipped_objective(right)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch18.check_clipped_objective, right)


@pytest.mark.parametrize("wrong, message",
                         [(with_max, "the max"), (clipped_term_only, "only the clipped"),
                                            (ratio_of_logps, "not of log-probabilities"),
                                            (not_negated, "its negative")])
def test_clipped_objective_wrong(wrong, message):
    assert_not_done(ch18.check_clipped_objective, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch18.check_clipped_objective(wrong)
