"""course_lib.align.dpo: the log-probability of an answer and the DPO loss, checked by hand,
by properties, and against TRL 1.16 itself (slow: TRL's start-up).

The TRL tests compare with:
- ``trl.trainer.utils.selective_log_softmax`` (the per-token log-probabilities of given logits);
- ``trl.trainer.dpo_trainer.DataCollatorForPreference`` (the packed batch);
- ``DPOTrainer.compute_ref_log_probs`` (TRL's sequence log-probabilities: its fused LM head over
  the completion mask, summed), on a tiny random GPT2LMHeadModel that our GPT loads;
- ``DPOTrainer.compute_loss`` (``_compute_loss``: TRL's DPO loss and its ``rewards/*`` metrics),
  one pair at a time for the per-example loss, for the loss types "sigmoid", "hinge", "ipo",
  "robust".
"""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.model import GPT, GPTConfig
from course_lib.align.dpo import (DPOConfig, completion_logprobs, dpo_batch_loss, dpo_loss,
                                  dpo_metrics,
                                   implicit_rewards, pack_completions, pack_pairs,
                                  sequence_logprobs,
                                   token_logprobs)


def small_gpt(seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=20, block_size=32, n_layer=1, n_head=2,
                         n_embd=16)).to(dtype).eval()


# --- log-probabilities, by hand -----------------------------------------------------------------


def test_pack_completions_layout():
    ids, mask = pack_completions([[1, 2, 3], [4]], [[5, 6], [7, 8, 9]], pad_id=0)
    assert ids.tolist() == [[1, 2, 3, 5, 6], [4, 7, 8, 9, 0]]
    assert mask.tolist() == [[0, 0, 0, 1, 1], [0, 1, 1, 1, 0]]


def test_pack_completions_refuses_bad_input():
    with pytest.raises(ValueError, match="one completion per prompt"):
        pack_completions([[1]], [[2], [3]], 0)
    with pytest.raises(ValueError, match="at least one token"):
        pack_completions([[]], [[2]], 0)
    with pytest.raises(ValueError, match="no prompts"):
        pack_completions([], [], 0)


def test_sequence_logprob_is_the_chain_rule_one_row_at_a_time():
    model = small_gpt()
    prompts, answers = [[1, 2, 3], [4], [5, 6]], [[7, 8], [9, 10, 11], [12]]
    ids, mask = pack_completions(prompts, answers, pad_id=0)
    got = sequence_logprobs(model, ids, mask)
    for i, (p, a) in enumerate(zip(prompts, answers)):
        row = torch.tensor([p + a])
        logp = model(row)[0][0].log_softmax(-1)  # (T, V), unpadded
        want = sum(logp[len(p) - 1 + j, tok] for j, tok in enumerate(a))
        assert abs(got[i].item() - want.item()) < 1e-12


def test_padding_and_prompt_tokens_are_not_scored():
    model = small_gpt()
    ids, mask = pack_completions([[1, 2], [3, 4, 5]], [[6], [7]], pad_id=0)
    per_token = token_logprobs(model, ids, mask)
    assert per_token.shape == (2, ids.size(1) - 1)
    assert torch.all(per_token[mask[:, 1:] == 0] == 0)
    # another pad id changes nothing: the pads come after everything that is scored
    ids9, mask9 = pack_completions([[1, 2], [3, 4, 5]], [[6], [7]], pad_id=9)
    assert torch.equal(sequence_logprobs(model, ids9, mask9), sequence_logprobs(model, ids, mask))


def test_temperature_divides_the_logits():
    model = small_gpt()
    ids, mask = pack_completions([[1, 2]], [[3, 4]], pad_id=0)
    logits = model(ids)[0][:, :-1] / 0.7
    want = logits.log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0] * mask[:, 1:]
    assert torch.allclose(token_logprobs(model, ids, mask, temperature=0.7), want, atol=1e-12)
    with pytest.raises(ValueError, match="temperature must be positive"):
        token_logprobs(model, ids, mask, temperature=0.0)


def test_completion_logprobs_align_on_the_answers():
    model = small_gpt()
    prompts, answers = [[1, 2, 3], [4]], [[5, 6], [7, 8, 9]]
    logps, mask = completion_logprobs(model, prompts, answers, pad_id=0)
    assert logps.shape == mask.shape == (2, 3)
    assert mask.tolist() == [[1, 1, 0], [1, 1, 1]]
    ids, full_mask = pack_completions(prompts, answers, 0)
    assert torch.allclose(logps.sum(1), sequence_logprobs(model, ids, full_mask), atol=1e-12)
    per_token = token_logprobs(model, ids, full_mask)
    assert logps[1, 0] == per_token[1, 0] and logps[0, 0] == per_token[0, 2]


def test_logprobs_carry_gradients():
    model = small_gpt(dtype=torch.float32)
    ids, mask = pack_completions([[1, 2]], [[3, 4]], pad_id=0)
    sequence_logprobs(model, ids, mask).sum().backward()
    assert model.lm_head.weight.grad is not None and model.lm_head.weight.grad.abs().sum() > 0


# --- DPO, by hand and by its laws ---------------------------------------------------------------


def test_dpo_loss_by_hand():
    # margin = (-1 - -2) - (-3 - -2.5) = 1.5; loss = -log sigmoid(0.1 * 1.5)
    loss = dpo_loss(torch.tensor([-1.0]), torch.tensor([-3.0]), torch.tensor([-2.0]),
                    torch.tensor([-2.5]), beta=0.1)
    assert loss.item() == pytest.approx(-math.log(1 / (1 + math.exp(-0.15))), abs=1e-7)


margins = st.floats(-50, 50, allow_nan=False)
betas = st.floats(0.01, 5.0)


@settings(max_examples=60, deadline=None)
@given(margins, betas, st.floats(-30, 0), st.floats(-30, 0))
def test_dpo_loss_is_softplus_of_minus_beta_margin(margin, beta, ref_c, ref_r):
    m = torch.tensor([margin], dtype=torch.float64)
    # split the margin between the two log-ratios anyhow: only their difference matters
    chosen, rejected = (torch.tensor([ref_c], dtype=torch.float64) + m / 2,
                        torch.tensor([ref_r], dtype=torch.float64) - m / 2)
    loss = dpo_loss(chosen, rejected, torch.tensor([ref_c], dtype=torch.float64),
                    torch.tensor([ref_r], dtype=torch.float64), beta=beta)
    assert loss.item() == pytest.approx(F.softplus(-beta * m).item(), rel=1e-9, abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(margins, margins, betas)
def test_dpo_loss_decreases_in_the_margin(a, b, beta):
    low, high = sorted([a, b])
    zero = torch.zeros(1, dtype=torch.float64)
    loss = lambda m: dpo_loss(torch.tensor([m], dtype=torch.float64), zero, zero,  # noqa: E731
                              zero, beta=beta).item()
    assert loss(high) <= loss(low)


@given(betas)
def test_dpo_loss_is_ln2_at_zero_margin(beta):
    x = torch.tensor([-4.0, -7.5], dtype=torch.float64)
    assert torch.allclose(dpo_loss(x, x, x, x, beta=beta),
                          torch.full((2,), math.log(2), dtype=torch.float64))


def test_dpo_config_refuses_bad_settings():
    with pytest.raises(ValueError, match="beta"):
        DPOConfig(beta=0.0)
    with pytest.raises(ValueError, match="loss_type"):
        DPOConfig(loss_type="kto")
    with pytest.raises(ValueError, match="label_smoothing"):
        DPOConfig(loss_type="robust", label_smoothing=0.5)
    with pytest.raises(ValueError, match=r"DPOConfig.pair_group_size must be an integer in \[2, "
                                         r"512\], got 1000"):
        # review 2026-11-28 rows 90-91 (A2): it named max_rows, not the option
        DPOConfig(pair_group_size=1000)
    with pytest.raises(ValueError, match="ipo loss divides"):
        x = torch.zeros(1)
        dpo_loss(x, x, x, x, loss_type="ipo")


def test_implicit_rewards_and_metrics():
    pc, pr = torch.tensor([-1.0, -5.0]), torch.tensor([-2.0, -1.0])
    rc, rr = torch.tensor([-2.0, -4.0]), torch.tensor([-2.0, -2.0])
    assert torch.allclose(implicit_rewards(pc, rc, 0.5), torch.tensor([0.5, -0.5]))
    m = dpo_metrics(pc, pr, rc, rr, beta=0.5)
    assert m["rewards/accuracies"] == 0.5  # pair 0: 0.5 > 0; pair 1: -0.5 < 0.5
    assert m["rewards/margins"] == pytest.approx((0.5 - 0.0 + -0.5 - 0.5) / 2)


def test_dpo_batch_loss_moves_the_policy_towards_the_chosen_answer():
    policy, reference = small_gpt(0, torch.float32), small_gpt(0, torch.float32)
    pairs = [([1, 2, 3], [4, 5], [6, 7]), ([8, 9], [10], [11, 12])]
    ids, mask = pack_pairs(pairs, pad_id=0)
    opt = torch.optim.SGD(policy.parameters(), lr=0.5)
    loss0, metrics0 = dpo_batch_loss(policy, reference, ids, mask, DPOConfig(beta=0.5))
    assert loss0.item() == pytest.approx(math.log(2), abs=1e-6)  # policy == reference: zero margin
    for _ in range(5):
        loss, metrics = dpo_batch_loss(policy, reference, ids, mask, DPOConfig(beta=0.5))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert (loss.item() < loss0.item() and metrics["rewards/accuracies"] == 1.0
            and metrics["rewards/margins"] > 0)
    assert all(p.grad is None for p in reference.parameters())


# --- equal to TRL -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trl_twins():
    pytest.importorskip("trl")
    from trl_helpers import twin_models

    hf, ours = twin_models(0, torch.float32)  # TRL scores in float32 whatever the model's dtype
    hf_ref, ref = twin_models(1, torch.float32)
    return hf, ours, hf_ref, ref


@pytest.mark.slow
def test_token_logprobs_equal_trls_selective_log_softmax():
    pytest.importorskip("trl")
    from trl.trainer.utils import selective_log_softmax

    model = small_gpt()
    ids, mask = pack_completions([[1, 2, 3], [4]], [[5, 6], [7, 8, 9]], pad_id=0)
    theirs = selective_log_softmax(model(ids)[0][:, :-1], ids[:, 1:]) * mask[:, 1:]
    assert torch.allclose(token_logprobs(model, ids, mask), theirs, atol=1e-12)


@pytest.mark.slow
def test_sequence_logprobs_equal_trls_dpo_path(trl_twins, tmp_path):
    from trl.trainer.dpo_trainer import DataCollatorForPreference
    from trl_helpers import random_pairs, trl_dpo_trainer

    hf, ours, hf_ref, _ = trl_twins
    trainer = trl_dpo_trainer(hf, hf_ref, tmp_path)
    pairs = random_pairs(8, seed=0)
    batch = DataCollatorForPreference(pad_token_id=0)(
        [{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r} for p, c, r in pairs])
    ids, mask = pack_pairs(pairs, pad_id=0)
    assert torch.equal(ids, batch["input_ids"]) and torch.equal(mask, batch["completion_mask"])
    with torch.no_grad():
        theirs = torch.cat(trainer.compute_ref_log_probs(trainer.model, batch))  # TRL's sums, (2B,)
        per_token = hf(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                       labels=batch["input_ids"].masked_fill(mask == 0, -100),
                       fused_lm_head=True).log_probs
        torch.testing.assert_close(token_logprobs(ours, ids, mask), per_token, rtol=0, atol=1e-6)
        torch.testing.assert_close(sequence_logprobs(ours, ids, mask), theirs, rtol=1e-6, atol=1e-6)


# the relative error float32 sums of log-probabilities reach on any CPU (the same formulas as TRL's)
FLOAT32_SUMS = 2e-5


@pytest.mark.slow
@pytest.mark.parametrize("loss_type,options", [("sigmoid", {}), ("hinge", {}), ("ipo", {}),
                                               ("robust", {"label_smoothing": 0.2})])
def test_dpo_loss_equals_trls_per_example(trl_twins, tmp_path, loss_type, options):
    from trl.trainer.dpo_trainer import DataCollatorForPreference
    from trl_helpers import random_pairs, trl_dpo_trainer

    hf, ours, hf_ref, ref = trl_twins
    beta = 0.3
    trainer = trl_dpo_trainer(hf, hf_ref, tmp_path, beta=beta, loss_type=[loss_type], **options)
    collate = DataCollatorForPreference(pad_token_id=0)
    config = DPOConfig(beta=beta, loss_type=loss_type, **options)
    for p, c, r in random_pairs(6, seed=1):
        batch = collate([{"prompt_ids": p, "chosen_ids": c, "rejected_ids": r}])
        with torch.no_grad():
            theirs = trainer.compute_loss(hf, batch)  # the mean over one pair: the per-example loss
            # on TRL's own log-probabilities: ours must give TRL's loss to float rounding
            pc, pr = trainer.compute_ref_log_probs(hf, batch)
            rc, rr = trainer.compute_ref_log_probs(hf_ref, batch)
            lengths = batch["completion_mask"].sum(1)
            same = dpo_loss(pc, pr, rc, rr, beta, loss_type, config.label_smoothing, lengths[:1],
                            lengths[1:])
            # float32 to its rounding on any host: relative, since a loss of 0.7 summed from
            # log-probabilities of a hundred tokens moves by a few 1e-6 with the CPU's kernels
            # (2.6e-6 on an Intel Xeon)
            assert same.item() == pytest.approx(theirs.item(), rel=FLOAT32_SUMS, abs=1e-6)
            # and end to end, from our GPT's own log-probabilities
            ids, mask = pack_pairs([(p, c, r)], pad_id=0)
            ours_loss, metrics = dpo_batch_loss(ours, ref, ids, mask, config)
            assert ours_loss.item() == pytest.approx(theirs.item(), rel=FLOAT32_SUMS, abs=1e-6)
        # TRL files its metrics by the model's mode
        mode = "train" if trainer.model.training else "eval"
        logged = {k: v[-1] for k, v in trainer._metrics[mode].items() if k.startswith("rewards/")}
        assert len(logged) == 4  # chosen, rejected, accuracies, margins
        for key, value in logged.items():
            assert metrics[key] == pytest.approx(value, rel=FLOAT32_SUMS, abs=1e-6), key
