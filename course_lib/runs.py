"""Building a run, in one place: every kind of run the course trains, new or continued from its
checkpoint (read once), with the device resolved once and the preset looked up once. The
command line (``python -m course_lib train / train-dates / finetune``), the benchmarks, the
tests and the chapters build their runs here::

    run = start_run("shakespeare-char-cpu", settings={"n_layer": 6}, out_dir="runs/mine")
    run.trainer.train()
    run = resume_run("runs/mine/ckpt.pt", settings={"max_iters": 4000})  # continues bit for bit
    trainer = start_dates_run("runs/dates")                              # chapter 11's encoder-decoder
    trainer = start_finetune_run("runs/mine/ckpt.pt", lora_rank=8, out_dir="runs/ft")  # chapter 15
    trainer = start_chat_sft_run("runs/mine/ckpt.pt", out_dir="runs/chat")            # chapter 17

``settings`` are the command line's ``--set KEY=VALUE`` as a dict: model and training fields
together, values as text (parsed like ``--set`` parses them) or as Python values, checked by
the config classes' rules. A new run draws its model's initial weights right after seeding
with the run's seed, so the same preset, settings and data give the same run wherever it is
built. A checkpoint records what made it (``trained_on``: the command, and the preset, the
text's name and SHA-256, or the fine-tune's task and base), and a resume by another command or
on other data is refused, naming both. A new kind of run is one ``start_...``/``resume_...``
pair here and one command in :mod:`course_lib.cli` (CONTRIBUTING.md, "Add a kind of run").
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch

from . import distributed
from .checkpoint import CheckpointError, build_model, load_checkpoint, load_model, load_tokenizer
from .config import apply_overrides, apply_resume_overrides, split_settings
from .data import load_text, read_text_file, train_val_split
from .dates import DATES_MODEL, date_batch_fn, date_tokenizer, dates_train_config
from .finetune import TASKS, answer_batch_fn, finetune_config, task_tokenizer
from .lora import DEFAULT_TARGETS
from .lora_gpt import fine_tune_model, file_sha256
from .model import GPT, GPTConfig
from .presets import Preset, get_preset
from .run_folder import check_made_by
from .seq2seq import Seq2Seq
from .speed import check_precision
from .tokenizers import train_tokenizer
from .train import TrainConfig, Trainer
from .utils import check_device, seed_everything

DEFAULT_PRESET = "shakespeare-char-cpu"


@dataclass
class Run:
    """A run ready to train: its Trainer, and the text and token splits it learns from."""
    trainer: Trainer
    text: str
    train_data: torch.Tensor  # (N_train,) token ids, the first 90%
    val_data: torch.Tensor  # (N_val,) the last 10%

    @property
    def tokenizer(self):
        return self.trainer.tokenizer


# --- what every kind of run shares ----------------------------------------------------------------


def training_device(device: str, config: TrainConfig) -> str:
    """The device this process trains on (``device`` already resolved), once it is known that the
    run can train there: the precision, and under torchrun the micro-batches shared out among the
    processes, whose process group this then joins (gloo on CPU, nccl on GPUs)."""
    check_precision(torch.device(device), config.dtype)
    distributed.local_micro_batches(config.grad_accum_steps, distributed.launched_world_size())
    return distributed.setup(device)


# The training settings a resumed run may change (--resume --set KEY=VALUE): how long it runs (max_iters,
# and lr_decay_iters, the schedule's length, which follows it), when it evaluates and saves, and how it
# computes on this machine (dtype, compile: a run moved to a CPU cannot keep fp16). Every other setting
# fixes what the run is (its seed: the data split and batches; its batch size, optimizer and schedule):
# given on a resume, it must be the stored value (course_lib.config.apply_resume_overrides).
RESUMABLE_SETTINGS = ("max_iters", "lr_decay_iters", "eval_interval", "checkpoint_interval", "dtype", "compile")


def resumed_config(path: Path, ckpt: dict, settings: dict | None, forbidden: dict[str, str] | None = None):
    """The training settings checkpoint ``path`` stores, with a resume's ``settings`` applied: only
    ``RESUMABLE_SETTINGS`` may change, any other key must carry the stored value."""
    return apply_resume_overrides(stored_config(path, ckpt), settings or {}, RESUMABLE_SETTINGS, path,
                                  f"every training setting but {', '.join(RESUMABLE_SETTINGS)}", forbidden)


def stored_config(path: Path, ckpt: dict) -> TrainConfig:
    """The training settings a checkpoint stores; a stored value this course_lib refuses is named
    as the checkpoint's, not the command's."""
    if not ckpt.get("train_config"):
        raise CheckpointError(f"{path} stores a model but no training run to resume")
    try:
        return TrainConfig.from_dict(ckpt["train_config"])
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{path} stores training settings this course_lib refuses ({e}): the value comes from "
                              "the checkpoint, not from your command; start a new run in another --out") from None


# --- GPT pretraining: python -m course_lib train ---------------------------------------------------


def trainable_preset(name: str) -> Preset:
    """The preset ``name``, if it has training settings (``gpt2-small`` is for counting only)."""
    preset = get_preset(name)
    if preset.train is None:
        raise ValueError(f"preset {name!r} is for counting parameters only (try `params --preset {name}`); "
                         "train shakespeare-char-cpu or shakespeare-char-gpu")
    return preset


def check_preset_device(name: str, preset: Preset, device: str) -> None:
    """Refuse, in one line, a preset made for another kind of device (the GPU speedrun on a CPU)."""
    if preset.device is not None and torch.device(device).type != preset.device:
        raise ValueError(f"preset {name!r} is made for a {preset.device} device ({preset.description}), "
                         f"and this run is on {device}: on a CPU train shakespeare-char-speedrun instead")


def read_run_text(preset_name: str, preset: Preset, text_file: str | None = None) -> tuple[str, dict]:
    """The text a run learns from (``text_file``, "-" for standard input, or the preset's corpus)
    and what its checkpoints record of it: ``{"command", "preset", "text", "text_sha256"}``."""
    text = read_text_file(text_file) if text_file else load_text(preset.corpus)
    trained_on = {"command": "train", "preset": preset_name, "text": text_file and Path(text_file).name,
                  "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    return text, trained_on


def split_tokens(tokenizer, text: str, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``text`` as token ids, split 90% train / 10% validation; a text whose validation part
    holds no window of ``block_size`` tokens plus the next one is refused."""
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_data, val_data = train_val_split(data)
    need = block_size + 1
    if len(val_data) < need:
        raise ValueError(f"the text is too short: {len(data):,} tokens split 90/10 leave {len(val_data):,} for "
                         f"validation, fewer than one window plus one ({need}); use a longer text or a smaller "
                         f"--set block_size=...")
    return train_data, val_data


def describe_data(trained_on: dict) -> str:
    if trained_on.get("text") is None:
        return f"preset {trained_on['preset']}'s corpus"
    return f"the text {trained_on['text']} (SHA-256 {trained_on['text_sha256'][:12]}...)"


def check_same_data(ckpt_path: Path, saved: dict | None, now: dict) -> None:
    """Refuse to resume a run on other data than it was trained on, naming both."""
    if saved is None:  # a checkpoint of format version 2 does not say
        return
    if saved["preset"] != now["preset"]:
        raise ValueError(f"{ckpt_path} was trained with --preset {saved['preset']}, not {now['preset']}: resume it "
                         f"with --preset {saved['preset']}, or start a new run in another --out")
    if saved.get("text_sha256") != now["text_sha256"]:
        hint = f"pass --text {saved['text']}" if saved.get("text") else "leave --text out"
        raise ValueError(f"{ckpt_path} was trained on {describe_data(saved)}, not on {describe_data(now)}: "
                         f"{hint} to resume it, or start a new run in another --out")


def _configs(preset: Preset, model_set: dict, train_set: dict, vocab_size: int | None):
    """The preset's model and training configs with the settings applied; the model's vocabulary
    is ``vocab_size`` (the tokenizer's) when given, and may then not be set."""
    model_config, forbidden = preset.model, None
    if vocab_size is not None:
        model_config = replace(model_config, vocab_size=vocab_size)
        forbidden = {"vocab_size": "it is the tokenizer's vocabulary size"}
    model_config = apply_overrides(model_config, model_set, forbidden)
    train_config = apply_overrides(preset.train, train_set)
    GPT.check_fits(model_config, train_config.batch_size)  # the user's sizes: one line before any allocation
    return model_config, train_config


def make_trainer(preset: str | Preset, train_data: torch.Tensor, val_data: torch.Tensor, settings: dict | None = None,
                 *, tokenizer=None, device: str | None = None, out_dir=None, progress: bool = True,
                 verbose: bool = True) -> Trainer:
    """A new run of a preset's GPT and training settings, with ``settings`` applied, on token ids
    you have already split (1-D tensors). With a ``tokenizer`` the model's vocabulary is the
    tokenizer's (and its checkpoints store it). ``device`` None: the best this machine has."""
    preset = trainable_preset(preset) if isinstance(preset, str) else preset
    model_set, train_set = split_settings(settings or {}, preset.model, preset.train)
    model_config, train_config = _configs(preset, model_set, train_set, tokenizer and tokenizer.vocab_size)
    device = training_device(check_device(device), train_config)
    seed_everything(train_config.seed)  # then the model's initial weights: the run's first random numbers
    return Trainer(GPT(model_config), train_data, val_data, train_config, device=device, tokenizer=tokenizer,
                   out_dir=out_dir, progress=progress, verbose=verbose)


def start_run(preset: str | None = None, text_file: str | None = None, settings: dict | None = None, *,
              device: str | None = None, out_dir=None, progress: bool = True, verbose: bool = True) -> Run:
    """What ``python -m course_lib train`` starts: the preset's tokenizer trained on its corpus
    (or on ``text_file``), the text split 90/10, the preset's GPT with ``settings`` applied."""
    preset_name = preset or DEFAULT_PRESET
    chosen, device = trainable_preset(preset_name), check_device(device)
    check_preset_device(preset_name, chosen, device)
    text, trained_on = read_run_text(preset_name, chosen, text_file)
    model_set, train_set = split_settings(settings or {}, chosen.model, chosen.train)  # before the tokenizer trains
    tokenizer = train_tokenizer(chosen.tokenizer, text)
    model_config, train_config = _configs(chosen, model_set, train_set, tokenizer.vocab_size)
    train_data, val_data = split_tokens(tokenizer, text, model_config.block_size)
    device = training_device(device, train_config)
    seed_everything(train_config.seed)  # then the model's initial weights: the run's first random numbers
    trainer = Trainer(GPT(model_config), train_data, val_data, train_config, device=device, tokenizer=tokenizer,
                      out_dir=out_dir, progress=progress, verbose=verbose)
    trainer.trained_on = trained_on
    return Run(trainer, text, train_data, val_data)


def resume_run(path: str | Path, settings: dict | None = None, *, preset: str | None = None,
               text_file: str | None = None, device: str | None = None, progress: bool = True,
               verbose: bool = True, checkpoint: dict | None = None) -> Run:
    """The run saved in ``path`` (a checkpoint written by ``train``), continued: the checkpoint is
    read once (``checkpoint``: already read by the caller); the run keeps its model and tokenizer,
    ``settings`` may change the training settings of ``RESUMABLE_SETTINGS`` (a larger
    ``max_iters`` extends a finished run; any other only as stored), and the data must be what it
    learned from."""
    path = Path(path)
    ckpt = checkpoint if checkpoint is not None else load_checkpoint(path)
    check_made_by(ckpt, path, "train")
    preset_name = preset or (ckpt["trained_on"] or {}).get("preset") or DEFAULT_PRESET
    chosen, device = trainable_preset(preset_name), check_device(device)
    check_preset_device(preset_name, chosen, device)
    text, trained_on = read_run_text(preset_name, chosen, text_file)
    check_same_data(path, ckpt["trained_on"], trained_on)
    model_set, train_set = split_settings(settings or {}, chosen.model, chosen.train)
    model_config = type(chosen.model).from_dict(ckpt["model_config"])
    apply_resume_overrides(model_config, model_set, (), path, "its model")  # given again: only as they are
    train_config = resumed_config(path, ckpt, train_set)
    tokenizer = load_tokenizer(ckpt, path)
    train_data, val_data = split_tokens(tokenizer, text, model_config.block_size)
    # the model built here (its sizes checked against the memory): Trainer.resume does not build it again
    device = training_device(device, train_config)
    trainer = Trainer.resume(path, build_model(ckpt, path), train_data, val_data, device=device, config=train_config,
                             tokenizer=tokenizer, progress=progress, verbose=verbose, checkpoint=ckpt)
    trainer.trained_on = trained_on
    return Run(trainer, text, train_data, val_data)


# --- chapter 11's encoder-decoder on dates: python -m course_lib train-dates ---------------------------

DATES_TRAINED_ON = {"command": "train-dates", "preset": None, "text": None, "text_sha256": None}


def start_dates_run(out_dir, max_iters: int | None = None, *, device: str | None = None,
                    progress: bool = True) -> Trainer:
    """Chapter 11's date normaliser, new: its model and training settings (``max_iters`` steps,
    default the chapter's), writing ``out_dir/ckpt.pt`` (tokenizer included)."""
    config = dates_train_config() if max_iters is None else dates_train_config(max_iters)
    device = training_device(check_device(device), config)
    tokenizer = date_tokenizer()
    seed_everything(config.seed)
    trainer = Trainer(Seq2Seq(DATES_MODEL), config=config, device=device, out_dir=out_dir,
                      tokenizer=tokenizer, batch_fn=date_batch_fn(tokenizer, config.batch_size, device=device),
                      progress=progress)
    trainer.trained_on = dict(DATES_TRAINED_ON)
    return trainer


def resume_dates_run(path: str | Path, max_iters: int | None = None, *, device: str | None = None,
                     progress: bool = True, checkpoint: dict | None = None) -> Trainer:
    """The date normaliser saved in ``path``, continued (``max_iters`` extends it)."""
    path = Path(path)
    ckpt = checkpoint if checkpoint is not None else load_checkpoint(path)
    check_made_by(ckpt, path, "train-dates")
    config = apply_overrides(stored_config(path, ckpt), {} if max_iters is None else {"max_iters": max_iters})
    device = training_device(check_device(device), config)
    tokenizer = date_tokenizer()
    trainer = Trainer.resume(path, batch_fn=date_batch_fn(tokenizer, config.batch_size, device=device), device=device,
                             config=config, progress=progress, checkpoint=ckpt)
    trainer.trained_on = dict(DATES_TRAINED_ON)
    return trainer


# --- chapter 15's fine-tuning, full or LoRA: python -m course_lib finetune --------------------------


# Fine-tuning keeps its base model's shape: only training settings may be set.
SHAPE_KEPT = {f.name: "fine-tuning keeps the pretrained model's shape; only training settings can be set"
              for f in fields(GPTConfig)}


def _finetune_config(task: str, settings: dict | None, lora: bool, path=None, ckpt=None) -> TrainConfig:
    """A fine-tune's training settings: fine-tuning's defaults (LoRA: a larger learning rate) with
    ``settings`` applied, or for a resumed run those checkpoint ``path`` (read as ``ckpt``) stores,
    which it keeps (:func:`resumed_config`); the model's shape may not be set."""
    if task not in TASKS:
        raise ValueError(f"unknown --task {task!r}; choose one of: {', '.join(TASKS)}")
    if ckpt is not None:
        return resumed_config(path, ckpt, settings, SHAPE_KEPT)
    return apply_overrides(finetune_config(lora=lora), settings or {}, SHAPE_KEPT)


def _finetune_trainer(model, tokenizer, config: TrainConfig, device: str, trained_on: dict, *, resume_from=None,
                      checkpoint=None, out_dir=None, progress: bool = True) -> Trainer:
    batch_fn = answer_batch_fn(tokenizer, config.batch_size, device=device)
    if resume_from is not None:
        trainer = Trainer.resume(resume_from, model, batch_fn=batch_fn, device=device, config=config,
                                 tokenizer=tokenizer, checkpoint=checkpoint, progress=progress)
    else:
        trainer = Trainer(model, config=config, batch_fn=batch_fn, device=device, out_dir=out_dir,
                          tokenizer=tokenizer, progress=progress)
    trainer.trained_on = trained_on
    return trainer


def check_lora_options(lora_rank, lora_alpha, lora_targets) -> None:
    """LoRA's alpha and targets apply to a LoRA fine-tune only, and must name something."""
    given = [o for o, v in (("--lora-alpha", lora_alpha), ("--lora-targets", lora_targets)) if v is not None]
    if lora_rank is None and given:
        raise ValueError(f"{' and '.join(given)} without --lora-rank: they set up LoRA adapters; add --lora-rank R "
                         "(e.g. 8) for a LoRA fine-tune, or leave them out for full fine-tuning")
    if lora_alpha is not None and not (math.isfinite(lora_alpha) and lora_alpha > 0):
        raise ValueError(f"--lora-alpha must be a finite number > 0 (the adapters' scale is alpha / rank), "
                         f"got {lora_alpha}")
    if lora_targets is not None and not [t for t in lora_targets if t.strip()]:
        raise ValueError(f"--lora-targets names no layer: give comma-separated layer names, e.g. "
                         f"{','.join(DEFAULT_TARGETS)} (the attention) or mlp.c_fc,mlp.c_proj")


def start_finetune_run(base_checkpoint: str | Path, settings: dict | None = None, *, task: str = "dates",
                       lora_rank: int | None = None, lora_alpha: float | None = None, lora_targets=None,
                       device: str | None = None, out_dir=None, progress: bool = True) -> Trainer:
    """A new fine-tune of the GPT in ``base_checkpoint`` on ``task``: in full (``lora_rank``
    None), or LoRA adapters of ``lora_rank`` (``lora_alpha`` default: the rank) on
    ``lora_targets`` (default: the attention projections); the tokenizer and the model's
    vocabulary grow by the task's characters."""
    check_lora_options(lora_rank, lora_alpha, lora_targets)
    config = _finetune_config(task, settings, lora_rank is not None)
    device = training_device(check_device(device), config)
    base, ckpt = load_model(base_checkpoint)
    if type(base) is not GPT:
        raise ValueError(f"{base_checkpoint} holds a {ckpt['model_kind']!r} model: fine-tune a GPT "
                         "checkpoint written by `python -m course_lib train`")
    base_tokenizer = load_tokenizer(ckpt, base_checkpoint)
    tokenizer = task_tokenizer(base_tokenizer, base.config.block_size, base_checkpoint)
    path = Path(base_checkpoint).resolve()
    targets = [t.strip() for t in lora_targets or DEFAULT_TARGETS if t.strip()]
    alpha = float(lora_rank or 1) if lora_alpha is None else lora_alpha
    seed_everything(config.seed)  # LoRA's A matrices: the run's first random numbers
    model = fine_tune_model(base, path, tokenizer, lora_rank, alpha, targets)
    trained_on = {"command": "finetune", "task": task, "base_checkpoint": str(path), "base_sha256": file_sha256(path)}
    return _finetune_trainer(model, tokenizer, config, device, trained_on, out_dir=out_dir, progress=progress)


def _check_same_lora(path: Path, ckpt: dict, lora_rank, lora_alpha, lora_targets) -> None:
    """Refuse LoRA options that differ from the saved run's (a resumed run keeps its model)."""
    saved = ckpt["model_config"] if ckpt["model_kind"] == "gpt-lora" else {}
    given = {"--lora-rank": (lora_rank, saved.get("rank")), "--lora-alpha": (lora_alpha, saved.get("alpha")),
             "--lora-targets": (lora_targets and ",".join(lora_targets), saved.get("targets"))}
    for option, (value, kept) in given.items():
        if value is not None and value != kept:
            how = (f"LoRA rank {saved['rank']}, alpha {saved['alpha']:g}, targets {saved['targets']}" if saved
                   else "full fine-tuning")
            raise ValueError(f"{option} {value}: {path} was fine-tuned with {how}; a resumed run keeps its model "
                             "(leave the option out, or start a new run in another --out)")


def _repoint_base(path: Path, ckpt: dict, base_checkpoint) -> None:
    """A LoRA run's base, given as ``base_checkpoint`` on resume: the recorded file, or the same
    bytes moved elsewhere (then the run points at the new path from here on)."""
    config = ckpt["model_config"]
    recorded, given = Path(config["base_checkpoint"]), Path(base_checkpoint).resolve()
    if given == recorded:
        return
    if given.is_file() and file_sha256(given) == config["base_sha256"]:  # the base, moved: same SHA-256
        config["base_checkpoint"] = str(given)
        return
    raise ValueError(f"{path} fine-tunes {recorded} (SHA-256 {config['base_sha256'][:12]}...), and --checkpoint "
                     f"{base_checkpoint} is another file: give that base (or its copy) as --checkpoint, or leave "
                     "--checkpoint out")


def resume_finetune_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None, task: str = "dates",
                        lora_rank: int | None = None, lora_alpha: float | None = None, lora_targets=None,
                        device: str | None = None, progress: bool = True, checkpoint: dict | None = None) -> Trainer:
    """The fine-tune saved in ``path``, continued; LoRA options, if given, must be the run's, and
    ``base_checkpoint`` (a LoRA run's base) the recorded file or a copy with its SHA-256."""
    path = Path(path)
    ckpt = checkpoint if checkpoint is not None else load_checkpoint(path)
    check_made_by(ckpt, path, "finetune")
    config = _finetune_config(task, settings, ckpt["model_kind"] == "gpt-lora", path, ckpt)
    device = training_device(check_device(device), config)
    check_lora_options(ckpt["model_config"].get("rank") if ckpt["model_kind"] == "gpt-lora" else lora_rank,
                       lora_alpha, lora_targets)
    _check_same_lora(path, ckpt, lora_rank, lora_alpha, lora_targets)
    trained_on = ckpt["trained_on"] or {"command": "finetune", "task": task}
    if ckpt["model_kind"] == "gpt-lora" and base_checkpoint:
        _repoint_base(path, ckpt, base_checkpoint)
        trained_on = {**trained_on, "base_checkpoint": ckpt["model_config"]["base_checkpoint"]}
    model, tokenizer = build_model(ckpt, path), load_tokenizer(ckpt, path)  # a LoRA model checks its base here
    return _finetune_trainer(model, tokenizer, config, device, trained_on, resume_from=path, checkpoint=ckpt,
                             progress=progress)
