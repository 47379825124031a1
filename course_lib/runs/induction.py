"""Chapter 21's run (``python -m course_lib induction``) as a kind of run
(:mod:`course_lib.runs.kind`):
the 2-layer attention-only model trained on the repeat task, the repeat length drawn per row
(8-24) or, with ``fixed_offset``, the control (16 in every row). The checkpoint records the task,
so that a resume draws the same batches.
"""
from __future__ import annotations

from pathlib import Path

from ..checkpoint import build_model
from ..config import apply_overrides
from ..induction.task import RepeatTask, batch_fn
from ..induction.training import induction_trainer, measure, probe_rows, train_config
from ..train import Trainer
from .kind import Plan, RunKind, register_kind, resume, resumed_config, start

VARIABLE = RepeatTask(vocab_size=32, seq_len=48, min_repeat=8, max_repeat=24)  # the chapter's task
FIXED = RepeatTask(vocab_size=32, seq_len=48, min_repeat=16,
                   max_repeat=16)  # its fixed-offset control
DEFAULT_ITERS = 700


def _plan(settings: dict, options: dict, path=None, ckpt=None) -> Plan:
    if ckpt is not None:
        task = RepeatTask.from_dict(ckpt["trained_on"]["task"])
        given = options.get("fixed_offset")
        if given is not None and bool(given) != task.fixed_offset:
            raise ValueError(f"--fixed-offset: {path} was trained "
                             f"{'on' if task.fixed_offset else 'without'} the "
                             "fixed-offset control, and a resumed run keeps its task; leave the "
                             "option out")
        return Plan(resumed_config(path, ckpt, settings), {"task": task})
    task = FIXED if options.get("fixed_offset") else VARIABLE
    return Plan(apply_overrides(train_config(DEFAULT_ITERS, seed=0), settings), {"task": task})


def _build(plan: Plan, *, device, out_dir, progress, verbose, fixed_offset=None) -> Trainer:
    return induction_trainer(plan.extra["task"], plan.train, device=device, out_dir=out_dir,
                             progress=progress, verbose=verbose)


def _rebuild(plan: Plan, path: Path, ckpt: dict, *, device, progress, verbose,
             fixed_offset=None) -> Trainer:
    batches = batch_fn(plan.extra["task"], plan.train.batch_size, device)
    return Trainer(build_model(ckpt, path), config=plan.train, batch_fn=batches, device=device,
                   out_dir=path.parent, progress=progress, verbose=verbose,
                   trained_on=ckpt["trained_on"])


def _task(trainer: Trainer) -> RepeatTask:
    return RepeatTask.from_dict(trainer.trained_on["task"])


def _describe(trainer: Trainer) -> str:
    task = _task(trainer)
    what = ("the fixed-offset control (L = 16)" if task.fixed_offset
            else "repeat length drawn per row (8-24)")
    return (f"induction run, {what}: {trainer.model.num_parameters():,} parameters on "
            f"{trainer.device}; {trainer.config.max_iters} iterations, checkpoints in "
            f"{trainer.out_dir}")


def _report(trainer: Trainer):
    task = _task(trainer)
    m = measure(trainer.model.eval(), task, *probe_rows(task))
    yield (f"repeat loss {m['repeat']:.3f} (chance {task.chance_loss:.3f}), other tokens "
           f"{m['other']:.3f}, "
           f"in-context learning score {m['icl_score']:+.3f}; saved {trainer.checkpoint_path}")


INDUCTION = register_kind(RunKind(
    command="induction", plan=_plan, build=_build, rebuild=_rebuild, describe=_describe,
    report=_report,
    example=lambda folder: ({"max_iters": 3, "eval_interval": 2, "eval_iters": 1, "batch_size": 2},
                            {}),
    options=("fixed_offset",), default_out=lambda options: "runs/induction"))


def start_induction_run(settings: dict | None = None, *, fixed_offset: bool = False,
                        device: str | None = None, out_dir=None, progress: bool = True) -> Trainer:
    """A new chapter 21 run (``fixed_offset``: the control)."""
    return start(INDUCTION, settings, fixed_offset=fixed_offset,
                 device=device, out_dir=out_dir, progress=progress)


def resume_induction_run(path: str | Path, settings: dict | None = None, *,
                         device: str | None = None, progress: bool = True,
                         checkpoint: dict | None = None) -> Trainer:
    """The chapter 21 run saved in ``path``, continued bit for bit on the same task."""
    return resume(INDUCTION, path, settings, device=device,
                  progress=progress, checkpoint=checkpoint)
