"""The checks of chapter 15's exercises: right answers pass, plausible wrong ones fail with a hint."""
import math

import pytest
import torch
import torch.nn as nn

from course_lib.exercises import ExerciseError, ch15
from course_lib.lora import LoRALinear
from course_lib.utils import IGNORE_INDEX


def not_done(*args):
    raise NotImplementedError()


# --- the prompt mask ---


def mask_prompt(targets, n_prompt):
    out = targets.clone()
    out[:n_prompt - 1] = IGNORE_INDEX
    return out


def mask_one_too_many(targets, n_prompt):
    out = targets.clone()
    out[:n_prompt] = IGNORE_INDEX
    return out


def mask_in_place(targets, n_prompt):
    targets[:n_prompt - 1] = IGNORE_INDEX
    return targets


def mask_the_answer(targets, n_prompt):
    out = targets.clone()
    out[n_prompt - 1:] = IGNORE_INDEX
    return out


def test_mask_prompt_correct(capsys):
    ch15.check_mask_prompt(mask_prompt)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message", [(not_done, "Not done yet"), (mask_one_too_many, "one too many"),
                                            (mask_in_place, "changed the targets"),
                                            (mask_the_answer, "wrong positions")])
def test_mask_prompt_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch15.check_mask_prompt(wrong)


# --- a LoRA layer's forward ---


def lora_forward(x, W, b, A, B, alpha, rank):
    return x @ W.T + b + (alpha / rank) * (x @ A.T @ B.T)


def lora_forward_unscaled(x, W, b, A, B, alpha, rank):
    return x @ W.T + b + x @ A.T @ B.T


def lora_forward_inverse(x, W, b, A, B, alpha, rank):
    return x @ W.T + b + (rank / alpha) * (x @ A.T @ B.T)


def lora_forward_no_bias(x, W, b, A, B, alpha, rank):
    return x @ W.T + (alpha / rank) * (x @ A.T @ B.T)


def test_lora_forward_correct(capsys):
    ch15.check_lora_forward(lora_forward)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message", [(not_done, "Not done yet"), (lora_forward_unscaled, "not scaled"),
                                            (lora_forward_inverse, "rank / alpha"),
                                            (lora_forward_no_bias, "values differ")])
def test_lora_forward_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch15.check_lora_forward(wrong)


# --- merging ---


def merge(W, A, B, alpha, rank):
    return W + (alpha / rank) * B @ A


def merge_transposed(W, A, B, alpha, rank):
    return W + (alpha / rank) * (A.T @ B.T)


def merge_unscaled(W, A, B, alpha, rank):
    return W + B @ A


def merge_delta_only(W, A, B, alpha, rank):
    return (alpha / rank) * B @ A


def test_merge_correct(capsys):
    ch15.check_merge(merge)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message", [(not_done, "Not done yet"), (merge_transposed, "raised RuntimeError"),
                                            (merge_unscaled, "values differ"), (merge_delta_only, "values differ")])
def test_merge_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch15.check_merge(wrong)


# --- counting ---


def lora_count(config, rank):
    C = config.n_embd
    return config.n_layer * (rank * (C + 3 * C) + rank * (C + C))


def lora_count_square(config, rank):
    return config.n_layer * 2 * rank * 2 * config.n_embd


def lora_count_full_matrices(config, rank):
    return config.n_layer * 4 * config.n_embd ** 2


def test_lora_count_correct(capsys):
    ch15.check_lora_count(lora_count)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message", [(not_done, "Not done yet"), (lora_count_square, "C to 3C"),
                                            (lora_count_full_matrices, "expected")])
def test_lora_count_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch15.check_lora_count(wrong)


# --- spot the bug: the initialisation ---


def make_layer(base, rank, alpha):
    return LoRALinear(base, rank, alpha)


class Adapter(nn.Module):
    def __init__(self, base, rank, alpha, a_random, b_random, freeze=True):
        super().__init__()
        self.base = base.requires_grad_(not freeze)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features) if a_random
                              else torch.zeros(rank, base.in_features))
        self.B = nn.Parameter(torch.randn(base.out_features, rank) if b_random else torch.zeros(base.out_features, rank))
        self.scaling = alpha / rank

    def forward(self, x):
        return self.base(x) + self.scaling * x @ self.A.T @ self.B.T


def test_lora_init_correct(capsys):
    ch15.check_lora_init(make_layer)
    ch15.check_lora_init(lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=False))
    assert capsys.readouterr().out.count("Correct!") == 2


@pytest.mark.parametrize("wrong, message", [
    (not_done, "Not done yet"),
    (lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=True), "does not start as the base"),
    (lambda base, r, a: Adapter(base, r, a, a_random=False, b_random=False), "no adapter parameter gets a gradient"),
    (lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=False, freeze=False), "still trainable"),
])
def test_lora_init_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch15.check_lora_init(wrong)
