"""Part III's kinds of run, built like every other (:mod:`course_lib.runs`: the device resolved once,
the training settings checked, crash safety and bitwise resume from the Trainer): chapter 17's chat
fine-tune (``python -m course_lib chat-sft``) and chapter 18's DPO and GRPO runs (``dpo``, ``grpo``).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from . import align, distributed
from .chat_data import CHAT_SHA256, EXTRA_CHARS, chat_batch_fn, chat_sft_config
from .chat_template import chat_tokenizer
from .checkpoint import build_model, load_checkpoint, load_model, load_tokenizer
from .config import apply_overrides
from .lora_gpt import extend_vocabulary, file_sha256
from .model import GPT
from .run_folder import check_made_by
from .runs import SHAPE_KEPT, resumed_config, stored_config, training_device
from .train import TrainConfig, Trainer
from .utils import check_device, seed_everything


# --- chapter 18's preference and reward runs: python -m course_lib dpo / grpo ------------------------


def start_dpo_run(base_checkpoint: str | Path, settings: dict | None = None, *, reward: str = "exact",
                  device: str | None = None, out_dir=None, progress: bool = True) -> Trainer:
    """A new DPO run from the GPT in ``base_checkpoint`` (:mod:`course_lib.align`): pairs of its own
    answers that ``reward`` scores 1 and 0, the base as the reference; ``settings`` may hold
    ``beta``, ``loss_type``... as well as training settings."""
    return align.start_align_run("dpo", base_checkpoint, settings, reward=reward, device=_one_process("dpo", device),
                                 out_dir=out_dir, progress=progress)


def resume_dpo_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None, device: str | None = None,
                   progress: bool = True, checkpoint: dict | None = None) -> Trainer:
    """The DPO run saved in ``path``, continued bit for bit."""
    return _resume_align("dpo", path, settings, base_checkpoint, device, progress, checkpoint)


def start_grpo_run(base_checkpoint: str | Path, settings: dict | None = None, *, reward: str = "exact",
                   device: str | None = None, out_dir=None, progress: bool = True) -> Trainer:
    """A new GRPO run from the GPT in ``base_checkpoint`` with ``reward`` ("exact", or the hackable
    "format"); ``settings`` may hold ``group_size``, ``beta``, ``loss_type``, ``scale_rewards``..."""
    return align.start_align_run("grpo", base_checkpoint, settings, reward=reward, device=_one_process("grpo", device),
                                 out_dir=out_dir, progress=progress)


def resume_grpo_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None, device: str | None = None,
                    progress: bool = True, checkpoint: dict | None = None) -> Trainer:
    """The GRPO run saved in ``path``, continued bit for bit (its sampling generator is in the checkpoint)."""
    return _resume_align("grpo", path, settings, base_checkpoint, device, progress, checkpoint)


def _one_process(method: str, device: str | None) -> str:
    """The device a DPO or GRPO run trains on: one process (its rollouts and pairs are not shared
    out among torchrun's processes)."""
    if distributed.launched_world_size() > 1:
        raise ValueError(f"{method} runs in one process: start it with `python -m course_lib {method}`, not torchrun")
    return check_device(device)


def _resume_align(method: str, path, settings, base_checkpoint, device, progress, checkpoint) -> Trainer:
    device = _one_process(method, device)
    path = Path(path)
    ckpt = checkpoint if checkpoint is not None else load_checkpoint(path)
    check_made_by(ckpt, path, method)
    stored_config(path, ckpt)  # a checkpoint with no training run is refused here, by name
    return align.resume_align_run(method, path, ckpt, settings, base_checkpoint=base_checkpoint, device=device,
                                  progress=progress)


# --- chapter 17's chat fine-tune: python -m course_lib chat-sft ---------------------------------------


def _chat_trainer(model, tokenizer, config: TrainConfig, device: str, trained_on: dict, **options) -> Trainer:
    batch_fn = chat_batch_fn(tokenizer, config.batch_size, model.config.block_size, device)
    if options.get("resume_from") is not None:
        trainer = Trainer.resume(options.pop("resume_from"), model, batch_fn=batch_fn, device=device, config=config,
                                 tokenizer=tokenizer, **options)
    else:
        trainer = Trainer(model, config=config, batch_fn=batch_fn, device=device, tokenizer=tokenizer, **options)
    trainer.trained_on = trained_on
    return trainer


def start_chat_sft_run(base_checkpoint: str | Path, settings: dict | None = None, *, from_scratch: bool = False,
                       device: str | None = None, out_dir=None, progress: bool = True) -> Trainer:
    """A new chat fine-tune of the GPT in ``base_checkpoint`` on the shipped conversations: its
    tokenizer gets the conversations' characters and the chat template's special tokens, its
    model as many new rows (``extend_vocabulary``), and every weight trains, on the assistant's
    tokens only. ``from_scratch``: the control, a fresh GPT of the same shape and vocabulary."""
    config = apply_overrides(chat_sft_config(), settings or {}, SHAPE_KEPT)
    device = training_device(check_device(device), config)
    base, ckpt = load_model(base_checkpoint)
    if type(base) is not GPT:
        raise ValueError(f"{base_checkpoint} holds a {ckpt['model_kind']!r} model: fine-tune a GPT checkpoint "
                         "written by `python -m course_lib train`")
    tokenizer = chat_tokenizer(load_tokenizer(ckpt, base_checkpoint), EXTRA_CHARS)
    seed_everything(config.seed)  # a fresh model's weights (the control): the run's first random numbers
    n_new = tokenizer.vocab_size - base.config.vocab_size
    model = (GPT(replace(base.config, vocab_size=tokenizer.vocab_size)) if from_scratch
             else extend_vocabulary(base, n_new))
    path = Path(base_checkpoint).resolve()
    trained_on = {"command": "chat-sft", "base_checkpoint": str(path), "base_sha256": file_sha256(path),
                  "from_scratch": from_scratch, "data_sha256": CHAT_SHA256}
    return _chat_trainer(model, tokenizer, config, device, trained_on, out_dir=out_dir, progress=progress)


def _check_same_start(path: Path, trained_on: dict, base_checkpoint, from_scratch) -> None:
    """A resumed chat fine-tune keeps how it started: ``base_checkpoint`` and ``from_scratch``,
    when given, must be the recorded ones (the base by its path or its SHA-256: a moved copy is
    the same base). The model is in the checkpoint; a differing option would be silently ignored."""
    if from_scratch is not None and bool(from_scratch) != bool(trained_on.get("from_scratch")):
        option, started = (("--from-scratch", "from the pretrained model") if from_scratch else
                           ("from_scratch=False", "from scratch (the control)"))
        raise ValueError(f"{option}: {path} is a chat fine-tune {started}, and a resumed run keeps how it started; "
                         f"leave {option} out to continue it, or start a new run in another --out")
    if base_checkpoint is None or "base_sha256" not in trained_on:
        return
    given = Path(base_checkpoint).resolve()
    if str(given) == trained_on.get("base_checkpoint") or (given.is_file() and
                                                           file_sha256(given) == trained_on["base_sha256"]):
        return
    raise ValueError(f"--checkpoint {base_checkpoint}: {path} fine-tunes {trained_on.get('base_checkpoint')} "
                     f"(SHA-256 {trained_on['base_sha256'][:12]}...), and "
                     f"{'that is another file' if given.is_file() else 'no such file exists'}; a resumed run keeps "
                     "its base: leave --checkpoint out to continue it, or start a new run in another --out")


def resume_chat_sft_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None,
                        from_scratch: bool | None = None, device: str | None = None, progress: bool = True,
                        checkpoint: dict | None = None) -> Trainer:
    """The chat fine-tune saved in ``path``, continued on the same conversations; ``base_checkpoint``
    and ``from_scratch``, if given, must be how it started, and ``settings`` change only
    ``runs.RESUMABLE_SETTINGS``."""
    path = Path(path)
    ckpt = checkpoint if checkpoint is not None else load_checkpoint(path)
    check_made_by(ckpt, path, "chat-sft")
    trained_on = ckpt["trained_on"] or {}
    if trained_on.get("data_sha256") != CHAT_SHA256:
        raise ValueError(f"{path} was fine-tuned on other conversations than this course_lib ships (SHA-256 "
                         f"{str(trained_on.get('data_sha256'))[:12]}...): start a new run in another --out")
    _check_same_start(path, trained_on, base_checkpoint, from_scratch)
    config = resumed_config(path, ckpt, settings, SHAPE_KEPT)
    device = training_device(check_device(device), config)
    model, tokenizer = build_model(ckpt, path), load_tokenizer(ckpt, path)
    return _chat_trainer(model, tokenizer, config, device, trained_on, resume_from=path, checkpoint=ckpt,
                         progress=progress)
