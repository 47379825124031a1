"""Learning from preferences (chapter 18): the log-probability of an answer, and DPO.

**The log-probability of an answer.** A language model scores a whole answer ``y`` to a prompt
``x`` as the sum of its next-token log-probabilities over the answer's tokens,
``log pi(y | x) = sum_t log pi(y_t | x, y_<t)``. The prompt's tokens are not scored (the model
was not asked to write the prompt) and neither are pads. A batch is laid out as TRL's
``DataCollatorForPreference`` lays it out: each row is ``prompt + answer``, padded on the right,
with a ``completion_mask`` that is 1 on the answer's tokens. A causal model never looks right, so
right padding changes nothing that is scored and no attention mask is needed.

**DPO** (Rafailov et al. 2023, "Direct Preference Optimization"). The policy that maximises
``E[r(x, y)] - beta * KL(pi || pi_ref)`` is ``pi*(y|x) = pi_ref(y|x) exp(r(x, y) / beta) / Z(x)``,
so a reward can be read off any policy: ``r(x, y) = beta * log(pi(y|x) / pi_ref(y|x)) + beta log
Z(x)``. Put into the Bradley-Terry model of a preference ``y_w > y_l``, ``Z(x)`` cancels and the
maximum-likelihood loss of the preference data is a loss on the policy itself::

    margin = (log pi(y_w|x) - log pi_ref(y_w|x)) - (log pi(y_l|x) - log pi_ref(y_l|x))
    loss   = -log sigmoid(beta * margin) = softplus(-beta * margin)

``beta * (log pi - log pi_ref)`` is the *implicit reward* of an answer; the share of pairs whose
chosen answer has the larger implicit reward is the reward accuracy. The losses here equal TRL's
``DPOTrainer`` on the same log-probabilities (``tests/test_preference.py``).

Shapes: B pairs (a packed DPO batch has 2B rows: the B chosen, then the B rejected), T tokens per
row (prompt + answer + pads), V vocabulary size.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..config import Rule, check_fields

# --- the log-probability of an answer -----------------------------------------------------------


def pack_completions(prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                     device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Rows ``prompt + completion`` padded on the right with ``pad_id``.

    Returns ``input_ids`` (B, T) and ``completion_mask`` (B, T), 1 on each completion token and 0
    on the prompt and the pads; T is the longest row. An empty completion is allowed (it scores 0).
    """
    if len(prompts) != len(completions):
        raise ValueError(f"give one completion per prompt: {len(prompts)} prompts, "
                         f"{len(completions)} completions")
    if not prompts:
        raise ValueError("no prompts: give at least one (prompt, completion) pair")
    if any(len(p) == 0 for p in prompts):
        raise ValueError("every prompt needs at least one token: the first answer token is "
                         "predicted from it")
    T = max(len(p) + len(c) for p, c in zip(prompts, completions))
    input_ids = torch.full((len(prompts), T), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(prompts), T), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        input_ids[i, :len(p) + len(c)] = torch.tensor(list(p) + list(c), dtype=torch.long)
        completion_mask[i, len(p):len(p) + len(c)] = 1
    return input_ids.to(device), completion_mask.to(device)


def model_logits(model, input_ids: torch.Tensor) -> torch.Tensor:
    """The logits (B, T, V) of ``model`` on ``input_ids`` (B, T): course_lib's models return
    ``(logits, loss)``, a plain function may return the logits alone."""
    out = model(input_ids)
    return out[0] if isinstance(out, tuple) else out


def token_logprobs(model, input_ids: torch.Tensor, completion_mask: torch.Tensor,
                   temperature: float = 1.0) -> torch.Tensor:
    """Log-probability of each next token, on the completion only.

    ``input_ids``, ``completion_mask``: (B, T) as :func:`pack_completions` makes them. Returns
    (B, T - 1): entry ``[b, t]`` is ``log p(input_ids[b, t+1] | input_ids[b, :t+1])`` where token
    ``t+1`` is a completion token, and 0 elsewhere (TRL's layout: ``labels[:, 1:]``). The logits
    are divided by ``temperature`` first (GRPO scores samples at the temperature they were drawn
    at) and computed in at least float32.
    """
    if input_ids.shape != completion_mask.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)} and completion_mask "
                         f"{tuple(completion_mask.shape)} must have the same (B, T) shape")
    if not temperature > 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    logits = model_logits(model, input_ids)[:, :-1]  # (B, T-1, V): position t predicts token t+1
    if logits.dtype not in (torch.float32, torch.float64):
        logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    targets = input_ids[:, 1:]  # (B, T-1)
    picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)  # (B, T-1)
    # log_softmax at the target, without a (B, T, V) copy
    logps = picked - torch.logsumexp(logits, dim=-1)
    return logps * completion_mask[:, 1:].to(logps.dtype)


def sequence_logprobs(model, input_ids: torch.Tensor,
                      completion_mask: torch.Tensor) -> torch.Tensor:
    """``log pi(completion | prompt)`` of each row: (B,), the sum of :func:`token_logprobs`."""
    return token_logprobs(model, input_ids, completion_mask).sum(dim=1)


def completion_logprobs(model, prompts: list[list[int]], completions: list[list[int]], pad_id: int,
                        temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities aligned on the completions, as GRPO uses them.

    Returns ``logps`` (B, Tc) and ``mask`` (B, Tc), Tc the longest completion: ``logps[b, j]`` is
    the log-probability of completion b's j-th token (0 past its end, where ``mask`` is 0). Rows
    may have prompts of different lengths (the rows are padded on the right, not the left).
    """
    device = next(model.parameters()).device if isinstance(model, torch.nn.Module) else "cpu"
    input_ids, completion_mask = pack_completions(prompts, completions, pad_id, device)
    per_token = token_logprobs(model, input_ids, completion_mask, temperature)  # (B, T-1)
    Tc = max(1, max(len(c) for c in completions))
    # where each completion's scores begin
    starts = torch.tensor([len(p) - 1 for p in prompts], device=device)
    # (B, Tc)
    index = (starts[:, None] + torch.arange(Tc, device=device)).clamp(max=per_token.size(1) - 1)
    mask = (torch.arange(Tc, device=device)[None, :] < torch.tensor([len(c) for c in completions],
                                                                    device=device)[:, None]).long()
    return per_token.gather(1, index) * mask, mask


# --- DPO ----------------------------------------------------------------------------------------

DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust")


@dataclass
class DPOConfig:
    """The settings of the DPO loss (names and defaults as TRL's ``DPOConfig``)."""
    # how far from the reference the policy may move: the KL penalty's inverse weight
    beta: float = 0.1
    # "sigmoid" (DPO), "ipo" (Azar et al. 2023), "hinge" (SLiC), "robust" (rDPO)
    loss_type: str = "sigmoid"
    label_smoothing: float = 0.0  # "robust" only: the assumed share of flipped preference labels
    # A DPO run's own pairs (course_lib.align): answers sampled from the base model, G per prompt
    pair_prompts: int = 512  # training prompts whose answers make the pairs
    pair_group_size: int = 8  # answers sampled per prompt

    def __post_init__(self):
        # label_smoothing < 0.5: at 0.5 a preference carries no signal
        check_fields(self, DPO_CONFIG_RULES)


# The most answers sampled to one prompt: one sampling batch holds a whole group, and
# course_lib.align.rewards.sample_groups batches at most this many rows (refused at config time, not
# at the first step, for GRPO's group_size and DPO's pair_group_size alike).
MAX_GROUP_SIZE = 512

# The largest beta accepted (DPO's, and GRPO's KL weight): published runs use 0.01 to 0.5, and
# beta=1e300 made the loss NaN at the first step, which the Trainer blamed on the learning rate.
MAX_BETA = 100.0

DPO_CONFIG_RULES = {
    # beyond, the loss and its gradient overflow (review 2026-11-28 A1)
    "beta": Rule(float, 0, MAX_BETA, "(]"),
    "loss_type": Rule(str, choices=DPO_LOSS_TYPES),
    "label_smoothing": Rule(float, 0, 0.5, "[)"),
    "pair_prompts": Rule(int, 1),
    "pair_group_size": Rule(int, 2, MAX_GROUP_SIZE),
}


def dpo_loss(policy_chosen: torch.Tensor, policy_rejected: torch.Tensor, ref_chosen: torch.Tensor,
             ref_rejected: torch.Tensor, beta: float = 0.1, loss_type: str = "sigmoid",
             label_smoothing: float = 0.0, chosen_lengths: torch.Tensor | None = None,
             rejected_lengths: torch.Tensor | None = None) -> torch.Tensor:
    """The per-pair DPO loss (B,) from sequence log-probabilities, each (B,).

    ``"sigmoid"``: ``softplus(-beta * margin)``, DPO's loss; ``"hinge"``: ``relu(1 - beta *
    margin)``; ``"robust"``: the unbiased loss when a share ``label_smoothing`` of labels is
    flipped; ``"ipo"``: ``(margin' - 1 / (2 beta))**2`` where ``margin'`` uses log-ratios divided by
    each answer's token count (``chosen_lengths``, ``rejected_lengths``), as TRL does.
    """
    # checks the settings
    DPOConfig(beta=float(beta), loss_type=loss_type, label_smoothing=float(label_smoothing))
    chosen_logratios = policy_chosen - ref_chosen  # (B,)
    rejected_logratios = policy_rejected - ref_rejected
    margin = chosen_logratios - rejected_logratios
    if loss_type == "sigmoid":
        return F.softplus(-beta * margin)  # = -log sigmoid(beta * margin), stable for any margin
    if loss_type == "hinge":
        return torch.relu(1 - beta * margin)
    if loss_type == "robust":
        eps = label_smoothing
        return (-(1 - eps) * F.logsigmoid(beta * margin) + eps * F.logsigmoid(-beta * margin)) / (
            1 - 2 * eps
        )
    if chosen_lengths is None or rejected_lengths is None:
        raise ValueError("the ipo loss divides each log-ratio by its answer's token count: pass "
                         "chosen_lengths and rejected_lengths (completion_mask.sum(1) of each "
                         "half)")
    per_token_margin = (chosen_logratios / chosen_lengths.clamp(min=1)
                        - rejected_logratios / rejected_lengths.clamp(min=1))
    return (per_token_margin - 1 / (2 * beta)) ** 2


def implicit_rewards(policy_logps: torch.Tensor, ref_logps: torch.Tensor,
                     beta: float) -> torch.Tensor:
    """DPO's implicit reward of each answer, ``beta * (log pi - log pi_ref)``: (B,) -> (B,)."""
    return beta * (policy_logps - ref_logps)


def dpo_metrics(policy_chosen, policy_rejected, ref_chosen, ref_rejected,
                beta: float) -> dict[str, float]:
    """What TRL logs about a DPO batch (its ``rewards/*`` and ``logps/*``), as floats: the mean
    implicit rewards of the chosen and rejected answers, the reward accuracy (share of pairs whose
    chosen answer wins) and the mean reward margin."""
    with torch.no_grad():
        chosen = implicit_rewards(policy_chosen, ref_chosen, beta)
        rejected = implicit_rewards(policy_rejected, ref_rejected, beta)
        return {"rewards/chosen": chosen.mean().item(), "rewards/rejected": rejected.mean().item(),
                "rewards/accuracies": (chosen > rejected).float().mean().item(),
                "rewards/margins": (chosen - rejected).mean().item(),
                "logps/chosen": policy_chosen.mean().item(),
                "logps/rejected": policy_rejected.mean().item()}


def pack_pairs(pairs: list[tuple[list[int], list[int], list[int]]], pad_id: int,
               device="cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """``(prompt, chosen, rejected)`` token lists -> ``input_ids``, ``completion_mask`` (2B, T): the
    B chosen rows, then the B rejected rows (one forward pass scores both; TRL's layout)."""
    if not pairs:
        raise ValueError("no preference pairs: give at least one (prompt, chosen, rejected)")
    prompts = [p for p, _, _ in pairs] * 2
    completions = [c for _, c, _ in pairs] + [r for _, _, r in pairs]
    return pack_completions(prompts, completions, pad_id, device)


def dpo_batch_loss(policy, reference, input_ids: torch.Tensor, completion_mask: torch.Tensor,
                   config: DPOConfig = DPOConfig()) -> tuple[torch.Tensor, dict[str, float]]:
    """The mean DPO loss of a packed batch (:func:`pack_pairs`, 2B rows) and its metrics.

    The policy's log-probabilities carry gradients; the frozen ``reference`` is scored without.
    """
    logps = sequence_logprobs(policy, input_ids, completion_mask)  # (2B,)
    with torch.no_grad():
        ref_logps = sequence_logprobs(reference, input_ids, completion_mask)
    chosen, rejected = logps.chunk(2)
    ref_chosen, ref_rejected = ref_logps.chunk(2)
    chosen_len, rejected_len = completion_mask.sum(dim=1).chunk(2)
    losses = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, config.beta, config.loss_type,
                      config.label_smoothing, chosen_len, rejected_len)
    metrics = dpo_metrics(chosen, rejected, ref_chosen, ref_rejected, config.beta)
    return losses.mean(), {"loss": losses.mean().item(), **metrics}
