"""Chapter 15's fine-tuning, in full or with LoRA (``python -m course_lib finetune``), as a kind of
run (:mod:`course_lib.runs.kind`)::

    trainer = start_finetune_run("runs/mine/ckpt.pt", lora_rank=8, out_dir="runs/ft")

The tokenizer and the model's vocabulary grow by the task's characters; the model keeps the
base's shape (only training settings may be set). A resumed LoRA run finds its base by the
recorded path or, moved, by its SHA-256.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..checkpoint import build_model, load_tokenizer
from ..config import apply_overrides
from ..dates import date_test_set
from ..finetune import (FINETUNE_TASKS, answer_batch_fn, answer_prompts, answers_exact_match,
                        finetune_config, task_tokenizer)
from ..lora import DEFAULT_TARGETS
from ..lora_gpt import LoRAGPT, fine_tune_model
from ..model import GPT, GPTConfig
from ..checkpoint import save_checkpoint
from ..tokenizers import CharTokenizer
from ..train import Trainer
from ..utils import seed_everything
from .kind import (SHAPE_KEPT, Plan, RunKind, base_record, load_base_gpt, register_kind, resume,
                   resumed_config, same_base, start)

# the final exact match: more held-out dates than this only takes longer
MAX_EVAL_EXAMPLES = 100_000


def check_lora_options(lora_rank, lora_alpha, lora_targets) -> None:
    """LoRA's alpha and targets apply to a LoRA fine-tune only, and must name something."""
    given = [o for o, v in (("--lora-alpha", lora_alpha), ("--lora-targets", lora_targets))
             if v is not None]
    if lora_rank is None and given:
        raise ValueError(f"{' and '.join(given)} without --lora-rank: they set up LoRA adapters; "
                         "add --lora-rank R (e.g. 8) for a LoRA fine-tune, or leave them out for "
                         "full fine-tuning")
    if lora_alpha is not None and not (math.isfinite(lora_alpha) and lora_alpha > 0):
        raise ValueError("--lora-alpha must be a finite number > 0 (the adapters' scale is alpha "
                         f"/ rank), got {lora_alpha}")
    if lora_targets is not None and not [t for t in lora_targets if t.strip()]:
        raise ValueError(f"--lora-targets names no layer: give comma-separated layer names, e.g. "
                         f"{','.join(DEFAULT_TARGETS)} (the attention) or mlp.c_fc,mlp.c_proj")


def _plan(settings: dict, options: dict, path=None, ckpt=None) -> Plan:
    """Fine-tuning's defaults (LoRA: a larger learning rate) with ``settings`` applied, or a resumed
    run's stored settings (:func:`resumed_config`); the model's shape may not be set."""
    task = options.get("task") or "dates"
    if task not in FINETUNE_TASKS:
        raise ValueError(f"unknown --task {task!r}; choose one of: {', '.join(FINETUNE_TASKS)}")
    if ckpt is not None:
        rank = (ckpt["model_config"].get("rank") if ckpt["model_kind"] == "gpt-lora"
                else options.get("lora_rank"))
        check_lora_options(rank, options.get("lora_alpha"), options.get("lora_targets"))
        _check_same_lora(path, ckpt, options.get("lora_rank"),
                         options.get("lora_alpha"), options.get("lora_targets"))
        return Plan(resumed_config(path, ckpt, settings, SHAPE_KEPT))
    check_lora_options(options.get("lora_rank"), options.get("lora_alpha"),
                       options.get("lora_targets"))
    return Plan(apply_overrides(finetune_config(lora=options.get("lora_rank") is not None),
                                settings, SHAPE_KEPT))


def _trainer(model, tokenizer, plan: Plan, device, trained_on: dict, **options) -> Trainer:
    batch_fn = answer_batch_fn(tokenizer, plan.train.batch_size, device=device)
    return Trainer(model, config=plan.train, batch_fn=batch_fn, device=device, tokenizer=tokenizer,
                   trained_on=trained_on, **options)


def _build(plan: Plan, *, device, out_dir, progress, verbose, base_checkpoint=None, task=None,
           lora_rank=None, lora_alpha=None, lora_targets=None) -> Trainer:
    """A new fine-tune of the GPT in ``base_checkpoint``: in full (``lora_rank`` None), or LoRA
    adapters of ``lora_rank`` (``lora_alpha`` default: the rank) on ``lora_targets`` (default:
    the attention projections)."""
    base, base_tokenizer, path, sha = load_base_gpt(base_checkpoint, "fine-tuning")
    tokenizer = task_tokenizer(base_tokenizer, base.config.block_size, base_checkpoint)
    targets = [t.strip() for t in lora_targets or DEFAULT_TARGETS if t.strip()]
    alpha = float(lora_rank or 1) if lora_alpha is None else lora_alpha
    seed_everything(plan.train.seed)  # LoRA's A matrices: the run's first random numbers
    model = fine_tune_model(base, path, tokenizer, lora_rank, alpha, targets)
    trained_on = {"command": "finetune", "task": task or "dates", **base_record(path, sha)}
    return _trainer(model, tokenizer, plan, device, trained_on,
                    out_dir=out_dir, progress=progress, verbose=verbose)


def _check_same_lora(path: Path, ckpt: dict, lora_rank, lora_alpha, lora_targets) -> None:
    """Refuse LoRA options that differ from the saved run's (a resumed run keeps its model)."""
    saved = ckpt["model_config"] if ckpt["model_kind"] == "gpt-lora" else {}
    given = {"--lora-rank": (lora_rank, saved.get("rank")),
             "--lora-alpha": (lora_alpha, saved.get("alpha")),
             "--lora-targets": (lora_targets and ",".join(lora_targets), saved.get("targets"))}
    for option, (value, kept) in given.items():
        if value is not None and value != kept:
            how = (f"LoRA rank {saved['rank']}, alpha {saved['alpha']:g}, targets "
                   f"{saved['targets']}" if saved
                   else "full fine-tuning")
            raise ValueError(f"{option} {value}: {path} was fine-tuned with {how}; a resumed run "
                             "keeps its model (leave the option out, or start a new run in another "
                             "--out)")


def _rebuild(plan: Plan, path: Path, ckpt: dict, *, device, progress, verbose, base_checkpoint=None,
             task=None, lora_rank=None, lora_alpha=None, lora_targets=None) -> Trainer:
    """The fine-tune saved at ``path``; a LoRA run's base, given as ``base_checkpoint``, must be the
    recorded file or a copy with its SHA-256 (the run then points at the new path from here on)."""
    trained_on = ckpt["trained_on"] or {"command": "finetune", "task": task or "dates"}
    if ckpt["model_kind"] == "gpt-lora" and base_checkpoint:
        config = ckpt["model_config"]
        config["base_checkpoint"] = str(same_base(path, config, base_checkpoint))
        trained_on = {**trained_on, "base_checkpoint": config["base_checkpoint"]}
    # a LoRA model checks its base here
    model, tokenizer = build_model(ckpt, path), load_tokenizer(ckpt, path)
    return _trainer(model, tokenizer, plan, device, trained_on, out_dir=path.parent,
                    progress=progress, verbose=verbose)


def _describe(trainer: Trainer) -> str:
    model = trainer.model
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    how = f"LoRA rank {model.config.rank}" if isinstance(model, LoRAGPT) else "full fine-tuning"
    return (f"fine-tuning on {trainer.trained_on['task']} ({how}): {trained:,} of "
            f"{model.num_parameters():,} parameters trained, on {trainer.device}; "
            f"{trainer.config.max_iters} iterations, checkpoints in {trainer.out_dir}")


def check_eval_examples(eval_examples: int = 500) -> None:
    if not 1 <= eval_examples <= MAX_EVAL_EXAMPLES:
        raise ValueError(f"--eval-examples must be an integer in [1, {MAX_EVAL_EXAMPLES:,}] "
                         f"(held-out dates for the final exact match), got {eval_examples}")


def _report(trainer: Trainer, eval_examples: int = 500):
    """The task's exact match on held-out dates, then three answers."""
    pairs, model, tokenizer = date_test_set(eval_examples), trainer.model, trainer.tokenizer
    yield (f"val loss {trainer.history['val_loss'][-1]:.4f}; exact match on {len(pairs)} held-out "
           f"dates {answers_exact_match(model, tokenizer, pairs):.1%}; saved "
           f"{trainer.checkpoint_path}")
    sources = [s for s, _ in pairs[:3]]
    for source, answer in zip(sources, answer_prompts(model, tokenizer, sources)):
        yield f"  {source}  ->  {answer}"


def tiny_base(path: Path, block_size: int = 64) -> Path:
    """A small random GPT checkpoint with a character tokenizer that writes digits and letters: the
    base of the smallest runs (interface tests, examples)."""
    tokenizer = CharTokenizer("0123456789abcdefghijklmnopqrstuvwxyz+=-/ \n")
    seed_everything(0)
    model = GPT(GPTConfig(vocab_size=tokenizer.vocab_size, block_size=block_size,
                          n_layer=1, n_head=2, n_embd=16))
    return save_checkpoint(path, model, tokenizer=tokenizer,
                           trained_on={"command": "train", "preset": None, "text": None,
                                       "text_sha256": None})


FINETUNE = register_kind(RunKind(
    command="finetune", plan=_plan, build=_build, rebuild=_rebuild, describe=_describe,
    report=_report,
    example=lambda folder: ({"max_iters": 3, "eval_interval": 2, "eval_iters": 1, "batch_size": 4},
                            {"base_checkpoint": str(tiny_base(folder / "base.pt")),
                             "lora_rank": 2}),
    options=("base_checkpoint", "task", "lora_rank", "lora_alpha", "lora_targets"),
    report_options=("eval_examples",), check_report_options=check_eval_examples,
    default_out=lambda options: "runs/ft"))


def start_finetune_run(base_checkpoint: str | Path, settings: dict | None = None, *,
                       task: str = "dates", lora_rank: int | None = None,
                       lora_alpha: float | None = None, lora_targets=None,
                       device: str | None = None, out_dir=None, progress: bool = True) -> Trainer:
    """A new fine-tune of the GPT in ``base_checkpoint`` on ``task`` (see :func:`_build`)."""
    return start(FINETUNE, settings, base_checkpoint=base_checkpoint, task=task,
                 lora_rank=lora_rank, lora_alpha=lora_alpha, lora_targets=lora_targets,
                 device=device, out_dir=out_dir, progress=progress)


def resume_finetune_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None,
                        task: str = "dates", lora_rank: int | None = None,
                        lora_alpha: float | None = None, lora_targets=None,
                        device: str | None = None, progress: bool = True,
                        checkpoint: dict | None = None) -> Trainer:
    """The fine-tune saved in ``path``, continued; LoRA options, if given, must be the run's."""
    return resume(FINETUNE, path, settings, base_checkpoint=base_checkpoint, task=task,
                  lora_rank=lora_rank, lora_alpha=lora_alpha, lora_targets=lora_targets,
                  device=device, progress=progress, checkpoint=checkpoint)
