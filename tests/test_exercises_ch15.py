"""The checks of chapter 15's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import copy
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


def mask_float(targets, n_prompt):
    return torch.where(torch.arange(len(targets)) < n_prompt - 1, float(IGNORE_INDEX),
                       targets.float())


def mask_int32(targets, n_prompt):
    out = targets.clone()
    out[:n_prompt - 1] = IGNORE_INDEX
    return out.int()


def mask_with_minus_one(targets, n_prompt):
    out = targets.clone()
    out[:n_prompt - 1] = -1
    return out


@pytest.mark.parametrize("wrong, message",
                         [(not_done, "Not done yet"), (mask_one_too_many, "one too many"),
                                            (mask_float, "torch.long"), (mask_int32, "torch.long"),
                                            (mask_with_minus_one, "use IGNORE_INDEX"),
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


def lora_forward_a_at_b(x, W, b, A, B, alpha, rank):  # A @ B: (r, in) @ (out, r) does not fit
    return x @ W.T + b + (alpha / rank) * (x @ (A @ B))


@pytest.mark.parametrize("wrong, message",
                         [(not_done, "Not done yet"), (lora_forward_unscaled, "not scaled"),
                                            (lora_forward_inverse, "rank / alpha"),
                                            (lora_forward_no_bias, "values differ"),
                                            # 15-m8 (review 2026-11-28): A @ B got the generic hint
                                            (lora_forward_a_at_b,
                                             "(?s)cannot be multiplied.*Hint: A is \\(rank, "
                                                                  "in\\) and B \\(out, rank\\).*A "
                                                                  "@ B does not fit")])
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


def merge_a_at_b(W, A, B, alpha, rank):
    return W + (alpha / rank) * A @ B


def merge_module(W, A, B, alpha, rank):
    layer = nn.Linear(W.shape[1], W.shape[0], bias=False)
    layer.weight.data = W + (alpha / rank) * B @ A
    return layer


def test_merge_correct(capsys):
    ch15.check_merge(merge)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize(
    "wrong, message",
    [
        (not_done, "Not done yet"),
        # 15-m8 (review 2026-11-28): A.T @ B.T got the generic
        # hint
        (
            merge_transposed,
            "(?s)raised RuntimeError.*Hint: A.T @ B.T is \\(in, r\\) @ \\(r, out\\)",
        ),
        (merge_unscaled, "values differ"),
        (merge_delta_only, "values differ"),
        (merge_a_at_b, "B @ A is \\(out, r\\)"),
        (merge_module, "returned a module"),
    ],
)
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


def test_lora_count_does_not_reveal_the_answer():
    with pytest.raises(ExerciseError) as error:
        ch15.check_lora_count(lora_count_full_matrices)
    assert "24,576" not in str(error.value) and "24576" not in str(error.value)


def test_lora_count_correct(capsys):
    ch15.check_lora_count(lora_count)
    assert "Correct!" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, message",
                         [(not_done, "Not done yet"), (lora_count_square, "C to 3C"),
                                            (lora_count_full_matrices, "not the count")])
def test_lora_count_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch15.check_lora_count(wrong)


# --- spot the bug: the initialisation ---


def make_layer(base, rank, alpha):
    return LoRALinear(base, rank, alpha)


class Adapter(nn.Module):
    def __init__(self, base, rank, alpha, a_random, b_random, freeze=True, freeze_bias=True,
                 deep_copy=False, b_buffer=False):
        super().__init__()
        self.base = copy.deepcopy(base) if deep_copy else base.requires_grad_(not freeze)
        if not freeze_bias:
            self.base.bias.requires_grad_(True)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) / math.sqrt(base.in_features)
                              if a_random
                              else torch.zeros(rank, base.in_features))
        B = (torch.randn(base.out_features, rank) if b_random
             else torch.zeros(base.out_features, rank))
        if b_buffer:
            self.register_buffer("B", B)
        else:
            self.B = nn.Parameter(B)
        self.scaling = alpha / rank

    def forward(self, x):
        return self.base(x) + self.scaling * x @ self.A.T @ self.B.T


def test_lora_init_correct(capsys):
    ch15.check_lora_init(make_layer)
    ch15.check_lora_init(lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=False))
    out = capsys.readouterr().out
    assert out.count("Correct!") == 2 and "B = 0 makes the start exact" in out


def test_lora_init_accepts_a_zero_and_says_so(capsys):
    ch15.check_lora_init(lambda base, r, a: Adapter(base, r, a, a_random=False, b_random=True))
    assert "A = 0 with B random" in capsys.readouterr().out


class WrongShape(nn.Module):
    def __init__(self, base, rank, alpha):
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(rank, base.in_features))

    def forward(self, x):
        return x @ self.A.T


@pytest.mark.parametrize("check, good", [
    (lambda: ch15.check_lora_init(make_layer), True),
    (lambda: ch15.check_lora_forward(lora_forward), True),
    (lambda: ch15.check_mask_prompt(mask_prompt), True),
    (lambda: ch15.check_merge(merge), True),
    (lambda: ch15.check_lora_count(lora_count), True),
    (lambda: ch15.check_lora_init(lambda base, r,
                                  a: Adapter(base, r, a, a_random=True, b_random=True)), False),
])
def test_checks_leave_the_global_random_state_alone(check, good):
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    if good:
        check()
    else:
        with pytest.raises(ExerciseError):
            check()
    assert torch.equal(torch.rand(1), expected)


@pytest.mark.parametrize("wrong, message", [
    (not_done, "Not done yet"),
    (lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=True),
     "does not start as the base"),
    (lambda base, r, a: Adapter(base, r, a, a_random=False, b_random=False),
     "no adapter parameter gets a gradient"),
    (lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=False, freeze=False),
     "still trainable"),
    (lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=False, freeze_bias=False),
     "bias is still trainable"),
    (lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=False, deep_copy=True),
     "trainable copy of the base"),
    (lambda base, r, a: base.requires_grad_(False), "nothing in this layer trains"),
    (lambda base, r, a: Adapter(base, r, a, a_random=True, b_random=False, b_buffer=True),
     "is a buffer"),
    (WrongShape, r"\(2, 5, 24\)"),
])
def test_lora_init_wrong(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch15.check_lora_init(wrong)


# a DoRA-like trainable (d_out,) gain besides A and B: not LoRA, not a copy either
class WithGain(Adapter):
    def __init__(self, base, rank, alpha):
        super().__init__(base, rank, alpha, a_random=True, b_random=False)
        self.gain = nn.Parameter(torch.ones(base.out_features))

    def forward(self, x):
        return super().forward(x) * self.gain


def test_lora_init_extra_gain_vector_is_not_called_a_copy():
    # 15-m8 (review 2026-11-28): it was told "a trainable copy of the base"
    with pytest.raises(ExerciseError, match="(?s)also trains gain, a vector of 24 numbers.*Hint: "
                                            "drop the extra") as e:
        ch15.check_lora_init(WithGain)
    assert "copy" not in str(e.value)
