"""GPT pretraining (``python -m course_lib train``) and chapter 11's encoder-decoder on dates
(``train-dates``), as kinds of run (:mod:`course_lib.runs.kind`)::

    run = start_run("shakespeare-char-cpu", settings={"n_layer": 6}, out_dir="runs/mine")
    run.trainer.train()
    run = resume_run("runs/mine/ckpt.pt", settings={"max_iters": 4000})  # continues bit for bit
    trainer = start_dates_run("runs/dates")  # chapter 11's encoder-decoder

A new run draws its model's initial weights right after seeding with the run's seed, so the same
preset, settings and data give the same run wherever it is built. A checkpoint records what made
it (``trained_on``: the command, the preset, the text's name and SHA-256), and a resume on other
data is refused, naming both.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .. import distributed
from .._signals import pause_point
from ..checkpoint import build_model, load_tokenizer
from ..config import apply_overrides, apply_resume_overrides, split_settings
from ..data import load_text, read_text_file, train_val_split
from ..dates import DATES_MODEL, date_batch_fn, date_tokenizer, dates_train_config
from ..generate import generate_text
from ..presets import Preset, get_preset
from ..registry import class_for_config
from ..seq2seq import Seq2Seq
from ..tokenizers import train_tokenizer
from ..train import Trainer
from ..utils import check_device, seed_everything
from .kind import Plan, RunKind, register_kind, resume, resumed_config, start, training_device

DEFAULT_PRESET = "shakespeare-char-cpu"


@dataclass
class Run:
    """A GPT pretraining run ready to train: its Trainer and the token splits it learns from."""
    trainer: Trainer

    @property
    def tokenizer(self):
        return self.trainer.tokenizer

    @property
    def train_data(self) -> torch.Tensor:
        return self.trainer.data["train"]  # (N_train,) token ids, the first 90%

    @property
    def val_data(self) -> torch.Tensor:
        return self.trainer.data["val"]  # (N_val,) the last 10%

    @property
    def text(self) -> str:
        return self.tokenizer.decode(torch.cat([self.train_data, self.val_data]).tolist())


# --- GPT pretraining: python -m course_lib train --------------------------------------------------


def trainable_preset(name: str) -> Preset:
    """The preset ``name``, if it has training settings (``gpt2-small`` is for counting only)."""
    preset = get_preset(name)
    if preset.train is None:
        raise ValueError(f"preset {name!r} is for counting parameters only (try `params --preset "
                         f"{name}`); train shakespeare-char-cpu or shakespeare-char-gpu")
    return preset


def check_preset_device(name: str, preset: Preset, device: str) -> None:
    """Refuse, in one line, a preset made for another kind of device (the GPU speedrun on a CPU)."""
    if preset.device is not None and torch.device(device).type != preset.device:
        raise ValueError(f"preset {name!r} is made for a {preset.device} device "
                         f"({preset.description}), and this run is on {device}: on a CPU train "
                         "shakespeare-char-speedrun instead")


def read_run_text(preset_name: str, preset: Preset, text_file: str
                  | None = None) -> tuple[str, dict]:
    """The text a run learns from (``text_file``, "-" for standard input, or the preset's corpus)
    and what its checkpoints record of it: ``{"command", "preset", "text", "text_sha256"}``."""
    text = read_text_file(text_file) if text_file else load_text(preset.corpus)
    trained_on = {"command": "train", "preset": preset_name,
                  "text": text_file and Path(text_file).name,
                  "text_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()}
    return text, trained_on


def split_tokens(tokenizer, text: str, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``text`` as token ids, split 90% train / 10% validation; a text whose validation part
    holds no window of ``block_size`` tokens plus the next one is refused."""
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    train_data, val_data = train_val_split(data)
    need = block_size + 1
    if len(val_data) < need:
        raise ValueError(f"the text is too short: {len(data):,} tokens split 90/10 leave "
                         f"{len(val_data):,} for validation, fewer than one window plus one "
                         f"({need}); use a longer text or a smaller --set block_size=...")
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
        raise ValueError(f"{ckpt_path} was trained with --preset {saved['preset']}, not "
                         f"{now['preset']}: resume it "
                         f"with --preset {saved['preset']}, or start a new run in another --out")
    if saved.get("text_sha256") != now["text_sha256"]:
        hint = f"pass --text {saved['text']}" if saved.get("text") else "leave --text out"
        raise ValueError(f"{ckpt_path} was trained on {describe_data(saved)}, not on "
                         f"{describe_data(now)}: {hint} to resume it, or start a new run in "
                         "another --out")


def _model_config(preset: Preset, model_set: dict, vocab_size: int | None, batch_size: int):
    """The preset's model config with the settings applied; the model's vocabulary is
    ``vocab_size`` (the tokenizer's) when given, and may then not be set. Its sizes are checked
    against the memory (with ``batch_size``) before anything is allocated."""
    model_config, forbidden = preset.model, None
    if vocab_size is not None:
        model_config = replace(model_config, vocab_size=vocab_size)
        forbidden = {"vocab_size": "it is the tokenizer's vocabulary size"}
    model_config = apply_overrides(model_config, model_set, forbidden)
    check_fits = getattr(class_for_config(model_config), "check_fits", None)
    if check_fits is not None:  # a GPT: the user's sizes refused in one line before any allocation
        check_fits(model_config, batch_size)
    return model_config


def make_trainer(preset: str | Preset, train_data: torch.Tensor, val_data: torch.Tensor,
                 settings: dict | None = None, *, tokenizer=None, device: str | None = None,
                 out_dir=None, progress: bool = True, verbose: bool = True) -> Trainer:
    """A new run of a preset's GPT and training settings, with ``settings`` applied, on token ids
    you have already split (1-D tensors). With a ``tokenizer`` the model's vocabulary is the
    tokenizer's (and its checkpoints store it). ``device`` None: the best this machine has."""
    preset = trainable_preset(preset) if isinstance(preset, str) else preset
    model_set, train_set = split_settings(settings or {}, preset.model, preset.train)
    train_config = apply_overrides(preset.train, train_set)
    model_config = _model_config(preset, model_set, tokenizer and tokenizer.vocab_size,
                                 train_config.batch_size)
    device = training_device(check_device(device), train_config)
    # then the model's initial weights: the run's first random numbers
    seed_everything(train_config.seed)
    model = class_for_config(model_config)(model_config)
    return Trainer(model, train_data, val_data, train_config, device=device, tokenizer=tokenizer,
                   out_dir=out_dir, progress=progress, verbose=verbose)


def _plan_train(settings: dict, options: dict, path=None, ckpt=None) -> Plan:
    """The preset (the option, else the checkpoint's, else the default) and the settings split into
    the model's and the training's; a resume keeps its model and every setting but the resumable."""
    name = (options.get("preset") or ((ckpt or {}).get("trained_on") or {}).get("preset")
            or DEFAULT_PRESET)
    preset = trainable_preset(name)
    # before the tokenizer trains
    model_set, train_set = split_settings(settings, preset.model, preset.train)
    if ckpt is None:
        return Plan(apply_overrides(preset.train, train_set),
                    dict(name=name, preset=preset, model_set=model_set))
    model_config = type(preset.model).from_dict(ckpt["model_config"])
    # given again: only as they are
    apply_resume_overrides(model_config, model_set, (), path, "its model")
    return Plan(resumed_config(path, ckpt, train_set),
                dict(name=name, preset=preset, model_config=model_config))


def _build_train(plan: Plan, *, device, out_dir, progress, verbose, preset=None,
                 text_file=None) -> Trainer:
    """The preset's tokenizer trained on its corpus (or on ``text_file``), the text split 90/10,
    the preset's GPT with the settings applied."""
    name, chosen = plan.extra["name"], plan.extra["preset"]
    check_preset_device(name, chosen, device)
    text, trained_on = read_run_text(name, chosen, text_file)
    tokenizer = train_tokenizer(chosen.tokenizer, text)
    model_config = _model_config(chosen, plan.extra["model_set"],
                                 tokenizer.vocab_size, plan.train.batch_size)
    train_data, val_data = split_tokens(tokenizer, text, model_config.block_size)
    # then the model's initial weights: the run's first random numbers
    seed_everything(plan.train.seed)
    # the preset's kind: GPT, or chapter 24's hybrid
    model = class_for_config(model_config)(model_config)
    return Trainer(model, train_data, val_data, plan.train, device=device, tokenizer=tokenizer,
                   out_dir=out_dir, progress=progress, verbose=verbose, trained_on=trained_on)


def _rebuild_train(plan: Plan, path: Path, ckpt: dict, *, device, progress, verbose, preset=None,
                   text_file=None) -> Trainer:
    """The run keeps its model and tokenizer, and the data must be what it learned from."""
    name, chosen = plan.extra["name"], plan.extra["preset"]
    check_preset_device(name, chosen, device)
    text, trained_on = read_run_text(name, chosen, text_file)
    check_same_data(path, ckpt["trained_on"], trained_on)
    tokenizer = load_tokenizer(ckpt, path)
    train_data, val_data = split_tokens(tokenizer, text, plan.extra["model_config"].block_size)
    return Trainer(build_model(ckpt, path), train_data, val_data, plan.train,
                   device=device, out_dir=path.parent, tokenizer=tokenizer,
                   progress=progress, verbose=verbose, trained_on=trained_on)


def _describe_train(trainer: Trainer) -> str:
    processes = f" x {distributed.world_size()} processes" if distributed.is_distributed() else ""
    tokenizer = trainer.tokenizer
    model = trainer.model
    count = (model.num_parameters() if hasattr(model, "num_parameters")
             else sum(p.numel() for p in model.parameters()))
    return (f"{_run_name(trainer.trained_on)}: {count:,} parameters, "
            f"{type(tokenizer).__name__} with {tokenizer.vocab_size} tokens, on "
            f"{trainer.device}{processes}; {trainer.config.max_iters} iterations, checkpoints in "
            f"{trainer.out_dir}")


def _run_name(trained_on: dict) -> str:
    text = trained_on.get("text")
    return ("stdin" if text == "-" else Path(text).stem) if text else trained_on["preset"]


def _report_train(trainer: Trainer):
    """The last validation loss, then 200 tokens sampled from the trained model."""
    yield f"val loss {trainer.history['val_loss'][-1]:.4f}; saved {trainer.checkpoint_path}"
    tokenizer = trainer.tokenizer
    first = tokenizer.decode(trainer.data["train"][:1].tolist())
    try:  # a newline starts a passage, if the text has one
        prompt = "\n" if tokenizer.decode(tokenizer.encode("\n")) == "\n" else first
    except (KeyError, ValueError):
        prompt = first
    pause_point("final-sample")
    yield generate_text(trainer.model, tokenizer, prompt, 200, seed=trainer.config.seed)


def _example_train(folder: Path) -> tuple[dict, dict]:
    text = folder / "text.txt"
    text.write_text("To be, or not to be, that is the question:\n" * 60, encoding="utf-8")
    settings = dict(n_layer=1, n_head=2, n_embd=16, block_size=16, batch_size=4, max_iters=4,
                    eval_interval=2, eval_iters=1)
    return settings, {"text_file": str(text)}


TRAIN = register_kind(RunKind(
    command="train", plan=_plan_train, build=_build_train, rebuild=_rebuild_train,
    describe=_describe_train,
    report=_report_train, example=_example_train, options=("preset", "text_file"),
    default_out=lambda options: f"runs/{_run_name(_text_record(options))}"))


def _text_record(options: dict) -> dict:
    return {"text": options.get("text_file"), "preset": options.get("preset") or DEFAULT_PRESET}


def start_run(preset: str | None = None, text_file: str | None = None,
              settings: dict | None = None, *, device: str | None = None,
              out_dir=None, progress: bool = True, verbose: bool = True) -> Run:
    """What ``python -m course_lib train`` starts: the preset's tokenizer trained on its corpus
    (or on ``text_file``), the text split 90/10, the preset's GPT with ``settings`` applied."""
    return Run(start(TRAIN, settings, preset=preset, text_file=text_file, device=device,
                     out_dir=out_dir, progress=progress, verbose=verbose))


def resume_run(path: str | Path, settings: dict | None = None, *, preset: str | None = None,
               text_file: str | None = None, device: str | None = None, progress: bool = True,
               verbose: bool = True, checkpoint: dict | None = None) -> Run:
    """The run saved in ``path`` (a checkpoint written by ``train``), continued bit for bit."""
    return Run(resume(TRAIN, path, settings, preset=preset, text_file=text_file, device=device,
                      progress=progress, verbose=verbose, checkpoint=checkpoint))


# --- chapter 11's encoder-decoder on dates: python -m course_lib train-dates ----------------------

DATES_TRAINED_ON = {"command": "train-dates", "preset": None, "text": None, "text_sha256": None}


def _plan_dates(settings: dict, options: dict, path=None, ckpt=None) -> Plan:
    if ckpt is not None:
        return Plan(resumed_config(path, ckpt, settings))
    return Plan(apply_overrides(dates_train_config(), settings))


def _build_dates(plan: Plan, *, device, out_dir, progress, verbose) -> Trainer:
    tokenizer = date_tokenizer()
    seed_everything(plan.train.seed)
    return Trainer(Seq2Seq(DATES_MODEL), config=plan.train, device=device, out_dir=out_dir,
                   tokenizer=tokenizer,
                   batch_fn=date_batch_fn(tokenizer, plan.train.batch_size, device=device),
                   progress=progress, verbose=verbose, trained_on=dict(DATES_TRAINED_ON))


def _rebuild_dates(plan: Plan, path: Path, ckpt: dict, *, device, progress, verbose) -> Trainer:
    tokenizer = date_tokenizer()
    return Trainer(build_model(ckpt, path), config=plan.train, device=device, out_dir=path.parent,
                   tokenizer=tokenizer,
                   batch_fn=date_batch_fn(tokenizer, plan.train.batch_size, device=device),
                   progress=progress, verbose=verbose, trained_on=dict(DATES_TRAINED_ON))


TRAIN_DATES = register_kind(RunKind(
    command="train-dates", plan=_plan_dates, build=_build_dates, rebuild=_rebuild_dates,
    describe=lambda t: (f"the date normaliser: {t.model.num_parameters():,} parameters on "
                        f"{t.device}; {t.config.max_iters} iterations, checkpoints in {t.out_dir}"),
    report=lambda t: iter([f"val loss {t.history['val_loss'][-1]:.4f}; saved {t.checkpoint_path}"]),
    example=lambda folder: ({"max_iters": 3, "eval_interval": 2, "eval_iters": 1, "batch_size": 8},
                            {}),
    default_out=lambda options: "runs/dates"))


def start_dates_run(out_dir, max_iters: int | None = None, *, device: str | None = None,
                    progress: bool = True, settings: dict | None = None) -> Trainer:
    """Chapter 11's date normaliser, new: its model and training settings (``max_iters`` steps,
    default the chapter's), writing ``out_dir/ckpt.pt`` (tokenizer included)."""
    settings = dict(settings or {}) | ({} if max_iters is None else {"max_iters": max_iters})
    return start(TRAIN_DATES, settings, device=device, out_dir=out_dir, progress=progress)


def resume_dates_run(path: str | Path, max_iters: int | None = None, *, device: str | None = None,
                     progress: bool = True, checkpoint: dict | None = None) -> Trainer:
    """The date normaliser saved in ``path``, continued (``max_iters`` extends it)."""
    return resume(TRAIN_DATES, path, {} if max_iters is None else {"max_iters": max_iters},
                  device=device, progress=progress, checkpoint=checkpoint)
