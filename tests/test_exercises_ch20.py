"""The checks of chapter 20's exercises: right answers pass, plausible wrong ones fail with a
hint."""
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


# 20-M6: the right values, but the router could never learn through them
def detached_weights(logits, k):
    weights, experts = top_k_weights(logits.detach(), k)
    return weights, experts


# a detached softmax, renormalised: no gradient reaches the logits
def detached_probabilities(logits, k):
    weights, experts = F.softmax(logits, dim=-1).detach().topk(k, dim=-1)
    return weights / weights.sum(-1, keepdim=True), experts


def in_place_on_input(logits, k):  # works on its input in place: still a right answer
    logits -= logits.max(dim=-1, keepdim=True).values
    return top_k_weights(logits, k)


@pytest.mark.parametrize("right", [in_place_on_input,
                                   lambda logits, k: [t if t.is_floating_point() else t
                                                      for t in top_k_weights(logits.double(), k)]])
def test_top_k_weights_other_right_answers(right, capsys):
    ch20.check_top_k_weights(right)
    assert_correct(capsys)


@pytest.mark.parametrize("wrong, message", [
    (not_renormalised, "sum to less than 1"), (raw_logits, "raw logits"),
    (lowest, "highest-scoring"),
    # 20-M6 (review 2026-11-28): detached weights were accepted
    (detached_weights, "(?s)carry no gradient.*Hint: compute them from router_logits"),
    (detached_probabilities, "(?s)carry no gradient.*Hint: compute them from router_logits"),
])
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


def first_choice_only(logits, k):  # f counts each token's best expert only
    N, E = logits.shape
    probs = F.softmax(logits, dim=-1)
    f = torch.bincount(probs.argmax(-1), minlength=E).float() / N
    return E * (f * probs.mean(0)).sum()


def hf_one_hot(logits, k):  # Hugging Face's form: one-hot masks summed over tokens and slots
    N, E = logits.shape
    probs = F.softmax(logits, dim=-1)
    mask = F.one_hot(probs.topk(k, dim=-1).indices, E).float()  # (N, k, E)
    return E * (mask.sum(1).mean(0) * probs.mean(0)).sum()


# 20-M6 (review 2026-11-28): three wrong answers the check accepted


def detached_p(logits, k):  # the right value, no gradient: it balances nothing in training
    return balancing_loss(logits.detach(), k)


def python_float(logits, k):
    return balancing_loss(logits, k).item()


def counts_only(logits, k):  # computed from argmax-style counts and detached probabilities
    with torch.no_grad():
        return balancing_loss(logits, k)


def no_minlength(logits, k):  # crashes as soon as the last experts get no token
    N, E = logits.shape
    probs = F.softmax(logits, dim=-1)
    f = torch.bincount(probs.topk(k, dim=-1).indices.flatten()).float() / N
    return E * (f * probs.mean(0)).sum()


def test_balancing_loss_correct(capsys):
    ch20.check_balancing_loss(balancing_loss)
    assert_correct(capsys)
    assert_leaves_rng_alone(ch20.check_balancing_loss, balancing_loss)


def test_balancing_loss_hf_form_correct(capsys):
    ch20.check_balancing_loss(hf_one_hot)
    assert_correct(capsys)


def test_balancing_loss_the_no_minlength_answer_really_crashes_on_a_collapsed_router():
    collapsed = torch.tensor([[5.0, 5.0] + [-5.0] * 6]).repeat(64, 1)  # chapter 20's `collapsed`
    with pytest.raises(RuntimeError, match="must match the size"):
        no_minlength(collapsed, 2)


@pytest.mark.parametrize("wrong, message", [
    (without_e, "E times too small"), (probabilities_twice, "mean probability"),
    # 20-m7: the slip of the exercise's solution box, and the first choice only, are named
    (per_token_fraction,
     "(?s)k = 2 times too small: you divided the counts by N \\* k.*Hint: divide the counts by N"),
    (first_choice_only, "(?s)only each token's first choice.*Hint: count every expert among the k"),
    (detached_p, "(?s)right value but carries no gradient.*Hint: f is a count"),
    (python_float, "(?s)right value but carries no gradient \\(got the float.*Hint: f is a count"),
    (counts_only, "(?s)right value but carries no gradient.*Hint: f is a count"),
    (no_minlength, "(?s)On a collapsed router.*must match the size.*Hint: torch.bincount returns "
                   "max\\(id\\) \\+ 1 counts.*pass minlength=E"),
])
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


def one_layer_only(config):
    expert = 3 * config.n_embd * config.ffn_size
    return total(config) - (config.moe_experts - config.moe_top_k) * expert


def with_ffn_hidden(config):  # ffn_hidden is None when the config does not set it
    expert = 3 * config.n_embd * config.ffn_hidden
    return total(config) - config.n_layer * (config.moe_experts - config.moe_top_k) * expert


@pytest.mark.parametrize("wrong, message", [(total, "that is the total"), (no_router, "routers"),
                                            (two_matrices, "3 \\* C \\* H"),
                                            (one_layer_only,
                                             "(?s)one layer only.*Hint: .*config.n_layer"),
                                            (with_ffn_hidden,
                                             "(?s)NoneType.*Hint: config.ffn_hidden is None")])
def test_active_parameters_wrong(wrong, message):
    assert_not_done(ch20.check_active_parameters, not_done)
    with pytest.raises(ExerciseError, match=message):
        ch20.check_active_parameters(wrong)


def test_active_parameters_does_not_reveal_the_answer():
    # 20-m6 (review 2026-11-28): the message printed the expected count ("gave 2,041,216, expected
    # 824,704")
    from course_lib.sizing import active_parameters
    from course_lib.model import GPTConfig
    c = GPTConfig(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128, norm="rmsnorm",
                  rope_theta=10000.0, mlp="swiglu", tie_weights=False, moe_experts=8, moe_top_k=2,
                  ffn_hidden=176)
    expected = active_parameters(c)
    with pytest.raises(ExerciseError) as info:
        ch20.check_active_parameters(lambda config: active(config) + 1)
    assert f"{expected:,}" not in str(info.value) and str(expected) not in str(info.value)
    assert "which is not the count" in str(info.value)
