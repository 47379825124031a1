"""The training engine: the ``Trainer``, with a progress bar, loss history, and exactly resumable
checkpoints (chapters 2, 7); gradient accumulation and data-parallel training under torchrun
(chapter 12). Its settings, ``TrainConfig``, are :mod:`course_lib.train_config`'s (importable
from here too).

What it uses lives apart: loss estimates in :mod:`course_lib.losses`, precision, compilation and
speed in :mod:`course_lib.speed`, the optimizers and learning-rate schedules in
:mod:`course_lib.optim`, the checkpoint format in :mod:`course_lib.checkpoint`, who
draws which micro-batch in :mod:`course_lib.distributed`; a run is built from a preset or a
checkpoint in :mod:`course_lib.runs` (every kind of run, each in its output folder,
:mod:`course_lib.run_folder`).

Shapes: B batch, T time, V vocabulary size.
"""
from __future__ import annotations

import contextlib
import math
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn as nn
from tqdm import tqdm

from . import distributed
from ._signals import StopAtStepBoundary, TrainingInterrupted, pause_point
from .checkpoint import (CHECKPOINT_NAME, CheckpointError, build_model, load_checkpoint,
                         load_tokenizer, load_weights, restore_rng, save_checkpoint)
from .data import get_batch
from .losses import BatchFn, estimate_loss
from .optim import configure_optimizer, lr_at, set_lr
from .speed import SpeedMeter, autocast, compile_failed, compile_model, grad_scaler, tf32_matmuls
# TrainConfig and its rules live in train_config; importable from here as before
from .train_config import TRAIN_CONFIG_RULES, TrainConfig  # noqa: F401


def progress_bar(total: int, initial: int = 0, desc: str = "train", disable: bool = False) -> tqdm:
    """A plain-text progress bar that reads the same in a terminal and in a notebook."""
    # A fixed-width bar: its length must not depend on how long the rate text is, so that a
    # stored notebook output reproduces once the timings are sanitized.
    return tqdm(total=total, initial=initial, desc=desc, file=sys.stdout, ascii=" =",
                mininterval=0.5, disable=disable, bar_format="{l_bar}{bar:30}{r_bar}")


class TrainingDiverged(ValueError):
    """Raised when the loss or the weights stop being finite numbers: the run stops there, and no
    checkpoint is written over the last good one."""


class Trainer:
    """Trains a language model whose ``forward(x, y)`` returns ``(logits, loss)``.

    Batches come from ``batch_fn(split, generator)`` or, by default, random windows of
    ``train_data``/``val_data`` (1-D token tensors) of the model's block size. Every
    ``eval_interval`` steps it estimates train/val loss; ``history`` keeps every step's
    loss and learning rate.

    With ``out_dir`` it writes ``out_dir/ckpt.pt`` atomically: at every evaluation (or every
    ``checkpoint_interval`` steps), at the end, and when Ctrl-C stops it. Ctrl-C takes effect
    between two steps: the state saved is exactly that of an uninterrupted run at that step,
    and :meth:`resume` continues bit-for-bit as if it had never stopped. After saving,
    ``train()`` raises :class:`TrainingInterrupted` (a KeyboardInterrupt), so that a notebook
    cell stops and a script exits.

    ``progress=False`` hides the progress bar; ``verbose=False`` the line printed at every
    evaluation (the losses are still kept in ``history``). Both off: a silent run.
    """

    def __init__(self, model: nn.Module, train_data: torch.Tensor | None = None,
                 val_data: torch.Tensor | None = None, config: TrainConfig | None = None, *,
                 batch_fn: BatchFn | None = None, device=None, out_dir: str | Path | None = None,
                 tokenizer=None, progress: bool = True, verbose: bool = True,
                 trained_on: dict | None = None):
        self.config = config or TrainConfig()
        # a GPT: a step's activations refused in one line, not by the allocator
        if hasattr(model, "check_fits"):
            model.check_fits(model.config, self.config.batch_size)
        self.device = (torch.device(device) if device is not None
                       else next(model.parameters()).device)
        # the model itself; training runs through self.train_model
        self.model = model.to(self.device)
        # fp16's loss scaling (precision checked by runs)
        self.scaler = grad_scaler(self.device, self.config.dtype)
        # (N,) token ids per split when the run learns from a token stream (None: from its batch_fn)
        self.data = {"train": train_data, "val": val_data} if train_data is not None else None
        if batch_fn is None:
            if train_data is None or val_data is None:
                raise ValueError("give train_data and val_data (1-D token tensors), or a batch_fn")
            block_size = model.config.block_size
            data = {"train": train_data, "val": val_data}
            batch_fn = lambda split, gen: get_batch(data[split], block_size,
                                                    self.config.batch_size, gen, self.device)
        self.batch_fn = batch_fn
        self.optimizer = configure_optimizer(self.model, self.config)
        # One random batch stream per micro-batch of a step; this process draws its share of them.
        self.micro_batches, self.generators = distributed.batch_streams(
            self.config.seed, self.config.grad_accum_steps)
        self.train_model = distributed.wrap(compile_model(self.model) if self.config.compile
                                            else self.model, self.device)
        self._compile_unproven = self.config.compile  # until a compiled step has run
        self.speed = SpeedMeter(self.model, self.device)  # tokens/s and MFU
        self.out_dir = Path(out_dir) if out_dir is not None else None
        self.tokenizer = tokenizer
        self.progress = progress
        self.verbose = verbose
        self.step = 0
        self.history = {"step": [], "loss": [], "lr": [], "eval_step": [],
                        "train_loss": [], "val_loss": []}
        self.saved_step: int | None = None  # the step of the last checkpoint written
        # How to continue after an interrupt; the command line replaces it with its own command.
        self.resume_hint = "Trainer.resume({path!r}, ...)"
        # What the run learns from, stored in its checkpoints (course_lib.runs gives it: command,
        # preset, text name and SHA-256, or base checkpoint) so that a resume with other data is
        # refused.
        self.trained_on = trained_on

    @property
    def generator(self) -> torch.Generator:
        """The batch stream of this process's first micro-batch (the only one, by default)."""
        return self.generators[0]

    @property
    def tokens_per_s(self) -> float | None:
        return self.speed.tokens_per_s  # over all processes; None before the second step of train()

    @property
    def mfu(self) -> float | None:
        return self.speed.mfu  # model FLOPs utilisation, on a GPU of known peak only

    @property
    def checkpoint_path(self) -> Path | None:
        return self.out_dir / CHECKPOINT_NAME if self.out_dir is not None else None

    def lr(self, step: int) -> float:
        return lr_at(step, self.config,
                     getattr(getattr(self.model, "config", None), "n_embd", None))

    def evaluate(self) -> dict[str, float]:
        with autocast(self.device, self.config.dtype):
            losses = estimate_loss(self.model, self.batch_fn, self.config.eval_iters,
                                   seed=self.config.seed + 1)
        self.history["eval_step"].append(self.step)
        self.history["train_loss"].append(losses["train"])
        self.history["val_loss"].append(losses["val"])
        return losses

    def forward_backward(self, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> float:
        """Leave in every parameter's ``.grad`` the gradient of the mean loss over ``batches``
        (this process's micro-batches), one micro-batch at a time; returns that mean loss.

        Each micro-batch's loss is divided by their number and backward *adds* into ``.grad``,
        so the sum is the gradient of the mean: what one batch of all of them gives when each
        loss is a mean over equally many tokens. Under DDP the gradients are averaged over the
        processes once, during the last backward (``no_sync`` skips the all-reduce before).
        """
        self.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for i, (x, y) in enumerate(batches):
            last = i == len(batches) - 1
            with (self.train_model.no_sync() if distributed.is_distributed() and not last
                  else contextlib.nullcontext()):
                with autocast(self.device, self.config.dtype):
                    _, loss = self.train_model(x, y)
                loss = loss / len(batches)
                self.scaler.scale(loss).backward()
            total += loss.item()
        return total

    def train_step(self) -> float:
        lr = self.lr(self.step)
        set_lr(self.optimizer, lr)
        start = time.perf_counter()
        batches = [self.batch_fn("train", g) for g in self.generators]
        try:
            loss = self.forward_backward(batches)
        except Exception as e:
            if not self._compile_unproven:
                raise
            self._stop_compiling(e)  # then retry the same batches in eager mode
            loss = self.forward_backward(batches)
        self._compile_unproven = False
        loss = distributed.average(loss)  # under torchrun: the loss of the whole global batch
        if not math.isfinite(loss):  # before the update: the weights are as they were
            raise self._diverged(f"the loss is {loss} (learning rate {lr:.3g} at this step)")
        if self.config.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)  # clip the true gradients, not fp16's scaled ones
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.speed.record(sum(x.numel() for x, _ in batches),
                          time.perf_counter() - start, distributed.world_size())
        self.step += 1
        self.history["step"].append(self.step)
        self.history["loss"].append(loss)
        self.history["lr"].append(lr)
        return loss

    def postfix(self) -> dict[str, str]:
        """What the progress bar shows after the loss (a DPO or GRPO run adds its reward and KL)."""
        return self.speed.postfix()

    def _stop_compiling(self, error: Exception) -> None:
        if distributed.is_main():
            print(compile_failed(error))
        self._compile_unproven = False
        self.train_model = distributed.wrap(self.model, self.device)

    def _eval_due(self) -> bool:
        done = self.history["eval_step"] and self.history["eval_step"][-1] == self.step
        return not done and (self.step % self.config.eval_interval == 0
                             or self.step == self.config.max_iters)

    def _save_due(self) -> bool:
        every = self.config.save_every
        return (self.out_dir is not None and every > 0 and self.step > 0 and self.step % every == 0
                and self.saved_step != self.step)

    def _evaluate(self, bar) -> None:
        if not distributed.is_main():  # under torchrun, rank 0 alone evaluates and logs
            return
        pause_point("evaluate")
        losses = self.evaluate()
        if self.verbose:
            bar.write(f"step {self.step:5d}: train loss {losses['train']:.4f}, val loss "
                      f"{losses['val']:.4f}")

    def train(self, until: int | None = None) -> dict[str, list]:
        """Train up to ``config.max_iters`` steps (or stop early at step ``until``).
        Returns the loss history. On a CUDA GPU float32 matmuls use TF32 during the run only."""
        with tf32_matmuls(self.device):
            return self._train(until)

    def _train(self, until: int | None) -> dict[str, list]:
        end = self.config.max_iters if until is None else min(until, self.config.max_iters)
        self.train_model.train()
        self.speed.start()  # the first step compiles and warms up: not timed
        bar = progress_bar(self.config.max_iters, self.step,
                           disable=not self.progress or not distributed.is_main())
        try:
            with StopAtStepBoundary() as stop:
                # Under torchrun every process must stop at the same step: ask them all.
                stopping = lambda: distributed.any_process(stop.requested is not None)
                while self.step < end and not stopping():
                    if self._eval_due():
                        self._evaluate(bar)
                    if self._save_due():
                        self.save()
                    if stopping():
                        break
                    pause_point("step")
                    loss = self.train_step()
                    bar.update(1)
                    bar.set_postfix(loss=f"{loss:.3f}", **self.postfix(), refresh=False)
                stopped = stopping()
                if not stopped:  # the last evaluation and checkpoint, still safe from a Ctrl-C
                    if self._eval_due():
                        self._evaluate(bar)
                    if self.out_dir is not None:
                        self.save()
                    stopped = stopping()
        except KeyboardInterrupt:  # a second Ctrl-C: the step under way is lost, not saved
            bar.close()
            print(f"interrupted again during step {self.step + 1}: nothing saved for it" +
                  (f"; the last checkpoint is {self.checkpoint_path} (step {self.saved_step})"
                   if self.saved_step is not None else ""))
            raise
        finally:
            bar.close()
        if stopped:
            raise self._interrupted(stop.requested or signal.SIGINT)
        self.model.eval()
        return self.history

    def _interrupted(self, signum: int) -> TrainingInterrupted:
        name = signal.Signals(signum).name
        if self.out_dir is None:
            message = (f"{name}: stopped at step {self.step}; nothing saved (give the Trainer an "
                       "out_dir to save)")
            saved = None
        else:
            saved = self.checkpoint_path if self.saved_step == self.step else self.save()
            hint = self.resume_hint.format(path=str(saved))
            message = f"{name}: stopped at step {self.step} and saved {saved}; continue with {hint}"
        if distributed.is_main():
            print(message)
        self.model.eval()
        return TrainingInterrupted(message, signum, saved)

    def _diverged(self, what: str) -> TrainingDiverged:
        kept = (f"the last good checkpoint, {self.checkpoint_path} (step {self.saved_step}), "
                "is kept"
                if self.saved_step is not None else "nothing was saved")
        return TrainingDiverged(f"training diverged at step {self.step + 1}: {what}; {kept}. Try a "
                                f"smaller learning_rate (it is {self.config.learning_rate:g}) or "
                                "gradient clipping (grad_clip=1.0), e.g. --set learning_rate=3e-4 "
                                "--set grad_clip=1.0")

    # --- checkpoints ---

    def save(self, path: str | Path | None = None) -> Path:
        """Write a checkpoint (under torchrun: every process calls this, rank 0 writes)."""
        path = Path(path) if path is not None else self.checkpoint_path
        if path is None:
            raise ValueError("no checkpoint path: give Trainer(out_dir=...) or save(path)")
        # from every process
        streams = distributed.stream_states(self.micro_batches, self.generators)
        pause_point("save")
        if not all(bool(torch.isfinite(p).all()) for p in self.model.parameters()):
            raise self._diverged("the weights are no longer finite numbers (NaN or inf), so they "
                                 "were not saved")
        self.saved_step = self.step
        if not distributed.is_main():
            return path
        return save_checkpoint(path, self.model, tokenizer=self.tokenizer, train_config=self.config,
                               optimizer=self.optimizer, step=self.step, history=self.history,
                               batch_streams=streams,
                               trained_on=self.trained_on)

    def load_state(self, ckpt: dict, path: str | Path = "checkpoint") -> None:
        load_weights(self.model, ckpt, path)
        step, rng = ckpt.get("step"), ckpt.get("rng")
        if type(step) is not int or step < 0:
            raise CheckpointError(f"{path} is damaged: its step is {step!r}, not a count of steps, "
                                  "so the run cannot be resumed; use an earlier checkpoint, or "
                                  "start a new run in another --out")
        if not isinstance(rng, dict) or "torch" not in rng:
            raise CheckpointError(f"{path} holds no random-number state (rng is "
                                  f"{type(rng).__name__}), so the run cannot continue as it would "
                                  "have: it was not saved by a Trainer, or is damaged; start a new "
                                  "run in another --out")
        try:
            self.optimizer.load_state_dict(ckpt["optimizer"])
            self.step = int(ckpt["step"])
            self.history = {k: list(v) for k, v in ckpt["history"].items()}
            # sets torch's global state; returns the saved batch streams
            saved = restore_rng(ckpt["rng"])
            fitted = distributed.restore_streams(self.micro_batches, self.generators, saved,
                                                 self.config.seed + self.step)
        except (KeyError, RuntimeError, ValueError, TypeError) as e:
            raise CheckpointError(f"{path} cannot resume this run ({type(e).__name__}: "
                                  f"{str(e)[:200]})") from e
        self.saved_step = self.step
        # the run continues, but not as the saved one would have
        if not fitted and distributed.is_main():
            print(f"note: the checkpoint has {len(saved)} batch stream(s), this run "
                  f"{self.config.grad_accum_steps} micro-batches per step: batches are drawn from "
                  "fresh streams from here on")

    @classmethod
    def resume(cls, path: str | Path, model: nn.Module | None = None, train_data=None,
               val_data=None, *, batch_fn: BatchFn | None = None, device=None,
               max_iters: int | None = None, out_dir=None, tokenizer=None, progress: bool = True,
               verbose: bool = True, config: TrainConfig | None = None,
               checkpoint: dict | None = None) -> "Trainer":
        """Rebuild a Trainer from a checkpoint so that ``train()`` continues where it stopped.

        ``model`` defaults to a fresh model of the checkpoint's kind and config, ``tokenizer``
        to the checkpoint's; ``max_iters`` extends the run (or shortens one not yet past it: a run
        already past it is refused); ``config`` replaces the stored training config altogether;
        ``checkpoint``, the file at ``path`` if the caller has loaded it already (it is then not
        read again). A damaged step or random state is a CheckpointError that says so.
        """
        path = Path(path)
        ckpt = checkpoint if checkpoint is not None else load_checkpoint(path)
        if config is None:
            if not ckpt.get("train_config"):
                raise CheckpointError(f"{path} stores a model but no training run to resume")
            config = TrainConfig.from_dict(ckpt["train_config"])
        if max_iters is not None:
            config = replace(config, max_iters=max_iters)
        if model is None:
            model = build_model(ckpt, path)
        if tokenizer is None and ckpt.get("tokenizer"):
            tokenizer = load_tokenizer(ckpt, path)
        trainer = cls(model, train_data, val_data, config, batch_fn=batch_fn, device=device,
                      out_dir=out_dir if out_dir is not None else path.parent, tokenizer=tokenizer,
                      progress=progress, verbose=verbose, trained_on=ckpt.get("trained_on"))
        trainer.restore(ckpt, path)
        return trainer

    def restore(self, ckpt: dict, path: str | Path = "checkpoint") -> None:
        """Continue the run checkpoint ``path`` (read as ``ckpt``) saved: weights, optimizer, step,
        history and random state (:meth:`load_state`); a run already past this Trainer's
        ``max_iters`` is refused. Every kind of run resumes through here
        (course_lib.runs.resume)."""
        self.load_state(ckpt, path)
        if self.step > self.config.max_iters:
            raise ValueError(f"{path} is at step {self.step}, past max_iters "
                             f"{self.config.max_iters}: a resumed run trains on up to max_iters, "
                             f"so give one of at least {self.step} (--set max_iters=N), or leave "
                             "it out")
