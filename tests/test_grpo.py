"""course_lib.align.grpo: group advantages, the clipped objective, the k3 KL and the four
averagings, checked by hand, by properties, and against TRL 1.16 itself (slow: TRL's start-up).

The TRL tests compare with:
- ``GRPOTrainer._generate_and_score_completions`` (TRL's advantages, for scale_rewards "group",
  "batch", "none", from rewards our reward function records);
- ``GRPOTrainer._compute_loss`` on given tensors (the instance's
  ``_get_per_token_logps_and_entropies`` replaced by one returning our log-probabilities), for
  loss_type "grpo", "bnpo", "dr_grpo", "dapo", with and without the KL penalty, token- and
  sequence-level ratios: the loss, its gradient, and the logged ``kl`` and ``clip_ratio/*``;
- ``GRPOTrainer._compute_loss`` end to end, TRL scoring its own samples with its model while we
  score them with our GPT holding the same weights.
"""
from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.align.grpo import (GRPOConfig, group_advantages, grpo_batch_loss, grpo_loss, kl_k3,
                                   masked_mean)
from course_lib.model import GPT, GPTConfig
from course_lib.align.dpo import completion_logprobs

# --- advantages ---------------------------------------------------------------------------------


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0])
    adv = group_advantages(rewards, 4)
    std = math.sqrt(1 / 3)  # the sample std of (1, 0, 0, 1)
    assert torch.allclose(adv[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]) / (std + 1e-4))
    assert torch.equal(adv[4:], torch.zeros(4))  # a group that agrees teaches nothing
    assert torch.equal(group_advantages(rewards, 4, "none")[:4],
                       torch.tensor([0.5, -0.5, -0.5, 0.5]))
    batch = group_advantages(rewards, 4, "batch")
    assert torch.allclose(batch[:4], torch.tensor([0.5, -0.5, -0.5, 0.5]) / (rewards.std() + 1e-4))


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=8, max_size=8),
       st.sampled_from([2, 4, 8]))
def test_group_advantages_sum_to_zero_in_each_group(values, group):
    rewards = torch.tensor(values, dtype=torch.float64)
    for scale in ("group", "batch", "none"):
        adv = group_advantages(rewards, group, scale).view(-1, group)
        assert torch.allclose(adv.sum(1), torch.zeros(adv.size(0), dtype=torch.float64), atol=1e-8)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(-10, 10, allow_nan=False), min_size=4, max_size=4), st.floats(0.1, 10),
       st.floats(-5, 5))
def test_group_scaled_advantages_ignore_the_rewards_scale_and_shift(values, a, b):
    rewards = torch.tensor(values, dtype=torch.float64)
    if rewards.std() < 1e-2:
        return  # eps = 1e-4 matters next to a tiny std
    one, two = group_advantages(rewards, 4, eps=0.0), group_advantages(a * rewards + b, 4, eps=0.0)
    assert torch.allclose(one, two, atol=1e-9)


def test_group_advantages_refuse_bad_shapes():
    with pytest.raises(ValueError, match="prompts \\* group_size"):
        group_advantages(torch.zeros(5), 4)
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(torch.zeros(4), 4, "std")


# --- the objective ------------------------------------------------------------------------------


def test_kl_k3_is_zero_when_equal_and_never_negative():
    a = torch.randn(3, 5, dtype=torch.float64)
    assert torch.equal(kl_k3(a, a), torch.zeros(3, 5, dtype=torch.float64))
    assert torch.all(kl_k3(a, torch.randn(3, 5, dtype=torch.float64)) >= 0)


def test_kl_k3_is_unbiased_for_the_kl():
    p, q = torch.tensor([0.5, 0.3, 0.2],
                        dtype=torch.float64), torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
    expected = (p * kl_k3(p.log(), q.log())).sum()  # E_{x ~ p}[k3]
    assert torch.allclose(expected, (p * (p / q).log()).sum())


def test_on_policy_loss_is_minus_the_mean_advantage_and_its_gradient_is_the_policy_gradient():
    logps = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.7, -0.2]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([1.0, -2.0])
    loss, stats = grpo_loss(logps, logps.detach(), adv, mask, GRPOConfig(loss_type="bnpo"))
    assert loss.item() == pytest.approx(-(2 * 1.0 + 3 * -2.0) / 5)  # ratio 1 everywhere
    loss.backward()
    assert torch.allclose(logps.grad, -adv[:, None] * mask / 5)  # REINFORCE with the group baseline
    assert stats["clip_ratio/region_mean"] == 0.0


def test_clipping_stops_the_gradient_past_the_trust_region():
    old = torch.zeros(1, 2)
    logps = torch.tensor([[0.5, -0.5]], requires_grad=True)  # ratios e^0.5 = 1.65 and e^-0.5 = 0.61
    loss, stats = grpo_loss(logps, old, torch.tensor([1.0]), torch.ones(1, 2),
                            GRPOConfig(loss_type="bnpo"))
    loss.backward()
    assert logps.grad[0, 0] == 0  # positive advantage, ratio above 1.2: clipped, no gradient
    # below 0.8 with a positive advantage: the min keeps the unclipped term
    assert logps.grad[0, 1] != 0
    assert stats["clip_ratio/high_mean"] == 0.5 and stats["clip_ratio/low_mean"] == 0.0


def test_the_four_averagings_by_hand():
    logps = torch.zeros(2, 4)  # on-policy: each token's loss is minus its answer's advantage
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 1]])
    adv = torch.tensor([3.0, -1.0])
    got = {t: grpo_loss(logps, logps, adv, mask,
                        GRPOConfig(loss_type=t, max_completion_length=8))[0].item()
           for t in ("grpo", "bnpo", "dr_grpo", "dapo")}
    # each answer's mean, then the mean over answers
    assert got["grpo"] == pytest.approx((-3 + 1) / 2)
    assert got["bnpo"] == pytest.approx((-3 + 4) / 5)  # over the batch's 5 tokens
    assert got["dr_grpo"] == pytest.approx((-3 + 4) / (2 * 8))  # a constant: answers * max length
    assert got["dapo"] == pytest.approx((-3 + 4) / 5)
    dapo_global = grpo_loss(logps, logps, adv, mask, GRPOConfig(), num_items=10)[0]
    assert dapo_global.item() == pytest.approx((-3 + 4) / 10)  # the generation batch's token count


def test_kl_needs_a_reference():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="ref_logps"):
        grpo_loss(x, x, torch.zeros(1), torch.ones(1, 2), GRPOConfig(beta=0.1))


def test_config_refuses_bad_settings():
    for bad in ({"group_size": 1}, {"loss_type": "ppo"}, {"scale_rewards": "std"}, {"epsilon": 0.0},
                {"beta": -1.0}, {"importance_sampling_level": "word"}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            GRPOConfig(**bad)
    # review 2026-11-28 rows 92-93 (A2): refused here, naming the limit, not at the first step by
    # sample_groups
    with pytest.raises(ValueError,
                       match=r"GRPOConfig.group_size must be an integer in \[2, 512\], got 513"):
        GRPOConfig(group_size=513)
    assert GRPOConfig(group_size=512).group_size == 512


def test_masked_mean():
    assert masked_mean(torch.tensor([[1.0, 5.0], [3.0, 7.0]]),
                       torch.tensor([[1, 0], [1, 1]])).item() == pytest.approx(11 / 3)


def test_grpo_batch_loss_raises_the_probability_of_rewarded_answers():
    torch.manual_seed(0)
    policy = GPT(GPTConfig(vocab_size=12, block_size=16, n_layer=1, n_head=2, n_embd=16)).eval()
    reference = GPT(GPTConfig(vocab_size=12, block_size=16, n_layer=1, n_head=2, n_embd=16)).eval()
    reference.load_state_dict(policy.state_dict())
    prompts, answers = [[1, 2]] * 4, [[3, 4], [5], [3, 4], [6, 7, 8]]
    adv = group_advantages(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4)
    config = GRPOConfig(group_size=4, beta=0.04)
    opt = torch.optim.SGD(policy.parameters(), lr=0.2)
    first = None
    for _ in range(3):
        loss, stats = grpo_batch_loss(policy, prompts, answers, adv, config, pad_id=0,
                                      reference=reference)
        first = first or stats
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert first["kl"] == 0.0 and stats["kl"] > 0  # the policy moved away from the reference
    with torch.no_grad():
        before, _ = completion_logprobs(reference, prompts[:1], answers[:1], 0)
        after, _ = completion_logprobs(policy, prompts[:1], answers[:1], 0)
    assert after.sum() > before.sum()
    with pytest.raises(ValueError, match="reference"):
        grpo_batch_loss(policy, prompts, answers, adv, config, pad_id=0)


# --- equal to TRL -------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_equal_trls(tmp_path, scale):
    pytest.importorskip("trl")
    from trl_helpers import trl_grpo_trainer

    seen = []
    generator = torch.Generator().manual_seed(0)

    def reward(completions, **kw):
        values = torch.randint(0, 4, (len(completions),), generator=generator).float().tolist()
        seen.append(values)
        return values

    trainer, _ = trl_grpo_trainer(tmp_path, [reward], per_device_train_batch_size=8,
                                  num_generations=4, max_completion_length=4, scale_rewards=scale)
    trainer.model.train()  # the mode TRL samples in; advantages do not depend on it
    out = trainer._generate_and_score_completions([{"prompt": "ab"}] * 4 + [{"prompt": "cd"}] * 4)
    ours = group_advantages(torch.tensor(seen[-1]), 4, scale)
    torch.testing.assert_close(ours, out["advantages"], rtol=0, atol=1e-6)


def _random_rollout(seed: int, B=6, Tc=5):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, Tc + 1, (B,), generator=g)
    mask = (torch.arange(Tc)[None, :] < lengths[:, None]).long()
    logps = -torch.rand(B, Tc, generator=g) * 3
    # off-policy: ratios get clipped
    return dict(logps=logps, old=logps + 0.4 * torch.randn(B, Tc, generator=g),
                ref=logps + 0.3 * torch.randn(B, Tc, generator=g), adv=torch.randn(B, generator=g),
                mask=mask)


@pytest.mark.slow
def test_grpo_loss_equals_trls_on_the_same_tensors(tmp_path):
    pytest.importorskip("trl")
    from trl_helpers import trl_grpo_trainer

    cases = list(itertools.product(["grpo", "bnpo", "dr_grpo", "dapo"], [0.0, 0.04],
                                   ["token", "sequence"]))
    for case, ((loss_type, beta, level),
               bias_correction) in enumerate(zip(cases, itertools.cycle([True, False, True]))):
        options = dict(loss_type=loss_type, beta=beta, importance_sampling_level=level, epsilon=0.2,
                       epsilon_high=0.28, max_completion_length=5)
        trainer, _ = trl_grpo_trainer(tmp_path, per_device_train_batch_size=6, num_generations=3,
                                      use_bias_correction_kl=bias_correction, **options)
        r = _random_rollout(case)
        theirs_logps = r["logps"].clone().requires_grad_()
        trainer._get_per_token_logps_and_entropies = lambda *a, **k: (
            theirs_logps,
            torch.zeros_like(r["logps"]),
            None,
        )
        B = r["mask"].size(0)
        inputs = dict(
            prompt_ids=torch.ones(B, 2, dtype=torch.long),
            prompt_mask=torch.ones(B, 2, dtype=torch.long),
            completion_ids=torch.ones_like(r["mask"]),
            completion_mask=r["mask"],
            advantages=r["adv"],
            old_per_token_logps=r["old"],
            ref_per_token_logps=r["ref"],
            num_items_in_batch=r["mask"].sum().float() + 7,
        )  # as if the generation batch were larger
        theirs = trainer._compute_loss(trainer.model, inputs)
        theirs.backward()
        ours_logps = r["logps"].clone().requires_grad_()
        config = GRPOConfig(group_size=3, beta=beta, kl_bias_correction=bias_correction,
                            importance_sampling_level=level, epsilon=0.2, epsilon_high=0.28,
                            loss_type=loss_type, max_completion_length=5)
        ours, stats = grpo_loss(ours_logps, r["old"], r["adv"], r["mask"], config, r["ref"],
                                num_items=inputs["num_items_in_batch"])
        ours.backward()
        label = (loss_type, beta, level, bias_correction)
        assert abs(ours.item() - theirs.item()) < 1e-6, label
        torch.testing.assert_close(ours_logps.grad, theirs_logps.grad, rtol=0, atol=1e-6,
                                   msg=str(label))
        logged = trainer._metrics["eval"]
        for key in ["clip_ratio/low_mean", "clip_ratio/high_mean",
                    "clip_ratio/region_mean"] + (["kl"] if beta else []):
            assert stats[key] == pytest.approx(logged[key][-1], abs=1e-6), (key, label)
        # the test exercises clipping
        assert stats["clip_ratio/region_mean"] > 0 or level == "sequence", label


@pytest.mark.slow
@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_grpo_loss_equals_trls_end_to_end(tmp_path, loss_type):
    """TRL samples two groups and scores them with its model; we score the same answers with our
    GPT holding the same weights. The on-policy loss is near 0 (advantages sum to 0 in a group),
    so the log-probabilities and the gradient are compared too.

    The prompts have the same length on purpose. TRL pads prompts on the left and its scoring
    forward passes no ``position_ids``, so a GPT-2 (learned absolute positions) scores a padded
    prompt's tokens at positions shifted by the pads (log-probabilities off by up to 0.18 here),
    while ``generate`` sampled them at positions counted from the first real token. We pad on the
    right, where every real token keeps its position; RoPE models are unaffected either way."""
    pytest.importorskip("trl")
    from trl_helpers import trl_grpo_trainer

    torch.manual_seed(0)
    trainer, ours = trl_grpo_trainer(tmp_path, per_device_train_batch_size=8, num_generations=4,
                                     max_completion_length=6, loss_type=loss_type, beta=0.04)
    out = trainer._generate_and_score_completions([{"prompt": "ab"}] * 4 + [{"prompt": "cd"}] * 4)
    theirs = trainer._compute_loss(trainer.model, out)
    theirs.backward()
    prompts = [row[m.bool()].tolist() for row, m in zip(out["prompt_ids"], out["prompt_mask"])]
    completions = [row[m.bool()].tolist() for row,
                   m in zip(out["completion_ids"], out["completion_mask"])]
    config = GRPOConfig(group_size=4, beta=0.04, loss_type=loss_type, max_completion_length=6)
    reference = copy.deepcopy(ours)  # TRL's reference is the starting policy
    loss, stats = grpo_batch_loss(ours, prompts, completions, out["advantages"], config, pad_id=0,
                                  reference=reference)
    loss.backward()
    assert abs(loss.item() - theirs.item()) < 1e-6
    assert stats["kl"] == pytest.approx(trainer._metrics["eval"]["kl"][-1], abs=1e-6)
    with torch.no_grad():
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        their_logps, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, torch.cat([out["prompt_mask"], out["completion_mask"]], 1),
            out["completion_ids"].size(1))
        our_logps, mask = completion_logprobs(ours, prompts, completions, pad_id=0)
    torch.testing.assert_close(our_logps, their_logps[:, -our_logps.size(1):] * mask, rtol=0,
                               atol=1e-6)
    their_grad = trainer.model.transformer.wte.weight.grad
    assert their_grad.abs().max() > 1e-4  # a gradient worth comparing
    torch.testing.assert_close(ours.wte.weight.grad, their_grad, rtol=1e-4, atol=1e-6)
