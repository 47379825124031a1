"""Training the attention-only model on the repeat task, with the measurements that show the
phase change: the loss on the predictable second copy, the loss elsewhere, and the in-context
learning score of Olsson et al. (2022), recorded every ``probe_every`` steps on fixed rows.

A run is an ordinary :class:`course_lib.train.Trainer` (model, ``batch_fn``, ``TrainConfig``),
so it saves and resumes like every other; :func:`train_with_probes` advances it in chunks
with ``trainer.train(until=...)`` and measures between chunks, without touching its random
streams (the probe rows come from a generator of their own).

Shapes: B batch, T time.
"""
from __future__ import annotations

import math

import torch

from ..train import Trainer, TrainConfig
from ..utils import seed_everything
from .model import AttnOnlyConfig, AttnOnlyTransformer, token_losses
from .scores import all_scores, attention_patterns
from .task import RepeatTask, batch_fn, repeat_mask, repeat_rows

# The settings of chapter 21's runs. Measured on 2 CPU cores (benchmarks/induction_phase.py): with
# the repeat length drawn per row the repeat loss stays at chance for a few hundred steps, then
# drops within about a hundred; the fixed-offset control drops earlier.
LEARNING_RATE = 3e-3
BATCH_SIZE = 64
ICL_WINDOW = 7  # tokens at each end of a row compared by the in-context learning score


def model_config_for(task: RepeatTask, **changes) -> AttnOnlyConfig:
    """The chapter's model (2 layers, 4 heads, C = 64, LayerNorms) sized for ``task``."""
    return AttnOnlyConfig(**{"vocab_size": task.vocab_size, "block_size": task.seq_len, **changes})


def train_config(max_iters: int, seed: int, **changes) -> TrainConfig:
    """AdamW at a constant 3e-3 after 20 warm-up steps, no weight decay, batches of 64 rows; the
    Trainer's own evaluation only at the start and the end (the probes measure in between)."""
    settings = dict(max_iters=max_iters, batch_size=BATCH_SIZE, learning_rate=LEARNING_RATE,
                    min_lr=LEARNING_RATE, warmup_iters=20, schedule="constant", weight_decay=0.0,
                    eval_interval=max_iters, eval_iters=2, checkpoint_interval=0, seed=seed)
    return TrainConfig(**{**settings, **changes})


def induction_trainer(task: RepeatTask, config: TrainConfig,
                      model_config: AttnOnlyConfig | None = None, device=None, out_dir=None,
                      progress: bool = False, verbose: bool = False) -> Trainer:
    """A Trainer of a freshly built model on ``task``, the model seeded with ``config.seed``; its
    checkpoints record the task (``trained_on``), so that a resume rebuilds the same batches."""
    model_config = model_config or model_config_for(task)
    if model_config.block_size < task.seq_len or model_config.vocab_size < task.vocab_size:
        raise ValueError(f"the model (block_size={model_config.block_size}, "
                         f"vocab_size={model_config.vocab_size}) cannot read the task's rows "
                         f"(seq_len={task.seq_len}, vocab_size={task.vocab_size}): build it with "
                         "model_config_for(task)")
    seed_everything(config.seed)  # right before the model is built: its initial weights
    model = AttnOnlyTransformer(model_config)
    return Trainer(model, config=config, batch_fn=batch_fn(task, config.batch_size, device),
                   device=device, out_dir=out_dir, progress=progress, verbose=verbose,
                   trained_on={"command": "induction", "task": task.to_dict()})


def probe_rows(task: RepeatTask, n_rows: int = 256,
               seed: int = 2021) -> tuple[torch.Tensor, torch.Tensor]:
    """Fixed rows to measure on, ``(rows (B, T), lengths (B,))``, from a generator of their own."""
    return repeat_rows(task, n_rows, torch.Generator().manual_seed(seed))


def measure(model: torch.nn.Module, task: RepeatTask, rows: torch.Tensor,
            lengths: torch.Tensor) -> dict[str, float]:
    """The loss (nats) on the predictable second copy (``repeat``), on every other predicted token
    (``other``), and the in-context learning score: the mean loss of the last ``ICL_WINDOW`` tokens
    of a row minus that of its tokens 1..ICL_WINDOW (Olsson et al.'s late-minus-early token loss;
    negative when the context helps). Every row's last 7 tokens lie in the predictable part of its
    second copy (L >= 8), its first ones in the unpredictable start: on these rows the in-context
    learning score is a function of the same losses as ``repeat`` and ``other``, no separate
    evidence (:func:`best_induction_score` is one read from the attention instead)."""
    # (B, T), column 0 NaN
    losses = token_losses(model, rows.to(next(model.parameters()).device)).cpu()
    mask = repeat_mask(lengths, task.seq_len)
    other = ~mask
    other[:, 0] = False
    late, early = losses[:, -ICL_WINDOW:].mean(), losses[:, 1:1 + ICL_WINDOW].mean()
    return {"repeat": losses[mask].mean().item(), "other": losses[other].mean().item(),
            "icl_score": (late - early).item()}


def best_induction_score(model: torch.nn.Module, rows: torch.Tensor) -> float:
    """The highest induction score (:mod:`.scores`) of a head of the model's last layer on
    ``rows`` (B, T): read from the attention weights, not from any loss."""
    # (B, L, nh, T, T)
    patterns = attention_patterns(model, rows.to(next(model.parameters()).device))
    return all_scores(patterns, rows)["induction"][-1].max().item()


def repeat_loss_rows(model: torch.nn.Module, task: RepeatTask, rows: torch.Tensor,
                     lengths: torch.Tensor) -> torch.Tensor:
    """(B,): each row's mean loss over its predictable second copy (for intervals across rows)."""
    losses = token_losses(model, rows.to(next(model.parameters()).device)).cpu()  # (B, T)
    mask = repeat_mask(lengths, task.seq_len)
    return torch.where(mask, losses, 0.0).sum(1) / mask.sum(1)


def train_with_probes(trainer: Trainer, task: RepeatTask, probe_every: int,
                      rows=None) -> dict[str, list]:
    """Train ``trainer`` to its ``max_iters`` from where it stands, measuring (:func:`measure`)
    at its current step and every ``probe_every`` steps after. Returns lists ``step``, ``repeat``,
    ``other``, ``icl_score``, ``induction_score``, one entry per probe."""
    if probe_every < 1:
        raise ValueError(f"probe_every must be a positive number of steps, got {probe_every}")
    rows, lengths = rows if rows is not None else probe_rows(task)
    curve = {"step": [], "repeat": [], "other": [], "icl_score": [], "induction_score": []}

    def probe():
        curve["step"].append(trainer.step)
        for key, value in measure(trainer.model, task, rows, lengths).items():
            curve[key].append(value)
        curve["induction_score"].append(best_induction_score(trainer.model, rows))

    probe()
    while trainer.step < trainer.config.max_iters:
        trainer.train(until=trainer.step + probe_every)
        probe()
    return curve


def crossing_step(steps: list[int], values: list[float], threshold: float) -> float | None:
    """The step where ``values`` first falls below ``threshold``, linearly interpolated between
    the two probes around it; None when it never does (or already starts below)."""
    for i in range(1, len(values)):
        if values[i] < threshold <= values[i - 1]:
            a, b = values[i - 1], values[i]
            return steps[i - 1] + (a - threshold) / (a - b) * (steps[i] - steps[i - 1])
    return None


# Student-t quantiles t(0.975, n - 1) for n = 2..10 seeds; beyond that the normal 1.96 (within 5%
# from n = 22)
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def mean_interval(values: list[float]) -> tuple[float, float, float]:
    """``(mean, low, high)``: a 95% Student-t interval of the mean of a few seeds' values."""
    n = len(values)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 values, got {n}")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T_975.get(n - 1, 1.96) * sd / math.sqrt(n)
    return mean, mean - half, mean + half
