"""Checks for chapter 18, DPO and GRPO: ``from course_lib.exercises import ch18``."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..align.grpo import group_advantages
from ..align.dpo import dpo_loss
from . import call, expect_close, expect_tensor, fail, passed


def _is(got, wrong, expected, atol: float = 1e-5) -> bool:
    """``got`` is the classic mistake ``wrong`` (and on this case that mistake differs from the
    answer)."""
    wrong = wrong.double()
    return (torch.allclose(got.double(), wrong, atol=atol)
            and not torch.allclose(wrong, expected.double(), atol=atol))


def _dpo_case(g: torch.Generator, B: int):
    logps = [-(torch.rand(B, generator=g, dtype=torch.float64) * 20 + 1) for _ in range(4)]
    return logps  # policy chosen, policy rejected, reference chosen, reference rejected: (B,) each


def check_dpo_loss(fn) -> None:
    """``fn(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta) -> (B,)``: the DPO loss
    of each pair, ``-log sigmoid(beta * margin)`` with margin the chosen answer's log-ratio to the
    reference minus the rejected answer's."""
    g = torch.Generator().manual_seed(18)
    for B, beta in ((4, 0.1), (6, 0.5), (3, 2.0)):
        pc, pr, rc, rr = _dpo_case(g, B)
        got = call(fn, pc.clone(), pr.clone(), rc.clone(), rr.clone(), beta)
        expected = dpo_loss(pc, pr, rc, rr, beta)
        expect_tensor(got, (B,), f"dpo_loss(..., beta={beta})",
                      "one loss per pair: (B,), not their mean")
        if _is(got, F.softplus(-beta * (pc - pr)), expected):
            fail("your loss ignores the reference model.",
                 "the margin compares log-ratios to the reference: "
                 "(pi_chosen - ref_chosen) - (pi_rejected - ref_rejected)")
        if _is(got, F.softplus(beta * ((pc - rc) - (pr - rr))), expected):
            fail("your loss prefers the rejected answer: it falls as the rejected answer gains.",
                 "the loss is -log sigmoid(+beta * margin), margin = chosen's log-ratio minus "
                 "rejected's")
        if _is(got, F.softplus(-((pc - rc) - (pr - rr))), expected):
            fail("your loss leaves out beta.", "multiply the margin by beta before the sigmoid")
        if _is(got, F.logsigmoid(beta * ((pc - rc) - (pr - rr))), expected):
            fail("your loss is log sigmoid(beta * margin), a log-likelihood to maximise: a loss is "
                 "its negative.")
        expect_close(got, expected, f"dpo_loss(..., beta={beta})",
                     "-log sigmoid(beta * margin), computed "
                     "stably as softplus(-beta * margin)")
    passed("the DPO loss: log(2) at a zero margin, falling as the chosen answer gains on the "
           "rejected one relative to the reference.")


def check_group_advantages(fn) -> None:
    """``fn(rewards, group_size) -> (N,)``: GRPO's advantages of rewards (N,), each prompt's G
    answers side by side: ``(r - mean of its group) / (std of its group + 1e-4)``, the sample std
    (n - 1), as TRL's (the GRPO paper does not say which)."""
    g = torch.Generator().manual_seed(180)
    cases = [(torch.randint(0, 2, (12,), generator=g).float(), 4),
             (torch.rand(10, generator=g) * 3, 5),
             # a group that agrees: advantage 0
             (torch.tensor([1., 1., 1., 1., 0., 1., 0., 0.]), 4)]
    for rewards, G in cases:
        got = call(fn, rewards.clone(), G)
        expected = group_advantages(rewards, G, "group")
        expect_tensor(got, rewards.shape, f"advantages of {G}-answer groups",
                      "one advantage per answer: (N,)")
        grouped = rewards.view(-1, G)
        centred = (grouped - grouped.mean(1, keepdim=True)).view(-1)
        if _is(got, centred, expected, 1e-4):
            fail("your advantages are centred but not divided by the group's standard deviation.",
                 "that is Dr. GRPO's choice (scale_rewards='none'); here divide by std + 1e-4")
        whole = (rewards - rewards.mean()) / (rewards.std() + 1e-4)
        if _is(got, whole, expected, 1e-4):
            fail("you normalised over the whole batch: each prompt's answers are compared with "
                 "their own group only.",
                 "rewards.view(-1, group_size), then the mean and std along dim=1")
        population = (centred.view(-1, G) / (grouped.std(1, unbiased=False,
                                                         keepdim=True) + 1e-4)).view(-1)
        if _is(got, population, expected, 1e-4):
            fail("you used the population std (divided by n): TRL uses the sample std "
                 "(n - 1).", "torch's .std() divides by n - 1 by default")
        expect_close(got, expected, f"advantages of {G}-answer groups",
                     "(r - group mean) / (group std + 1e-4)", atol=1e-4)
    passed("group-normalised advantages: each answer against the other answers to its own prompt; "
           "a group that agrees teaches nothing.")


def check_clipped_objective(fn) -> None:
    """``fn(logps, old_logps, advantages, epsilon) -> (B, Tc)``: PPO's clipped per-token loss, as
    GRPO uses it: ``-min(rho * A, clip(rho, 1 - epsilon, 1 + epsilon) * A)``, ``rho = exp(logps -
    old_logps)``, ``advantages`` (B,) shared by every token of an answer."""
    g = torch.Generator().manual_seed(1800)
    for B, Tc, eps in ((4, 5, 0.2), (6, 3, 0.1), (3, 7, 0.3)):
        logps = -torch.rand(B, Tc, generator=g, dtype=torch.float64) * 3
        # far enough to clip
        old = logps + 0.5 * torch.randn(B, Tc, generator=g, dtype=torch.float64)
        adv = torch.randn(B, generator=g, dtype=torch.float64)
        got = call(fn, logps.clone(), old.clone(), adv.clone(), eps)
        ratio, A = torch.exp(logps - old), adv[:, None]
        clipped = ratio.clamp(1 - eps, 1 + eps)
        expected = -torch.min(ratio * A, clipped * A)
        expect_tensor(got, (B, Tc), "the per-token loss",
                      "one value per token: advantages (B,) -> (B, 1) "
                      "broadcasts over the answer's tokens")
        if _is(got, -torch.max(ratio * A, clipped * A), expected, 1e-6):
            fail("you took the max of the two terms: the objective is the pessimistic one, the "
                 "min.")
        if _is(got, -clipped * A, expected, 1e-6):
            fail("you kept only the clipped term: where clipping would make the objective larger, "
                 "PPO keeps the unclipped one.", "-min(rho * A, clip(rho) * A)")
        wrong_ratio = logps / old
        if _is(got, -torch.min(wrong_ratio * A, wrong_ratio.clamp(1 - eps, 1 + eps) * A), expected,
               1e-6):
            fail("rho is a ratio of probabilities, not of log-probabilities.",
                 "rho = exp(logps - old_logps)")
        if _is(got, torch.min(ratio * A, clipped * A), expected, 1e-6):
            fail("that is the objective to maximise: the loss to minimise is its negative.")
        expect_close(got, expected, "the per-token loss",
                     "-min(rho * A, clip(rho, 1 - eps, 1 + eps) * A)", atol=1e-6)
    passed("PPO's clipped loss: a token's probability gains nothing past 1 + epsilon times the "
           "sampler's (for a positive advantage), so one batch cannot move the policy far.")
