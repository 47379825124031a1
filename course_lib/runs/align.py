"""Chapter 18's DPO and GRPO runs (``python -m course_lib dpo`` / ``grpo``) as kinds of run
(:mod:`course_lib.runs.kind`): the trainers are :mod:`course_lib.align`'s; here a run is built from
its base (the frozen reference), and continued bit for bit (DPO's pairs are in ``trained_on``,
GRPO's sampling generator in the checkpoint's random state). Both run in one process: their
pairs and rollouts are not shared out among torchrun's processes.
"""
from __future__ import annotations

import copy
from dataclasses import asdict, fields
from pathlib import Path

import torch

from .. import align as trainers
from ..align import (ALIGN_METHOD, ALIGN_TRAIN, METHODS, PAIR_TOKENS, ARITHMETIC_CHARS, DPOTrainer,
                     GRPOTrainer, task_splits)
from ..checkpoint import CheckpointError, build_model
from ..config import apply_overrides, apply_resume_overrides
from ..model import GPT, GPTConfig
from ..align.dpo import DPOConfig
from ..align.rewards import (arithmetic_items, get_reward, greedy_reward,
                             preference_pairs, sample_groups)
from ..checkpoint import save_checkpoint
from ..tokenizers import CharTokenizer, describe_chars, unwritable
from ..train import TrainConfig, Trainer
from ..utils import seed_everything
from .kind import (SHAPE_KEPT, Plan, RunKind, base_record, load_base_gpt, register_kind, resume,
                   resumed_config, same_base, start)


def align_configs(method: str, settings: dict | None, stored_method=None, path=None, ckpt=None):
    """``(TrainConfig, DPOConfig or GRPOConfig)`` from ``--set`` settings: a key of the method's
    config goes there, any other to the training settings (the model's shape may not be set).
    A resumed run (checkpoint ``path``, read as ``ckpt``, whose method settings are
    ``stored_method``) keeps its method settings and all but ``RESUMABLE_SETTINGS``: its pairs,
    split and rollouts were made with them."""
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of: {', '.join(METHODS)}")
    names = {f.name for f in fields(METHODS[method])}
    settings = settings or {}
    method_set = {k: v for k, v in settings.items() if k in names}
    train_set = {k: v for k, v in settings.items() if k not in names}
    if ckpt is None:
        train = apply_overrides(TrainConfig(**ALIGN_TRAIN[method]), train_set, SHAPE_KEPT)
        return train, apply_overrides(METHODS[method](**ALIGN_METHOD[method]), method_set)
    train = resumed_config(path, ckpt, train_set, SHAPE_KEPT)
    return train, apply_resume_overrides(stored_method, method_set, (), path,
                                         f"its {method.upper()} settings")


def load_arithmetic_base(base_checkpoint, device: str, max_answer: int = PAIR_TOKENS):
    """The base GPT (frozen: it is the reference), its checkpoint's tokenizer, path and SHA-256;
    refused unless its tokenizer can write the task's answers within its context."""
    base, tokenizer, path, sha = load_base_gpt(base_checkpoint, "DPO or GRPO", device)
    missing = ARITHMETIC_CHARS if tokenizer is None else unwritable(tokenizer, ARITHMETIC_CHARS)
    if missing:
        raise ValueError(f"{base_checkpoint}'s tokenizer cannot write the arithmetic task's "
                         f"characters {ARITHMETIC_CHARS!r} (it lacks {describe_chars(missing)}): "
                         "start from a model trained on "
                         "text with digits, '+' and '=' (e.g. fine-tuned on the task)")
    longest = len(tokenizer.encode("99+99=")) + max(PAIR_TOKENS, max_answer)
    if longest > base.config.block_size:
        raise ValueError(f"{base_checkpoint} has block_size {base.config.block_size}, shorter than "
                         f"a prompt and its longest answer ({longest} tokens): lower "
                         "max_completion_length or use a longer-context base")
    base.requires_grad_(False)
    return base, tokenizer, path, sha


def sample_pairs(base, tokenizer, items: dict, dpo: DPOConfig, seed: int, reward=None) -> dict:
    """DPO's pairs for each split, from the base's own answers (a seeded generator of their own):
    an answer ``reward`` scores above 0.5 (default:
    the right sum) is preferred to one it does not."""
    generator = torch.Generator().manual_seed(seed)
    pairs = {}
    for split in ("train", "val"):
        prompts = [item["prompt"] for item in
                   items[split][:dpo.pair_prompts if split == "train" else trainers.EVAL_ITEMS]]
        groups = sample_groups(base, tokenizer, prompts, dpo.pair_group_size, PAIR_TOKENS,
                               generator, reward or get_reward("exact"))
        pairs[split] = preference_pairs(groups)
        if not pairs[split]:
            raise ValueError(f"the base model's answers to every sampled {split} prompt were all "
                             "rewarded or all not, so there is no pair to prefer: DPO needs a "
                             "model that is right only sometimes")
    return pairs


def _planner(method: str):
    def plan(settings: dict, options: dict, path=None, ckpt=None) -> Plan:
        reward = options.get("reward")
        if reward is not None:
            get_reward(reward)  # an unknown reward refused before any work
        if ckpt is None:
            train, method_config = align_configs(method, settings)
            return Plan(train, {"method": method_config})
        saved = ckpt.get("trained_on") or {}
        if "method" not in saved or "base_sha256" not in saved:
            raise CheckpointError(f"{path} does not record its {method} settings and base model, "
                                  "so it cannot be resumed")
        if reward is not None and reward != saved["reward"]:
            raise ValueError(f"--reward {reward}: {path} was trained with the {saved['reward']!r} "
                             "reward; leave --reward out to continue it")
        train, method_config = align_configs(method, settings,
                                             METHODS[method](**saved["method"]), path, ckpt)
        return Plan(train, {"method": method_config})
    return plan


def _trainer(method: str, model, base, plan: Plan, items: dict, trained_on: dict,
             **options) -> Trainer:
    if method == "dpo":
        return DPOTrainer(model, base, plan.extra["method"], items, trained_on["pairs"], plan.train,
                          trained_on=trained_on, **options)
    return GRPOTrainer(model, base, plan.extra["method"], items, trained_on["reward"], plan.train,
                       trained_on=trained_on, **options)


def _builder(method: str):
    def build(plan: Plan, *, device, out_dir, progress, verbose, base_checkpoint=None,
              reward=None) -> Trainer:
        """A new run from ``base_checkpoint``: the policy starts as the base, which stays frozen."""
        reward = reward or "exact"
        base, tokenizer, path, sha = load_arithmetic_base(base_checkpoint, device,
                                               getattr(plan.extra["method"],
                                                       "max_completion_length", 0))
        # Seeded as every other run: dropout's masks (a base with dropout > 0) come from torch's
        # global generator, so two runs of the same command must start it alike; checkpoints store
        # its state.
        seed_everything(plan.train.seed)
        policy = copy.deepcopy(base).requires_grad_(True)
        items = task_splits(plan.train.seed)
        trained_on = {"command": method, "task": "arithmetic", "reward": reward,
                      **base_record(path, sha), "method": asdict(plan.extra["method"])}
        if method == "dpo":
            trained_on["pairs"] = sample_pairs(base, tokenizer, items, plan.extra["method"],
                                               plan.train.seed, get_reward(reward))
        return _trainer(method, policy, base, plan, items, trained_on, device=device,
                        out_dir=out_dir, tokenizer=tokenizer, progress=progress, verbose=verbose)
    return build


def _rebuilder(method: str):
    def rebuild(plan: Plan, path: Path, ckpt: dict, *, device, progress, verbose,
                base_checkpoint=None, reward=None) -> Trainer:
        """The run saved at ``path``; its base is the recorded file, or ``base_checkpoint`` when it
        holds the same bytes (a moved base)."""
        saved = ckpt["trained_on"]
        base_path = same_base(path, saved, base_checkpoint)
        base, tokenizer, base_path, _ = load_arithmetic_base(base_path, device,
                                                  getattr(plan.extra["method"],
                                                          "max_completion_length", 0))
        trained_on = {**saved, "base_checkpoint": str(base_path),
                      "method": asdict(plan.extra["method"])}
        return _trainer(method, build_model(ckpt, path), base, plan, task_splits(plan.train.seed),
                        trained_on, device=device, out_dir=path.parent, tokenizer=tokenizer,
                        progress=progress, verbose=verbose)
    return rebuild


def _describe(trainer: Trainer) -> str:
    on = trainer.trained_on
    return (f"{on['command']} from {on['base_checkpoint']} (reward {on['reward']}) on "
            f"{trainer.device}; {trainer.config.max_iters} iterations, checkpoints in "
            f"{trainer.out_dir}")


def _report(trainer: Trainer):
    items = arithmetic_items("test")
    yield (f"answered right (greedy) {greedy_reward(trainer.model, trainer.tokenizer, items):.1%} "
            f"of {len(items)} held-out sums; saved {trainer.checkpoint_path}")


def arithmetic_base(path: Path, block_size: int = 16, seed: int = 0, dropout: float = 0.0) -> Path:
    """A random GPT over the task's characters: it writes a number then END often enough for the
    format reward (right sums are too rare for the smallest runs to rely on)."""
    tokenizer = CharTokenizer("0123456789+=\n ")
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=block_size, n_layer=1,
                          n_head=2, n_embd=32, dropout=dropout))
    return save_checkpoint(path, model, tokenizer=tokenizer)


EXAMPLES = {"dpo": {"max_iters": 4, "eval_interval": 2, "batch_size": 4, "pair_prompts": 16},
            "grpo": {"max_iters": 4, "eval_interval": 2, "batch_size": 2, "group_size": 4}}

DPO, GRPO = (register_kind(RunKind(
    command=method, plan=_planner(method), build=_builder(method), rebuild=_rebuilder(method),
    describe=_describe, report=_report, one_process=True, options=("base_checkpoint", "reward"),
    example=lambda folder, method=method: (
        EXAMPLES[method], {"base_checkpoint": str(arithmetic_base(folder / "base.pt")),
                           "reward": "format"}),
    default_out=lambda options, method=method: f"runs/{method}")) for method in ("dpo", "grpo"))


def start_dpo_run(base_checkpoint: str | Path, settings: dict | None = None, *,
                  reward: str = "exact", device: str | None = None, out_dir=None,
                  progress: bool = True) -> Trainer:
    """A new DPO run from the GPT in ``base_checkpoint``: pairs of its own answers that ``reward``
    scores 1 and 0, the base as the reference; ``settings`` may hold ``beta``, ``loss_type``... as
    well as training settings."""
    return start(DPO, settings, base_checkpoint=base_checkpoint, reward=reward, device=device,
                 out_dir=out_dir, progress=progress)


def resume_dpo_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None,
                   device: str | None = None, progress: bool = True,
                   checkpoint: dict | None = None) -> Trainer:
    """The DPO run saved in ``path``, continued bit for bit."""
    return resume(DPO, path, settings, base_checkpoint=base_checkpoint, device=device,
                  progress=progress, checkpoint=checkpoint)


def start_grpo_run(base_checkpoint: str | Path, settings: dict | None = None, *,
                   reward: str = "exact", device: str | None = None, out_dir=None,
                   progress: bool = True) -> Trainer:
    """A new GRPO run from the GPT in ``base_checkpoint`` with ``reward`` ("exact", or the hackable
    "format"); ``settings`` may hold ``group_size``,
    ``beta``, ``loss_type``, ``scale_rewards``..."""
    return start(GRPO, settings, base_checkpoint=base_checkpoint, reward=reward, device=device,
                 out_dir=out_dir, progress=progress)


def resume_grpo_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None,
                    device: str | None = None, progress: bool = True,
                    checkpoint: dict | None = None) -> Trainer:
    """The GRPO run saved in ``path``, continued bit for
    bit (its sampling generator is in the checkpoint)."""
    return resume(GRPO, path, settings, base_checkpoint=base_checkpoint, device=device,
                  progress=progress, checkpoint=checkpoint)
