"""Expert iteration (rejection-sampling fine-tuning) and the SFT micro-batch step (chapter 18).

**Expert iteration** (Anthony et al. 2017; STaR, Zelikman et al. 2022; RFT, Yuan et al. 2023;
CS336's assignment 5 baseline): sample N answers to each of a set of training prompts from the
current model, keep those a verifier accepts, fine-tune on them (plain SFT, the prompt masked), and
repeat. It learns from the model's own *found* answers, as GRPO does, but with SFT's loss: the
control that separates "SFT has the answers" from "SFT's loss learns faster". On two-digit sums a
verified answer is the right sum, so a round's data are the right sums of the prompts the model
already gets right sometimes, each as often as it was found (easy prompts weigh more).

**The SFT micro-batch step** (CS336's ``sft_microbatch_train_step``): the masked negative
log-likelihood of a micro-batch, *summed* over its answer tokens and divided by a constant (not by
the token count, which would weigh a token of a short batch more), then divided by the number of
gradient-accumulation steps so that the accumulated gradient is that of the whole batch; then
``backward``.
"""
from __future__ import annotations

import math
import random

import torch

from .rewards import answer_text, exact_answer_reward, sample_groups


def sft_microbatch_step(logps: torch.Tensor, response_mask: torch.Tensor, grad_accum_steps: int,
                        normalize_constant: float = 1.0) -> tuple[torch.Tensor,
                                                                  dict[str, torch.Tensor]]:
    """One micro-batch of SFT: ``-(logps * mask).sum() / normalize_constant / grad_accum_steps``,
    back-propagated. ``logps`` (B, T): the policy's log-probability of each target token (with
    gradients); ``response_mask`` (B, T): 1 on the answer's tokens, 0 on the prompt and pads.
    Returns the loss that was back-propagated (detached) and ``{"nll": the masked NLL sum / the
    constant (before the division by the accumulation steps), "tokens": answer tokens}``."""
    if logps.shape != response_mask.shape:
        raise ValueError(f"logps {tuple(logps.shape)} and response_mask "
                         f"{tuple(response_mask.shape)} must have the same (B, T) shape")
    if not isinstance(grad_accum_steps, int) or grad_accum_steps < 1:
        raise ValueError(f"grad_accum_steps must be a whole number >= 1, got {grad_accum_steps!r}")
    if not normalize_constant > 0:
        raise ValueError(f"normalize_constant must be positive, got {normalize_constant!r}")
    mask = response_mask.to(logps.dtype)
    nll = -(logps * mask).sum() / normalize_constant
    loss = nll / grad_accum_steps
    loss.backward()
    return loss.detach(), {"nll": nll.detach(), "tokens": mask.sum().detach()}


def verified_samples(model, tokenizer, items: list[dict], n: int, generator: torch.Generator,
                     reward=exact_answer_reward, max_new_tokens: int = 6) -> list[dict]:
    """Rejection sampling: ``n`` answers to each item's prompt (temperature 1, from ``generator``),
    the ones ``reward`` pays (above 0.5) kept as SFT items ``{"prompt", "answer"}`` (the answer
    without END), one per accepted sample."""
    groups = sample_groups(model, tokenizer, [item["prompt"] for item in items], n, max_new_tokens,
                           generator, reward)
    return [{"prompt": g.prompt, "answer": answer_text(text)} for g in groups
            for text, r in zip(g.completions, g.rewards) if r > 0.5]


def expert_iteration(model, tokenizer, items: dict, rounds: int, prompts_per_round: int,
                     samples: int, settings: dict, seed: int = 0, device: str = "cpu",
                     reward=exact_answer_reward, epochs: float = 1.0, keep_going=None):
    """Up to ``rounds`` rounds of expert iteration from ``model`` (trained in place and returned,
    with one dict per round: prompts, accepted samples, distinct prompts solved, SFT steps, the
    last loss and validation accuracy).

    Each round draws ``prompts_per_round`` of ``items["train"]`` (a seeded choice), samples
    ``samples`` answers to each, and trains on the accepted ones for ``epochs`` passes, rounded up
    to whole steps: a few dozen sums trained on for many steps are learnt by heart. One SFT run
    (``settings``: a ``TrainConfig``'s; its ``max_iters`` the horizon of the learning-rate schedule
    and the most steps in all) continues from round to round with its optimiser state, as one
    fine-tuning on a growing stream of data: a fresh AdamW each round would take a full-size first
    step each time. A round that accepts nothing trains nothing. ``reward``: the verifier (default
    the exact sum). ``keep_going(history)``: asked before each round (e.g. a compute budget).
    """
    from . import SFTTrainer  # the trainers import this module's neighbours: imported when called
    from ..train import TrainConfig

    if min(rounds, prompts_per_round, samples) < 1 or not epochs > 0:
        raise ValueError("rounds, prompts_per_round and samples must each be at least 1, and "
                         "epochs positive")
    config = TrainConfig(**{**settings, "seed": seed})
    pick = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    history, trainer = [], None
    for r in range(rounds):
        if ((keep_going is not None and not keep_going(history))
            or (trainer and trainer.step >= config.max_iters)):
            break
        prompts = pick.sample(items["train"], min(prompts_per_round, len(items["train"])))
        kept = verified_samples(model, tokenizer, prompts, samples, generator, reward)
        entry = {"round": r, "prompts": len(prompts), "accepted": len(kept),
                 "solved": len({k["prompt"] for k in kept}), "steps": 0}
        if kept:
            if trainer is None:
                trainer = SFTTrainer(model.requires_grad_(True),
                                     {"train": kept, "val": items["val"]}, config, device=device,
                                     tokenizer=tokenizer, progress=False, verbose=False)
            trainer.items["train"] = kept
            before = trainer.step
            trainer.train(until=before + math.ceil(epochs * len(kept) / config.batch_size))
            model = trainer.model
            entry.update({"steps": trainer.step - before, "loss": trainer.history["loss"][-1]})
        history.append(entry)
    return model, history
