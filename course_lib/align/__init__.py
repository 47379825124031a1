"""DPO and GRPO runs (chapter 18): the :class:`~course_lib.train.Trainer`, with a preference loss
or a reward loss in place of next-token prediction, so that a run keeps everything a run has:
atomic checkpoints, Ctrl-C between two steps, a bit-for-bit resume, a progress bar.

Both start from a GPT checkpoint (the *base*, e.g. a model fine-tuned on the task) and learn
two-digit addition (:mod:`course_lib.align.rewards`):

- **DPO** samples G answers per prompt from the base once, at the start, keeps a right and a wrong
  answer to the same prompt (right: rewarded, by the exact reward unless told otherwise) as a
  (chosen, rejected) pair (:func:`course_lib.align.rewards.preference_pairs`),
  and trains on those pairs against the frozen base as its reference. The pairs are stored in the
  checkpoint, so a resumed run trains on the same ones.
- **SFT**, the control (:class:`SFTTrainer`): next-token training on the *right* answers to the
  training prompts, the prompt masked, as chapter 15 fine-tunes; it also makes chapter 18's
  starting model (:func:`sft_start`: the chat model, shown a few hundred sums in this format).
- **GRPO** samples a group of G answers per prompt from the *current* policy at every step, from the
  run's batch generator (saved in every checkpoint: a resumed run samples the same answers), rewards
  them by code and takes one step on the clipped objective (:mod:`course_lib.align.grpo`). The KL to
  the base is always measured (and penalised when ``beta > 0``).

At each evaluation both print the share of held-out prompts answered right (greedy decoding). The
runs are built by :mod:`course_lib.runs.align` (``start_dpo_run``, ``resume_grpo_run``...).
"""
from __future__ import annotations

import copy

import torch

from .._signals import pause_point
from ..config import apply_overrides
from .grpo import GRPOConfig, grpo_loss, kl_k3, masked_mean
from .dpo import (DPOConfig, completion_logprobs, dpo_batch_loss, model_logits, pack_completions,
                  pack_pairs)
from .sampling import per_token_entropy
from .rewards import (END, arithmetic_items, flatten, get_reward, greedy_reward, sample_groups,
                      score_groups)
from ..speed import autocast
from ..finetune import encode_examples
from ..lora_gpt import SHAPE_KEPT
from ..train import TrainConfig, Trainer

METHODS = {"dpo": DPOConfig, "grpo": GRPOConfig}
ARITHMETIC_CHARS = "0123456789+=" + END  # what the base model's tokenizer must be able to write
# Starting points for a small character GPT on two-digit addition (chapter 18's benchmark tunes
# them): a small learning rate, as preference tuning moves a trained model only a little.
ALIGN_TRAIN = {
    "dpo": dict(max_iters=200, batch_size=16, learning_rate=5e-5, min_lr=5e-6, warmup_iters=10,
                weight_decay=0.0, grad_clip=1.0, eval_interval=50, eval_iters=1),
    "grpo": dict(max_iters=100, batch_size=8, learning_rate=2e-5, min_lr=2e-6, warmup_iters=5,
                 weight_decay=0.0, grad_clip=1.0, eval_interval=25, eval_iters=1),
}
# an answer: up to 3 digits and END
ALIGN_METHOD = {"dpo": {}, "grpo": {"max_completion_length": 6}}
# training items held back to validate on (chapter 16's test items are never trained on)
N_VAL = 200
EVAL_ITEMS = 100  # prompts of each split answered greedily at every evaluation
PAIR_TOKENS = 6  # the longest answer sampled for DPO's pairs (3 digits and END, and room to spare)


def task_splits(seed: int = 0) -> dict[str, list[dict]]:
    """The arithmetic training items, split into "train" and "val" (the last ``N_VAL``)."""
    items = arithmetic_items("train", seed)
    return {"train": items[:-N_VAL], "val": items[-N_VAL:]}


class _AlignTrainer(Trainer):
    """What DPO and GRPO runs share: greedy accuracy at each evaluation, per-step metrics kept in
    ``history`` and shown on the progress bar."""
    METRICS: tuple[str, ...] = ()

    def __init__(self, model, reference, method_config, items: dict, config: TrainConfig,
                 **options):
        self.reference, self.method, self.items, self.last = reference, method_config, items, {}
        super().__init__(model, config=config, batch_fn=self.draw, **options)
        # pads follow everything scored: any id would do
        self.pad_id = self.tokenizer.encode(END)[0]
        for key in self.METRICS + ("train_accuracy", "val_accuracy"):
            self.history[key] = []

    def train_step(self) -> float:
        loss = super().train_step()
        for key in self.METRICS:
            self.history[key].append(self.last[key])
        return loss

    def postfix(self) -> dict[str, str]:
        shown = {key.split("/")[-1]: f"{self.last[key]:.3f}" for key in self.METRICS
                 if key in self.last}
        return {**shown, **super().postfix()}

    def evaluate(self) -> dict[str, float]:
        accuracy = {split: greedy_reward(self.model, self.tokenizer, self.items[split][:EVAL_ITEMS])
                    for split in ("train", "val")}
        self.history["eval_step"].append(self.step)
        for split, value in accuracy.items():
            self.history[f"{split}_accuracy"].append(value)
        return accuracy

    def _evaluate(self, bar) -> None:
        pause_point("evaluate")
        accuracy = self.evaluate()
        if self.verbose:
            bar.write(f"step {self.step:5d}: answered right (greedy) train "
                      f"{accuracy['train']:.3f}, val {accuracy['val']:.3f}")


class DPOTrainer(_AlignTrainer):
    """Trains a GPT with the DPO loss on fixed preference pairs, ``pairs[split]`` lists of
    (prompt_ids, chosen_ids, rejected_ids); ``batch_size`` pairs a step."""
    METRICS = ("rewards/accuracies", "rewards/margins")

    def __init__(self, model, reference, dpo: DPOConfig, items: dict, pairs: dict,
                 config: TrainConfig, **options):
        self.pairs = pairs
        super().__init__(model, reference, dpo, items, config, **options)

    def draw(self, split: str, generator: torch.Generator):
        picks = torch.randint(len(self.pairs[split]), (self.config.batch_size,),
                              generator=generator).tolist()
        # (2B, T) each
        return pack_pairs([self.pairs[split][i] for i in picks], self.pad_id, self.device)

    def forward_backward(self, batches) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for input_ids, completion_mask in batches:
            with autocast(self.device, self.config.dtype):
                loss, self.last = dpo_batch_loss(self.train_model, self.reference, input_ids,
                                                 completion_mask, self.method)
            self.scaler.scale(loss / len(batches)).backward()
            total += loss.item() / len(batches)
        return total


class GRPOTrainer(_AlignTrainer):
    """Trains a GPT with GRPO: each step samples ``batch_size`` prompts' groups of G answers from
    the current policy (with the run's batch generator), rewards them with ``reward`` and takes
    one step (the ratio to the sampling policy is 1 at that step: TRL's default, num_iterations=1).
    Each step also logs the policy's mean per-token entropy on the sampled answers (nats, at the
    sampling temperature): RL that sharpens the policy shows it falling."""
    METRICS = ("reward", "kl", "entropy")

    def __init__(self, model, reference, grpo: GRPOConfig, items: dict, reward: str,
                 config: TrainConfig, **options):
        self.reward_name, self.reward = reward, get_reward(reward)
        super().__init__(model, reference, grpo, items, config, **options)

    def draw(self, split: str, generator: torch.Generator):
        """A rollout: ``(input_ids (N, T), (prompts, completions, rewards (N,), advantages
        (N,)))``."""
        picks = torch.randint(len(self.items[split]), (self.config.batch_size,),
                              generator=generator).tolist()
        groups = sample_groups(self.model, self.tokenizer,
                               [self.items[split][i]["prompt"] for i in picks],
                               self.method.group_size, self.method.max_completion_length, generator,
                               self.reward, self.method.temperature)
        rewards, advantages = score_groups(groups, self.method.scale_rewards)
        prompts, completions = flatten(groups)
        input_ids, _ = pack_completions(prompts, completions, self.pad_id)
        return input_ids, (prompts, completions, rewards, advantages.to(self.device))

    def forward_backward(self, batches) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for _, (prompts, completions, rewards, advantages) in batches:
            with autocast(self.device, self.config.dtype):
                logps, mask = completion_logprobs(self.train_model, prompts, completions,
                                                  self.pad_id, self.method.temperature)
                with torch.no_grad():
                    ref_logps, _ = completion_logprobs(self.reference, prompts, completions,
                                                       self.pad_id, self.method.temperature)
                loss, _ = grpo_loss(logps, logps.detach(), advantages, mask, self.method, ref_logps)
            self.scaler.scale(loss / len(batches)).backward()
            total += loss.item() / len(batches)
            kl = masked_mean(kl_k3(logps.detach(), ref_logps), mask.to(logps.dtype)).item()
            self.last = {"reward": rewards.mean().item(), "kl": kl,
                         "entropy": self.entropy(prompts, completions)}
        return total

    @torch.no_grad()
    def entropy(self, prompts, completions) -> float:
        """Mean entropy of the policy's next-token distribution over the answers' tokens: a pass
        in eval mode (no dropout, so no random number is drawn and training is unchanged)."""
        was_training = self.model.training
        self.model.eval()
        input_ids, completion_mask = pack_completions(prompts, completions, self.pad_id,
                                                      self.device)
        # (N, T-1, V)
        logits = model_logits(self.model, input_ids)[:, :-1] / self.method.temperature
        self.model.train(was_training)
        return masked_mean(per_token_entropy(logits), completion_mask[:, 1:].float()).item()


class SFTTrainer(_AlignTrainer):
    """The control: supervised fine-tuning on the right answers (``"a+b="`` then the sum and END,
    the prompt's tokens masked), ``batch_size`` training sums a step; the loss is the Trainer's."""

    def __init__(self, model, items: dict, config: TrainConfig, **options):
        super().__init__(model, None, None, items, config, **options)

    def draw(self, split: str, generator: torch.Generator):
        picks = torch.randint(len(self.items[split]), (self.config.batch_size,),
                              generator=generator).tolist()
        pairs = [(self.items[split][i]["prompt"][:-1], self.items[split][i]["answer"])
                 for i in picks]
        # x, y (B, T): "a+b" SEP "=" answer END
        return encode_examples(self.tokenizer, pairs, device=self.device)


# Chapter 18's starting model: the shipped chat model never saw a bare "a+b=" (it calls its
# calculator inside a chat), so a short SFT in this format makes a model that writes sums and is
# often wrong.
START_SFT = dict(max_iters=300, batch_size=32, learning_rate=1e-3, min_lr=1e-4, warmup_iters=10,
                 weight_decay=0.0, grad_clip=1.0, eval_interval=150, eval_iters=1, seed=0)


def sft_start(model, tokenizer, settings: dict | None = None, device: str = "cpu",
              progress: bool = False):
    """``model`` (e.g. :func:`course_lib.chat.engine.load_chat_model`'s) after ``START_SFT`` (or
    ``settings`` over it) steps of SFT on the training sums: a new model, ``model`` is untouched.
    Reproducible whatever came before: dropout's masks (a model with dropout > 0) come from torch's
    global generator, seeded here with the config's seed inside a fork, so the caller's generator is
    left as it was (a chapter's later cells draw the same numbers with or without this call)."""
    config = apply_overrides(TrainConfig(**START_SFT), settings or {}, SHAPE_KEPT)
    kind = torch.device(device).type
    with torch.random.fork_rng(devices=[] if kind == "cpu" else None,
                               device_type="cuda" if kind == "cpu" else kind):
        torch.manual_seed(config.seed)
        trainer = SFTTrainer(copy.deepcopy(model).requires_grad_(True), task_splits(config.seed),
                             config, device=device, tokenizer=tokenizer, progress=progress,
                             verbose=False)
        trainer.train()
    return trainer.model
