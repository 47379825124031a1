"""Chapter 23's quantization-aware training (``python -m course_lib qat``) as a kind of run
(:mod:`course_lib.runs.kind`): a GPT checkpoint fine-tuned on its own text while its forward pass
computes with its matrices rounded to ``bits`` per group of ``group_size`` (the ``gpt-qat`` model
kind, :mod:`course_lib.quantize.models`: fake quantization, the straight-through estimator)::

    trainer = start_qat_run("runs/cpu/ckpt.pt", bits=4, group_size=32, out_dir="runs/qat")

The checkpoint it writes samples like any model (what the quantized model will say); ``python -m
course_lib quantize runs/qat/ckpt.pt --out ...`` rounds its float weights into a gpt-int4
checkpoint. The text is the base's (its preset's corpus, the shipped model's tiny Shakespeare) or
``--text``; a resume reads it again and refuses another text (by its SHA-256).
"""
from __future__ import annotations

from pathlib import Path

from ..checkpoint import build_model, load_checkpoint, load_tokenizer
from ..config import apply_overrides
from ..data import get_batch
from ..quantize.convert import run_text
from ..quantize.embeddings import check_embeddings
from ..quantize.models import QATGPT
from ..train import TrainConfig, Trainer
from ..utils import seed_everything
from .finetune import tiny_base
from .kind import (SHAPE_KEPT, Plan, RunKind, base_record, load_base_gpt,
                   register_kind, resume, resumed_config, start)
from .pretrain import split_tokens

# A gentle fine-tune (the chapter's QAT settings,
# quantize.qat.QAT_TRAIN), evaluated and saved along the way.
QAT_DEFAULTS = dict(max_iters=200, batch_size=32, learning_rate=3e-4, min_lr=3e-5, warmup_iters=20,
                    weight_decay=0.0, eval_interval=50, eval_iters=20)


def _plan(settings: dict, options: dict, path=None, ckpt=None) -> Plan:
    bits, group, emb = options.get("bits"), options.get("group_size"), options.get("embeddings")
    if emb is not None:
        check_embeddings(emb, "--embeddings")
    if ckpt is not None:
        kept = ckpt["model_config"]
        for option, value, name in (("--bits", bits, "bits"), ("--group-size", group, "group_size"),
                                    ("--embeddings", emb, "embeddings")):
            if value is not None and value != kept.get(name):
                raise ValueError(f"{option} {value}: {path} trains with {name} {kept[name]}; a "
                                 "resumed run keeps its model (leave the option out, or start a "
                                 "new run in another --out)")
        return Plan(resumed_config(path, ckpt, settings, SHAPE_KEPT))
    # checked now
    QATGPT.config_class(bits=4 if bits is None else bits, group_size=32 if group is None else group)
    return Plan(apply_overrides(TrainConfig(**QAT_DEFAULTS), settings, SHAPE_KEPT))


def _trainer(model, tokenizer, text: str, plan: Plan, device, trained_on: dict,
             **options) -> Trainer:
    train, val = split_tokens(tokenizer, text, model.config.block_size)
    T, B = model.config.block_size, plan.train.batch_size

    def batch_fn(split, generator):
        return get_batch(train if split == "train" else val, T, B, generator, device)

    return Trainer(model, config=plan.train, batch_fn=batch_fn, device=device, tokenizer=tokenizer,
                   trained_on=trained_on, **options)


def _build(plan: Plan, *, device, out_dir, progress, verbose, base_checkpoint=None, text_file=None,
           bits=None, group_size=None, embeddings=None) -> Trainer:
    base, tokenizer, path, sha = load_base_gpt(base_checkpoint, "quantization-aware training")
    if tokenizer is None:
        raise ValueError(f"{base_checkpoint} has no tokenizer to read the training text with")
    text, record = run_text(path, load_checkpoint(path).get("trained_on"), text_file, "train on")
    seed_everything(plan.train.seed)
    model = QATGPT.from_gpt(base, 4 if bits is None else bits,
                            32 if group_size is None else group_size,
                            embeddings=embeddings or "int8")
    trained_on = {"command": "qat", **base_record(path, sha), **record}
    return _trainer(model, tokenizer, text, plan, device, trained_on, out_dir=out_dir,
                    progress=progress, verbose=verbose)


def _rebuild(plan: Plan, path: Path, ckpt: dict, *, device, progress, verbose, base_checkpoint=None,
             text_file=None, bits=None, group_size=None, embeddings=None) -> Trainer:
    """The run saved at ``path``, on the same text (``text_file``
    again if it was given: its SHA-256 must match)."""
    recorded = ckpt["trained_on"]
    text, record = run_text(path, recorded, text_file, "train on")
    if record["text_sha256"] != recorded["text_sha256"]:
        raise ValueError(f"--text {text_file}: {path} was trained on another text (SHA-256 "
                         f"{recorded['text_sha256'][:12]}...); a resumed run keeps its data: give "
                         "that text")
    model, tokenizer = build_model(ckpt, path), load_tokenizer(ckpt, path)
    return _trainer(model, tokenizer, text, plan, device, recorded, out_dir=path.parent,
                    progress=progress, verbose=verbose)


def _describe(trainer: Trainer) -> str:
    c = trainer.model.config
    group = "per row" if c.group_size is None else f"per group of {c.group_size}"
    return (f"quantization-aware training, int{c.bits} {group}, embeddings {c.embeddings}: "
            f"{trainer.model.num_parameters():,} parameters on "
            f"{trainer.device}; {trainer.config.max_iters} iterations, checkpoints in "
            f"{trainer.out_dir}")


def _report(trainer: Trainer):
    c = trainer.model.config
    yield (f"val loss {trainer.history['val_loss'][-1]:.4f} with int{c.bits} weights (the forward "
           f"pass rounds them); saved {trainer.checkpoint_path}")
    if c.bits == 4 and c.group_size in (32, 64, 128, 256):
        yield (f"write the 4-bit model: python -m course_lib quantize {trainer.checkpoint_path} "
               f"--bits 4 --method rtn --group-size {c.group_size} --embeddings {c.embeddings} "
               f"--out {Path(trainer.checkpoint_path).with_name('int4.pt')}")


def _example(folder: Path) -> tuple[dict, dict]:
    text = folder / "text.txt"
    text.write_text("the cat sat on the mat 123\n" * 60)
    return ({"max_iters": 3, "eval_interval": 2, "eval_iters": 1, "batch_size": 2},
            {"base_checkpoint": str(tiny_base(folder / "base.pt")), "text_file": str(text),
             "bits": 4, "group_size": 8, "embeddings": "int8"})


QAT = register_kind(RunKind(
    command="qat", plan=_plan, build=_build, rebuild=_rebuild, describe=_describe, report=_report,
                            example=_example,
    options=("base_checkpoint", "text_file", "bits", "group_size", "embeddings"),
                            default_out=lambda options: "runs/qat"))


def start_qat_run(base_checkpoint, settings: dict | None = None, *, bits: int = 4,
                  group_size: int | None = 32, text_file=None, device: str | None = None,
                  out_dir=None, progress: bool = True, embeddings: str = "int8") -> Trainer:
    """A new quantization-aware fine-tune of the GPT in ``base_checkpoint`` (its embedding tables
    trained as they will be stored: ``embeddings``)."""
    return start(QAT, settings, base_checkpoint=base_checkpoint, text_file=text_file,
                 bits=bits, group_size=group_size, device=device, out_dir=out_dir,
                 progress=progress, embeddings=embeddings)


def resume_qat_run(path, settings: dict | None = None, *, text_file=None, device: str | None = None,
                   progress: bool = True, checkpoint: dict | None = None) -> Trainer:
    """The QAT run saved in ``path``, continued bit for bit."""
    return resume(QAT, path, settings, text_file=text_file, device=device,
                  progress=progress, checkpoint=checkpoint)
