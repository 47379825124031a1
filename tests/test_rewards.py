"""course_lib.align.rewards: the arithmetic task, its rewards (two of them hackable), seeded groups
of samples that resume exactly, GRPO's scores and DPO's pairs from a model's own answers."""
from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from course_lib.evaluation.tasks import load_task
from course_lib.model import GPT, GPTConfig
from course_lib.align.rewards import (Group, answer_text, arithmetic_items, cut_at_end,
                                      exact_answer_reward,
                                expected_answer, flatten, format_reward, get_reward, greedy_answers,
                                greedy_reward, greedy_scores, preference_pairs,
                                sample_group, sample_groups, score_groups, units_digit_reward)
from course_lib.tokenizers import CharTokenizer

TOKENIZER = CharTokenizer("0123456789+-*=\n ")


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=16, n_layer=1, n_head=2,
                         n_embd=16)).eval()


def test_arithmetic_items_hold_out_chapter_16s_test_items():
    test, train = arithmetic_items("test"), arithmetic_items("train")
    assert test == load_task("arithmetic").test and len(test) == 200
    assert len(train) == 90 * 90 - 200
    assert not {i["prompt"] for i in test} & {i["prompt"] for i in train}
    assert all(expected_answer(i["prompt"]) == i["answer"] for i in train[:100] + test)
    assert arithmetic_items("train",
                            seed=1) != train and sorted(map(str, arithmetic_items("train", 1))) == \
        sorted(map(str, train))
    with pytest.raises(ValueError, match="split"):
        arithmetic_items("val")


def test_expected_answer():
    assert (expected_answer("64+91=") == "155" and expected_answer("12-30=") == "-18"
            and expected_answer("7*8=") == "56")
    with pytest.raises(ValueError, match="not an arithmetic prompt"):
        expected_answer("hello")


def test_exact_answer_reward():
    assert exact_answer_reward("64+91=", "155\n") == 1.0
    assert exact_answer_reward("64+91=", " 155 \nmore text") == 1.0
    assert exact_answer_reward("64+91=", "154\n") == 0.0
    assert exact_answer_reward("64+91=", "155") == 0.0  # cut off before END: no answer
    assert answer_text("155") is None


def test_format_reward_can_be_hacked():
    assert format_reward("64+91=", "999\n") == 1.0 and exact_answer_reward("64+91=", "999\n") == 0.0
    assert format_reward("64+91=", "155\n") == 1.0
    assert format_reward("64+91=", "1+1\n") == 0.0 and format_reward("64+91=", "\n") == 0.0
    assert get_reward("format") is format_reward
    with pytest.raises(ValueError, match="unknown reward"):
        get_reward("length")


@given(st.integers(10, 99), st.integers(10, 99), st.integers(0, 300))
def test_only_the_right_sum_earns_the_exact_reward(a, b, guess):
    prompt = f"{a}+{b}="
    assert exact_answer_reward(prompt, f"{guess}\n") == float(guess == a + b)
    assert format_reward(prompt, f"{guess}\n") == 1.0


@given(st.integers(10, 99), st.integers(10, 99), st.integers(0, 300))
def test_the_units_digit_reward_pays_every_right_sum_and_some_wrong_ones(a, b, guess):
    """A proxy: the exact reward implies it; it pays a wrong sum exactly when the last digits
    agree."""
    prompt = f"{a}+{b}="
    units = units_digit_reward(prompt, f"{guess}\n")
    assert units == float(guess % 10 == (a + b) % 10)
    assert units >= exact_answer_reward(prompt, f"{guess}\n")


def test_the_units_digit_reward_wants_a_number_then_end():
    assert (units_digit_reward("64+91=", "5\n") == 1.0
            and units_digit_reward("64+91=", "145\n") == 1.0)
    assert (units_digit_reward("64+91=", "155") == 0.0
            and units_digit_reward("64+91=", "1+5\n") == 0.0)
    assert (units_digit_reward("64+91=", "154\n") == 0.0
            and get_reward("units") is units_digit_reward)


def test_cut_at_end():
    assert cut_at_end([1, 2, 9, 3, 9], 9) == [1, 2, 9] and cut_at_end([1, 2], 9) == [1, 2]


def test_sample_group_is_reproducible_from_the_generator_state():
    model = tiny_model()
    g = torch.Generator().manual_seed(5)
    first = sample_group(model, TOKENIZER, "12+34=", 4, 6, g)
    state = g.get_state()  # what a checkpoint stores
    second = sample_group(model, TOKENIZER, "56+7=", 4, 6, g)
    resumed = torch.Generator()
    resumed.set_state(state)
    assert sample_group(model, TOKENIZER, "56+7=", 4, 6, resumed) == second
    again = sample_group(model, TOKENIZER, "12+34=", 4, 6, torch.Generator().manual_seed(5))
    assert again == first
    prompt_ids, completions = first
    assert prompt_ids == TOKENIZER.encode("12+34=") and len(completions) == 4
    end = TOKENIZER.encode("\n")[0]
    assert all(len(c) <= 6 and (end not in c or c.index(end) == len(c) - 1) for c in completions)


def test_sample_groups_and_scores():
    model = tiny_model()
    groups = sample_groups(model, TOKENIZER, ["12+34=", "5+6="], 3, 5,
                           torch.Generator().manual_seed(0), reward=format_reward)
    assert [g.prompt for g in groups] == ["12+34=", "5+6="]
    for g in groups:
        assert g.completions == [TOKENIZER.decode(c) for c in g.completion_ids]
        assert g.rewards == [format_reward(g.prompt, t) for t in g.completions]
    rewards, adv = score_groups(groups)
    assert rewards.shape == adv.shape == (6,)
    prompts, completions = flatten(groups)
    assert len(prompts) == len(completions) == 6 and prompts[3] == TOKENIZER.encode("5+6=")


def _group(prompt, answers, rewards):
    return Group(prompt, TOKENIZER.encode(prompt), [TOKENIZER.encode(a) for a in answers], answers,
                 rewards)


def test_score_groups_by_hand():
    rewards, adv = score_groups([_group("1+1=", ["2\n", "3\n"], [1.0, 0.0]),
                                 _group("2+2=", ["4\n", "4\n"], [1.0, 1.0])],
                                scale_rewards="none")
    assert rewards.tolist() == [1.0, 0.0, 1.0, 1.0] and adv.tolist() == [0.5, -0.5, 0.0, 0.0]
    with pytest.raises(ValueError, match="same number"):
        score_groups([_group("1+1=", ["2\n"], [1.0]), _group("2+2=", ["4\n", "5\n"], [1.0, 0.0])])


def test_preference_pairs_pair_a_right_and_a_wrong_answer_to_the_same_prompt():
    groups = [_group("1+1=", ["3\n", "2\n", "3\n", "5\n", "2\n"], [0.0, 1.0, 0.0, 0.0, 1.0]),
              _group("2+2=", ["4\n", "4\n"], [1.0, 1.0]),  # all right: nothing to prefer
              _group("3+3=", ["7\n", "8\n"], [0.0, 0.0])]  # all wrong: nothing to prefer
    pairs = preference_pairs(groups)
    assert pairs == [(TOKENIZER.encode("1+1="), TOKENIZER.encode("2\n"), TOKENIZER.encode("3\n"))]
    # the distinct right answers are only "2\n": one pair however many are allowed
    assert len(preference_pairs(groups, max_pairs_per_prompt=3)) == 1
    two_right = [_group("1+1=", ["2\n", "3\n", "2 \n", "4\n"], [1.0, 0.0, 1.0, 0.0])]
    assert [TOKENIZER.decode(r) for _, _, r in preference_pairs(two_right, 2)] == ["3\n", "4\n"]


def test_pairs_from_sampled_groups_feed_dpo():
    from course_lib.align.dpo import DPOConfig, dpo_batch_loss, pack_pairs

    model = tiny_model()
    groups = sample_groups(model, TOKENIZER, ["12+34=", "5+6="], 6, 5,
                           torch.Generator().manual_seed(1), reward=format_reward)
    pairs = preference_pairs(groups)
    assert pairs, "a random model answers in both forms"
    assert all(format_reward("", TOKENIZER.decode(c)) == 1.0
               and format_reward("", TOKENIZER.decode(r)) == 0.0
               for _, c, r in pairs)
    ids, mask = pack_pairs(pairs, pad_id=0)
    loss, _ = dpo_batch_loss(model, model, ids, mask, DPOConfig())
    assert abs(loss.item() - 0.6931471805599453) < 1e-6


def test_greedy_answers_keep_the_items_order_and_scores_are_per_item():
    model, tokenizer = tiny_model(), TOKENIZER
    # two prompt lengths
    items = [{"prompt": p} for p in ("64+91=", "5+5=", "10+20=", "7+8=", "99+99=")]
    answers = greedy_answers(model, tokenizer, items)
    one_by_one = [greedy_answers(model, tokenizer, [item])[0] for item in items]
    assert answers == one_by_one and len(answers) == 5
    scores = greedy_scores(model, tokenizer, items, format_reward)
    assert scores == [format_reward(i["prompt"], a) for i, a in zip(items, answers)]
    assert greedy_reward(model, tokenizer, items, format_reward) == sum(scores) / len(scores)
    with pytest.raises(ValueError, match="no items"):
        greedy_answers(model, tokenizer, [])
