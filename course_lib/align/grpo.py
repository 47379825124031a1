"""Learning from rewards (chapter 18): GRPO, Group Relative Policy Optimization (Shao et al. 2024,
DeepSeekMath; DeepSeek-R1, 2025).

PPO needs a value network to say how good an answer is *compared with what the model usually
does*. GRPO asks the model G times instead: for each prompt it samples a group of G answers,
scores each with a reward computed by code, and uses the group as its own baseline::

    advantage_i = (r_i - mean(r_group)) / (std(r_group) + 1e-4)      (scale_rewards="group")

Every token of answer i gets advantage_i. The policy then follows PPO's clipped objective on the
probability ratio ``rho = pi(token) / pi_old(token)`` of each token against the policy that drew
the samples, ``-min(rho * A, clip(rho, 1 - eps_low, 1 + eps_high) * A)``, plus, optionally,
``beta`` times a per-token KL estimate to a frozen reference, Schulman's "k3"
``exp(ref - logp) - (ref - logp) - 1`` (never negative, unbiased for KL(pi || ref)).

How the per-token losses are averaged is a choice with consequences (``loss_type``, TRL's names):

- grpo: over each answer's tokens, then over answers (the GRPO paper; favours short right
  answers and long wrong ones);
- bnpo: over all tokens of the batch;
- dr_grpo: the sum over tokens / (answers * max_completion_length) (Dr. GRPO, Liu et al. 2025:
  no length bias);
- dapo: the sum over tokens / all answer tokens of the generation batch (DAPO, Yu et al. 2025;
  TRL's default).

Dr. GRPO also drops the division by the group's std (``scale_rewards="none"``): dividing by it
weighs questions the group nearly agrees on (too easy or too hard) as much as open ones.

Everything here equals TRL 1.16's ``GRPOTrainer`` on the same tensors (``tests/test_grpo.py``).
Shapes: N answers in all (prompts * G), B answers in a batch, Tc tokens of the longest answer.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..config import Rule, check_fields
from .dpo import MAX_BETA, MAX_GROUP_SIZE, completion_logprobs

GRPO_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALE_REWARDS = ("group", "batch", "none")


@dataclass
class GRPOConfig:
    """The settings of the GRPO objective (names and defaults as TRL's ``GRPOConfig``)."""
    group_size: int = 8  # G answers sampled per prompt (TRL: num_generations)
    # weight of the KL penalty to the reference; 0: no reference model (TRL's default)
    beta: float = 0.0
    epsilon: float = 0.2  # the ratio is clipped to [1 - epsilon, 1 + epsilon_high]
    epsilon_high: float | None = None  # None: epsilon (DAPO's "clip higher" uses 0.28)
    # how per-token losses are averaged: grpo, bnpo, dr_grpo, dapo (see the module)
    loss_type: str = "dapo"
    # divide advantages by the std of the group, of the batch, or not at all
    scale_rewards: str = "group"
    # "token" (PPO, GRPO) or "sequence" (GSPO: one ratio per answer)
    importance_sampling_level: str = "token"
    # multiply the KL term by the ratio (TRL's use_bias_correction_kl)
    kl_bias_correction: bool = True
    max_completion_length: int = 16  # longest answer sampled; dr_grpo divides by it
    temperature: float = 1.0  # sampling temperature; answers are scored at the same temperature

    def __post_init__(self):
        check_fields(self, GRPO_CONFIG_RULES)

    @property
    def clip_high(self) -> float:
        return self.epsilon if self.epsilon_high is None else self.epsilon_high


GRPO_CONFIG_RULES = {
    "group_size": Rule(int, 2, MAX_GROUP_SIZE),  # one answer has no group to be compared with
    "beta": Rule(float, 0, MAX_BETA),
    "epsilon": Rule(float, 0, 1, "(]"),
    "epsilon_high": Rule(float, 0, bounds="()"),
    "loss_type": Rule(str, choices=GRPO_LOSS_TYPES),
    "scale_rewards": Rule(str, choices=SCALE_REWARDS),
    "importance_sampling_level": Rule(str, choices=("token", "sequence")),
    "kl_bias_correction": Rule(bool),
    "max_completion_length": Rule(int, 1),
    "temperature": Rule(float, 0, bounds="()"),
}


def group_advantages(rewards: torch.Tensor, group_size: int, scale_rewards: str = "group",
                     eps: float = 1e-4) -> torch.Tensor:
    """Group-normalised advantages (N,) of rewards (N,), N = prompts * ``group_size``, each
    prompt's answers side by side.

    ``r_i - mean(group)``, divided by ``std + eps`` where std is the group's (``"group"``), the
    whole batch's (``"batch"``, PPO Lite), or not divided (``"none"``, Dr. GRPO). The std is the
    sample std (n - 1 in the denominator), as TRL's. A group whose answers all score the same
    gets advantage 0: it has nothing to teach.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(f"rewards must be a flat tensor of prompts * group_size values, got shape "
                         f"{tuple(rewards.shape)} with group_size {group_size}")
    if scale_rewards not in SCALE_REWARDS:
        raise ValueError(f"scale_rewards must be one of {', '.join(SCALE_REWARDS)}, got "
                         f"{scale_rewards!r}")
    grouped = rewards.view(-1, group_size)  # (prompts, G)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    if scale_rewards == "none":
        return centred
    if scale_rewards == "group":
        std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1) if group_size > 1 \
            else torch.zeros_like(rewards)
    else:
        std = rewards.std().expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
    return centred / (std + eps)


def kl_k3(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(pi || ref) from samples of pi (Schulman's k3), (B, Tc) -> (B, Tc):
    ``exp(ref - logp) - (ref - logp) - 1``, never negative, 0 where the two agree."""
    diff = ref_logps - logps
    return torch.exp(diff) - diff - 1


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the answer tokens (``mask`` 1); a per-answer (B, 1) ``x`` is averaged
    over answers. With no answer token at all (``mask`` all 0) it returns 0, not NaN: the sum, 0,
    is divided by 1 (some libraries return NaN there, 0 / 0; a logged 0 never poisons a running
    mean, but it can hide an empty batch: check ``mask.sum()`` when that matters)."""
    if x.size(1) == 1:
        return x.mean()
    return (x * mask).sum() / mask.sum().clamp(min=1)


def grpo_loss(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor,
              mask: torch.Tensor, config: GRPOConfig, ref_logps: torch.Tensor | None = None,
              num_items: float | torch.Tensor | None = None) -> tuple[torch.Tensor,
                                                                      dict[str, float]]:
    """The GRPO loss (a scalar to minimise) and what TRL logs about it.

    ``logps`` (B, Tc): the policy's per-token log-probabilities of the sampled answers (with
    gradients); ``old_logps`` (B, Tc): those of the policy that sampled them (no gradients; equal
    to ``logps.detach()`` on the first step after sampling); ``advantages`` (B,); ``mask`` (B, Tc),
    1 on answer tokens; ``ref_logps`` (B, Tc): the reference's, needed when ``config.beta > 0``;
    ``num_items``: answer tokens in the whole generation batch (``dapo``; default ``mask.sum()``).
    The returned dict holds ``kl`` (when beta > 0) and the shares of clipped tokens.
    """
    mask = mask.to(logps.dtype)
    advantages = advantages.unsqueeze(1)  # (B, 1): every token of an answer shares its advantage
    log_ratio = logps - old_logps
    # GSPO: the answer's mean log-ratio, one per answer
    if config.importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1)).unsqueeze(-1)  # (B, 1)
    ratio = torch.exp(log_ratio)
    clipped = torch.clamp(ratio, 1 - config.epsilon, 1 + config.clip_high)
    # (B, Tc) or (B, 1): pessimistic
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    stats = {}
    if config.beta != 0.0:
        if ref_logps is None:
            raise ValueError(f"beta={config.beta} penalises the KL to a reference: pass ref_logps "
                             "(the reference model's log-probabilities of the answers), or set "
                             "beta=0")
        kl = kl_k3(logps, ref_logps)
        if config.kl_bias_correction:  # samples came from pi_old, not pi: reweight them
            kl = kl * ratio
        per_token = per_token + config.beta * kl
        stats["kl"] = masked_mean(kl.detach(), mask).item()
    loss = _average(per_token, mask, config, num_items)
    low = (ratio < 1 - config.epsilon) & (advantages < 0)
    high = (ratio > 1 + config.clip_high) & (advantages > 0)
    stats.update({"clip_ratio/low_mean": masked_mean(low.float(), mask).item(),
                  "clip_ratio/high_mean": masked_mean(high.float(), mask).item(),
                  "clip_ratio/region_mean": masked_mean((low | high).float(), mask).item()})
    return loss, stats


def _average(per_token: torch.Tensor, mask: torch.Tensor, config: GRPOConfig,
             num_items) -> torch.Tensor:
    """The per-token losses (B, Tc) averaged as ``config.loss_type`` says (the table above)."""
    masked = per_token * mask  # (B, Tc); a (B, 1) per-answer loss is broadcast onto the tokens
    if config.loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1)).mean()
    if config.loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1)
    if config.loss_type == "dr_grpo":
        return masked.sum() / (per_token.size(0) * config.max_completion_length)
    total = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=masked.dtype)
    return masked.sum() / total.clamp(min=1)


def grpo_batch_loss(policy, prompts: list[list[int]], completions: list[list[int]],
                    advantages: torch.Tensor, config: GRPOConfig, pad_id: int,
                    old_logps: torch.Tensor | None = None,
                    reference=None) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss of sampled ``completions`` (token lists) to ``prompts`` under ``policy``.

    ``old_logps`` (B, Tc): the sampling policy's log-probabilities, when the policy has already
    moved since it sampled (several steps per batch); None: this is the first step, the ratio is 1.
    ``reference``: the frozen reference model, needed when ``config.beta > 0``.
    """
    logps, mask = completion_logprobs(policy, prompts, completions, pad_id, config.temperature)
    old = logps.detach() if old_logps is None else old_logps
    ref_logps = None
    if config.beta != 0.0:
        if reference is None:
            raise ValueError(f"beta={config.beta} needs the reference model: pass reference=, or "
                             "set beta=0")
        with torch.no_grad():
            ref_logps, _ = completion_logprobs(reference, prompts, completions, pad_id,
                                               config.temperature)
    loss, stats = grpo_loss(logps, old, advantages, mask, config, ref_logps)
    return loss, {"loss": loss.item(), **stats}
