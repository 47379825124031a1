"""What every kind of run shares: the :class:`RunKind` record, the registry of kinds, and the steps
that each kind would otherwise write again (the training settings of a resume, the device and
precision, the base model a fine-tune starts from and the check that it has not changed).

A kind of run is one command that trains (``train``, ``train-dates``, ``finetune``, ``chat-sft``,
``dpo``, ``grpo``...): one module of this package describes it with a :class:`RunKind` and
registers it; :func:`course_lib.runs.start` and :func:`course_lib.runs.resume` build every kind
the same way, in the same order, and the command line has one body for all of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from .. import distributed
from ..checkpoint import CheckpointError, load_checkpoint, load_model, load_tokenizer
from ..config import apply_resume_overrides
from ..lora_gpt import SHAPE_KEPT, file_sha256  # noqa: F401 (SHAPE_KEPT: for the kinds)
from ..model import GPT
from ..run_folder import check_made_by
from ..speed import check_precision
from ..train import TrainConfig, Trainer
from ..utils import check_device


@dataclass
class Plan:
    """What a run will be, known before any work: its training settings (checked: the device and
    precision are refused against them before a model is built or a sample drawn) and what else
    the kind worked out from the settings and options (its model or method settings...)."""
    train: TrainConfig
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RunKind:
    """One kind of run, as :func:`course_lib.runs.start` / :func:`~course_lib.runs.resume` build it.

    - ``plan(settings, options, path, ckpt) -> Plan``: the run's settings from ``--set`` (a dict)
      and the kind's options; for a resume (``path`` and its checkpoint ``ckpt``) the stored
      ones, changed only where a resume may (:func:`resumed_config`). Cheap: no model, no data.
    - ``build(plan, device, out_dir, progress, verbose, **options) -> Trainer``: a new run, its
      ``trained_on`` given to the Trainer; seeded right before its first random numbers.
    - ``rebuild(plan, path, ckpt, device, progress, verbose, **options) -> Trainer``: the Trainer
      of the run ``path`` saved, not yet restored (:func:`~course_lib.runs.resume` restores it, for
      every kind alike); refuses, in one line, an option that would change the kept model or data.
    - ``options``: the keyword options the builders take (the command line's options of the same
      names); ``report_options``: options only ``report`` reads (e.g. how many examples to score),
      checked by ``check_report_options(**report_options)`` before any work.
    - ``one_process``: the run cannot be shared out by torchrun (DPO's pairs, GRPO's rollouts).
    - ``describe(trainer) -> str``: the line printed before
      training; ``report(trainer, **report_options)``:
      the lines after, one at a time (an iterator: a line is printed before the next is computed).
    - ``example(folder) -> (settings, options)``: the smallest run of this kind (what it needs, such
      as a tiny base checkpoint, written into ``folder``): the interface test over every registered
      kind trains, interrupts and resumes it.
    - ``default_out(options) -> str``: the output folder when ``--out`` is not given.
    """
    command: str
    plan: Callable[..., Plan]
    build: Callable[..., Trainer]
    rebuild: Callable[..., Trainer]
    describe: Callable[[Trainer], str]
    report: Callable[..., Iterator[str]]
    example: Callable[[Path], tuple[dict, dict]]
    options: tuple[str, ...] = ()
    report_options: tuple[str, ...] = ()
    check_report_options: Callable[..., None] | None = None
    one_process: bool = False
    default_out: Callable[[dict], str] | None = None


KINDS: dict[str, RunKind] = {}  # filled by this package's modules, one per kind, on import


def register_kind(kind: RunKind) -> RunKind:
    if kind.command in KINDS:
        raise ValueError(f"a kind of run named {kind.command!r} is already registered")
    KINDS[kind.command] = kind
    return kind


def get_kind(kind: str | RunKind) -> RunKind:
    if isinstance(kind, RunKind):
        return kind
    if kind not in KINDS:
        raise ValueError(f"unknown kind of run {kind!r}; choose one of: {', '.join(KINDS)}")
    return KINDS[kind]


def check_options(kind: RunKind, options: dict[str, Any]) -> None:
    """A misspelt option would be silently ignored: refuse it, naming the kind's options."""
    unknown = sorted(set(options) - set(kind.options))
    if unknown:
        known = ", ".join(kind.options) or "none"
        raise TypeError(f"{kind.command} runs take no option {', '.join(unknown)} (its options: "
                        f"{known})")


# --- the device and the training settings ---------------------------------------------------------


def training_device(device: str, config: TrainConfig, one_process: bool = False,
                    command: str = "this run") -> str:
    """The device this process trains on (``device`` already resolved), once it is known that the
    run can train there: the precision, and under torchrun the micro-batches shared out among the
    processes, whose process group this then joins (gloo on CPU, nccl on GPUs). A ``one_process``
    kind refuses torchrun."""
    check_precision(torch.device(device), config.dtype)
    if one_process:
        if distributed.launched_world_size() > 1:
            raise ValueError(f"{command} runs in one process: start it with `python -m course_lib "
                             f"{command}`, not torchrun")
        return device
    distributed.local_micro_batches(config.grad_accum_steps, distributed.launched_world_size())
    return distributed.setup(device)


# The training settings a resumed run may change (--resume --set KEY=VALUE): how long it runs
# (max_iters, and lr_decay_iters, the schedule's length, which follows it), when it evaluates and
# saves, and how it computes on this machine (dtype, compile: a run moved to a CPU cannot keep
# fp16). Every other setting fixes what the run is (its seed: the data split and batches; its batch
# size, optimizer and schedule): given on a resume, it must be the stored value
# (course_lib.config.apply_resume_overrides).
RESUMABLE_SETTINGS = ("max_iters", "lr_decay_iters", "eval_interval",
                      "checkpoint_interval", "dtype", "compile")


def resumed_config(path: Path, ckpt: dict, settings: dict | None,
                   forbidden: dict[str, str] | None = None):
    """The training settings checkpoint ``path`` stores, with a resume's ``settings`` applied: only
    ``RESUMABLE_SETTINGS`` may change, any other key must carry the stored value."""
    return apply_resume_overrides(stored_config(path, ckpt), settings or {},
                                  RESUMABLE_SETTINGS, path,
                                  f"every training setting but {', '.join(RESUMABLE_SETTINGS)}",
                                  forbidden)


def stored_config(path: Path, ckpt: dict) -> TrainConfig:
    """The training settings a checkpoint stores; a stored value this course_lib refuses is named
    as the checkpoint's, not the command's."""
    if not ckpt.get("train_config"):
        raise CheckpointError(f"{path} stores a model but no training run to resume")
    try:
        return TrainConfig.from_dict(ckpt["train_config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path} stores training settings this course_lib refuses ({e}): the "
                              "value comes from the checkpoint, not from your command; start a new "
                              "run in another --out") from None


# --- the base model of a run that starts from one -------------------------------------------------


def load_base_gpt(base_checkpoint, what: str, device: str = "cpu"):
    """``(model, tokenizer, path, sha256)`` of the GPT in ``base_checkpoint`` that a ``what`` run
    ("fine-tune", "DPO and GRPO"...) starts from; any other kind of model is refused by name."""
    if base_checkpoint is None:
        raise ValueError(f"--checkpoint is needed to start a {what} run: the GPT to start from, "
                         "e.g. runs/cpu/ckpt.pt from `python -m course_lib train --out runs/cpu`")
    path = Path(base_checkpoint).resolve()
    base, ckpt = load_model(path, device)
    if type(base) is not GPT:
        raise ValueError(f"{base_checkpoint} holds a {ckpt['model_kind']!r} model: a {what} run "
                         "starts from a GPT checkpoint (written by `python -m course_lib train`, "
                         "or a full `finetune`)")
    tokenizer = load_tokenizer(ckpt, path) if ckpt.get("tokenizer") else None
    return base, tokenizer, path, file_sha256(path)


def base_record(path: Path, sha256: str) -> dict:
    """What a run's checkpoints record of its base."""
    return {"base_checkpoint": str(path), "base_sha256": sha256}


def same_base(path: Path, recorded: dict, base_checkpoint) -> Path:
    """The base of the run saved at ``path`` (``recorded``: its ``trained_on``, or a LoRA model's
    config), as a resume finds it: ``base_checkpoint`` when given (the recorded file, or the same
    bytes moved elsewhere), else the recorded file; either must hold the recorded bytes (SHA-256).
    Anything else is refused, naming both."""
    given = Path(base_checkpoint or recorded["base_checkpoint"]).resolve()
    if given.is_file() and file_sha256(given) == recorded["base_sha256"]:
        return given
    was = (f"{path} starts from {recorded['base_checkpoint']} "
           f"(SHA-256 {recorded['base_sha256'][:12]}...)")
    state = "another file" if given.is_file() else "missing"
    if base_checkpoint is None:
        raise ValueError(f"{was}, and that file is now {state}: give that base (or a copy of it) "
                         "as --checkpoint")
    raise ValueError(f"--checkpoint {base_checkpoint}: {was}, and that is {state}; a resumed run "
                     "keeps its base: give that base (or a copy of it), or leave --checkpoint out")


# --- building a run: one way for every kind -------------------------------------------------------


def start(kind: str | RunKind, settings: dict | None = None, *, device: str | None = None,
          out_dir=None, progress: bool = True, verbose: bool = True, **options) -> Trainer:
    """A new run of ``kind`` (a command name, e.g. ``"finetune"``): ``settings`` are the command
    line's ``--set KEY=VALUE`` as a dict (values as text or Python values), ``options`` the kind's
    own (``RunKind.options``). In this order, for every kind: the options and settings checked,
    the device resolved and the precision refused before any work (no model built, no sample
    drawn), then the kind builds its Trainer, which writes ``out_dir/ckpt.pt``."""
    kind = get_kind(kind)
    check_options(kind, options)
    plan = kind.plan(settings or {}, options)
    device = training_device(check_device(device), plan.train, kind.one_process, kind.command)
    return kind.build(plan, device=device, out_dir=out_dir,
                      progress=progress, verbose=verbose, **options)


def resume(kind: str | RunKind, path: str | Path, settings: dict | None = None, *,
           device: str | None = None, checkpoint: dict | None = None, progress: bool = True,
           verbose: bool = True, **options) -> Trainer:
    """The run of ``kind`` saved at ``path``, continued bit for bit: the checkpoint read once
    (``checkpoint``: already read by the caller) and refused unless ``kind`` made it; ``settings``
    may change only ``RESUMABLE_SETTINGS`` (a larger ``max_iters`` extends a finished run), and an
    option that would change the kept model or data is refused. The kind rebuilds its Trainer;
    :meth:`Trainer.restore` then continues it, for every kind alike."""
    kind = get_kind(kind)
    check_options(kind, options)
    path = Path(path)
    ckpt = checkpoint if checkpoint is not None else load_checkpoint(path)
    check_made_by(ckpt, path, kind.command)
    stored_config(path, ckpt)  # a checkpoint with no training run is refused here, by name
    plan = kind.plan(settings or {}, options, path, ckpt)
    device = training_device(check_device(device), plan.train, kind.one_process, kind.command)
    trainer = kind.rebuild(plan, path, ckpt, device=device,
                           progress=progress, verbose=verbose, **options)
    trainer.restore(ckpt, path)
    return trainer
