"""The checks of chapter 6's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch

from course_lib.exercises import ExerciseError, ch06
from course_lib.sizing import count_parameters
from exercise_helpers import assert_correct, assert_not_done, not_done


# --- counting parameters by hand ---


def count_by_hand(c, *, tie=True, position=True, final_norm=True, block_norms=True,
                  linear_biases=True):
    V, T, C, L = c.vocab_size, c.block_size, c.n_embd, c.n_layer
    b = 1 if c.bias else 0
    norm = C + b * C
    attention = 4 * C * C + (b * 4 * C if linear_biases else 0)
    mlp = 8 * C * C + (b * 5 * C if linear_biases else 0)
    per_block = attention + mlp + (2 * norm if block_norms else 0)
    total = V * C + (T * C if position else 0) + L * per_block
    if c.norm_position == "pre" and final_norm:
        total += norm
    if not c.tie_weights or not tie:
        total += V * C
    return total


def test_count_parameters_correct(capsys):
    ch06.check_count_parameters(count_by_hand)
    assert_correct(capsys)


def test_count_parameters_library_passes(capsys):
    ch06.check_count_parameters(count_parameters)
    assert_correct(capsys)


def test_count_parameters_not_done():
    assert_not_done(ch06.check_count_parameters, not_done)


@pytest.mark.parametrize("wrong, message", [
    (lambda c: count_by_hand(c, tie=False), "LM head"),
    (lambda c: count_by_hand(c, position=False), "position embedding"),
    (lambda c: count_by_hand(c, final_norm=False), "final LayerNorm"),
    (lambda c: count_by_hand(c) + (c.n_embd if c.norm_position == "post" else 0),
     "final LayerNorm"),
    (lambda c: count_by_hand(c, block_norms=False), "two LayerNorms of every block"),
    (lambda c: count_by_hand(c, linear_biases=False), "biases of the Linear layers"),
    (lambda c: 12 * c.n_layer * c.n_embd**2, "but the model has"),
    (lambda c: str(count_by_hand(c)), "expected an int"),
])
def test_count_parameters_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch06.check_count_parameters(wrong)


# --- the largest config under a budget ---


def best_config(budget, strict=False, layers=range(1, 17), widths=range(64, 1025, 64)):
    best, best_n = None, -1
    for n_layer in layers:
        for n_embd in widths:
            c = ch06.budget_config(n_layer, n_embd)
            n = count_parameters(c)
            fits = n < budget if strict else n <= budget
            if fits and n > best_n:
                best, best_n = c, n
    return best


def test_best_config_correct(capsys):
    ch06.check_best_config(best_config)
    assert_correct(capsys)


def test_best_config_not_done():
    assert_not_done(ch06.check_best_config, not_done)


def smallest_over(budget):
    over = [ch06.budget_config(L, C) for L in range(1, 17) for C in range(64, 1025, 64)
            if count_parameters(ch06.budget_config(L, C)) > budget]
    return min(over, key=count_parameters) if over else best_config(budget)


def deepest_first(budget):
    for n_layer in range(16, 0, -1):
        fitting = [ch06.budget_config(n_layer, C) for C in range(64, 1025, 64)
                   if count_parameters(ch06.budget_config(n_layer, C)) <= budget]
        if fitting:
            return fitting[-1]
    return None


@pytest.mark.parametrize("wrong, message", [
    (lambda b: best_config(b, strict=True), "exactly"),
    (smallest_over, "over the budget"),
    (deepest_first, "not always the deepest"),
    (lambda b: best_config(b, layers=range(1, 9)), "one with"),
    (lambda b: best_config(b) or ch06.budget_config(1, 64), "no config fits"),
    (lambda b: (b, best_config(b)), "expected a GPTConfig"),
    (lambda b: ch06.GPTConfig(n_layer=1, n_head=1, n_embd=8), "outside the search space"),
])
def test_best_config_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch06.check_best_config(wrong)


def gpt_logits_right(model, idx):
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for block in model.blocks:
        x = block(x)
    return model.lm_head(model.ln_f(x))


def gpt_logits_buggy(model, idx):  # the tutorial's bug: ln_f created, never applied
    x = model.wte(idx) + model.wpe(torch.arange(idx.shape[1]))
    for block in model.blocks:
        x = block(x)
    return model.lm_head(x)


def test_gpt_logits_correct(capsys):
    ch06.check_gpt_logits(gpt_logits_right)
    assert "Correct" in capsys.readouterr().out


def test_gpt_logits_bug_fails_with_hint():
    with pytest.raises(ExerciseError, match="ln_f"):
        ch06.check_gpt_logits(gpt_logits_buggy)


def test_gpt_logits_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch06.check_gpt_logits(not_done)


@pytest.mark.parametrize("wrong, message", [
    # Issue 22: NaN used to crash the check with ValueError (int(round(nan))).
    (lambda c: float("nan"), "(?s)got NaN.*Hint: "),
    (lambda c: count_by_hand(c) + 0.7, "(?s)not a whole number.*Hint: a count is an integer"),
    (lambda c: None, "(?s)returned None.*Hint: did you forget the `return`"),
])
def test_count_parameters_malformed_answers_fail_with_a_hint(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch06.check_count_parameters(wrong)


def test_count_parameters_accepts_a_whole_float(capsys):
    ch06.check_count_parameters(lambda c: float(count_by_hand(c)))
    assert_correct(capsys)


def test_best_config_returning_none_says_so():
    with pytest.raises(ExerciseError,
                       match="(?s)returned None, but a config with .* fits.*`return`"):
        ch06.check_best_config(lambda budget: None)
