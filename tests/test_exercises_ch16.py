"""The checks of chapter 16's exercises: right answers pass, classic wrong ones fail with a hint."""
import math

import pytest
import torch

from course_lib.exercises import ExerciseError, ch16


def not_done(*args):
    raise NotImplementedError()


def acc_norm(lls, choices):
    return max(range(len(lls)), key=lambda i: lls[i] / len(choices[i]))


def acc_not_normalised(lls, choices):
    return max(range(len(lls)), key=lambda i: lls[i])


def acc_norm_with_the_space(lls, choices):
    return max(range(len(lls)), key=lambda i: lls[i] / len(" " + choices[i]))


def acc_norm_argmin(lls, choices):  # log-likelihoods read as losses
    return min(range(len(lls)), key=lambda i: lls[i] / len(choices[i]))


def test_acc_norm_correct(capsys):
    ch16.check_acc_norm(acc_norm)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message",
                         [(not_done, "Not done yet"), (acc_not_normalised, "that is acc"),
                                            (acc_norm_with_the_space, "space before the choice"),
                                            (acc_norm_argmin, "not losses")])
def test_acc_norm_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch16.check_acc_norm(wrong)


def bpb(loss, n_tokens, n_bytes):
    return loss * n_tokens / math.log(2) / n_bytes


@pytest.mark.parametrize("wrong, message", [
    (not_done, "Not done yet"), (lambda l, t, b: l * t / b, "nats per byte"),
    (lambda l, t, b: l / math.log(2), "bits per token"),
    (lambda l, t, b: l * t * math.log(2) / b, "multiplied")])
def test_bits_per_byte_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch16.check_bits_per_byte(wrong)


def test_bits_per_byte_correct(capsys):
    ch16.check_bits_per_byte(bpb)
    assert "Correct!" in capsys.readouterr().out


def bootstrap(scores, iters, seed, level=0.95):
    x = torch.tensor(scores, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    means = x[torch.randint(len(x), (iters, len(x)), generator=g)].mean(1)
    tail = (1 - level) / 2
    return torch.quantile(means, tail).item(), torch.quantile(means, 1 - tail).item()


def bootstrap_without_replacement(scores, iters, seed):
    x = torch.tensor(scores, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    means = torch.stack([x[torch.randperm(len(x), generator=g)].mean() for _ in range(iters)])
    return torch.quantile(means, 0.025).item(), torch.quantile(means, 0.975).item()


def bootstrap_of_the_scores(scores, iters, seed):
    x = torch.tensor(scores, dtype=torch.float64)
    return torch.quantile(x, 0.025).item(), torch.quantile(x, 0.975).item()


def bootstrap_90(scores, iters, seed):
    return bootstrap(scores, iters, seed, level=0.90)


def normal_approximation(scores, iters, seed):
    x = torch.tensor(scores, dtype=torch.float64)
    half = 1.96 * x.std().item() / math.sqrt(len(x))
    return x.mean().item() - half, x.mean().item() + half


# another correct way to resample: one draw per resample
def bootstrap_in_a_loop(scores, iters, seed):
    x = torch.tensor(scores, dtype=torch.float64)
    g = torch.Generator().manual_seed(seed)
    means = torch.stack([x[torch.randint(len(x), (len(x),), generator=g)].mean()
                         for _ in range(iters)])
    return torch.quantile(means, 0.025).item(), torch.quantile(means, 0.975).item()


@pytest.mark.parametrize("right", [bootstrap, bootstrap_in_a_loop])
def test_bootstrap_correct(capsys, right):
    ch16.check_bootstrap(right)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message", [(not_done, "Not done yet"),
                                            (bootstrap_without_replacement, "without replacement"),
                                            (bootstrap_of_the_scores,
                                             "does not contain the mean|far too wide"),
                                            (bootstrap_90, "a 90% interval"),
                                            (normal_approximation, "normal approximation")])
def test_bootstrap_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch16.check_bootstrap(wrong)
