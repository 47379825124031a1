"""Building a run, in one place: a preset (or your own text) plus settings -> tokenizer -> split
-> model -> a ready :class:`~course_lib.train.Trainer`; and a checkpoint, read once, -> the
Trainer that continues it. The command line (``python -m course_lib train``), the benchmarks,
the tests and the chapters build their runs here::

    run = start_run("shakespeare-char-cpu", settings={"n_layer": 6}, out_dir="runs/mine")
    run.trainer.train()
    run = resume_run("runs/mine/ckpt.pt", settings={"max_iters": 4000})  # continues bit for bit
    run.trainer.train()

``settings`` are the command line's ``--set KEY=VALUE`` as a dict: model and training fields
together, values as text (parsed like ``--set`` parses them) or as Python values, checked by
the config classes' rules. A new run draws its model's initial weights right after seeding
with the run's seed, so the same preset, settings and data give the same run wherever it is
built. A checkpoint records what its run learned from (``trained_on``: the preset, the text's
name and SHA-256), and a resume on other data is refused, naming both.
"""
from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, fields, replace
from pathlib import Path

import torch

from . import distributed
from .checkpoint import CheckpointError, load_checkpoint, load_tokenizer
from .data import load_text, read_text_file, train_val_split
from .model import GPT
from .presets import Preset, get_preset
from .speed import check_precision
from .tokenizers import train_tokenizer
from .train import TrainConfig, Trainer
from .config import apply_overrides, split_settings
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


# --- settings: --set KEY=VALUE -------------------------------------------------------------------


def resume_command(argv: list[str]) -> str:
    """The command that continues the run ``argv`` started: the same arguments plus ``--resume``."""
    args = [a for a in argv if a != "--resume"] + ["--resume"]
    return "python -m course_lib " + " ".join(shlex.quote(a) for a in args)


# --- what a run learns from ---------------------------------------------------------------------


def trainable_preset(name: str) -> Preset:
    """The preset ``name``, if it has training settings (``gpt2-small`` is for counting only)."""
    preset = get_preset(name)
    if preset.train is None:
        raise ValueError(f"preset {name!r} is for counting parameters only (try `params --preset {name}`); "
                         "train shakespeare-char-cpu or shakespeare-char-gpu")
    return preset


def check_preset_device(name: str, preset: Preset, device: str | None) -> None:
    """Refuse, in one line, a preset made for another kind of device (the GPU speedrun on a CPU)."""
    if preset.device is None:
        return
    device = check_device(device)
    if torch.device(device).type != preset.device:
        raise ValueError(f"preset {name!r} is made for a {preset.device} device ({preset.description}), "
                         f"and this run is on {device}: on a CPU train shakespeare-char-speedrun instead")


def read_run_text(preset_name: str, text_file: str | None = None) -> tuple[str, dict]:
    """The text a run learns from (``text_file``, "-" for standard input, or the preset's corpus)
    and what its checkpoints record of it: ``{"command", "preset", "text", "text_sha256"}``."""
    text = read_text_file(text_file) if text_file else load_text(get_preset(preset_name).corpus)
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


def check_made_by(ckpt: dict, ckpt_path: Path, command: str) -> None:
    """A ValueError unless ``command`` ("train", "train-dates") made the checkpoint, naming the
    command that resumes it."""
    saved = ckpt["trained_on"] or {}
    made_by = saved.get("command") or ("train-dates" if ckpt["model_kind"] == "seq2seq" else "train")
    if made_by != command:
        text = f" --text {shlex.quote(saved['text'])}" if saved.get("text") else ""
        raise ValueError(f"{ckpt_path} was made by `{made_by}`, not `{command}`: resume it with "
                         f"`python -m course_lib {made_by}{text} --out {ckpt_path.parent} --resume`")


# --- new runs ------------------------------------------------------------------------------------


def _configs(preset: Preset, model_set: dict, train_set: dict, vocab_size: int | None):
    """The preset's model and training configs with the settings applied; the model's vocabulary
    is ``vocab_size`` (the tokenizer's) when given, and may then not be set."""
    model_config, forbidden = preset.model, None
    if vocab_size is not None:
        model_config = replace(model_config, vocab_size=vocab_size)
        forbidden = {"vocab_size": "it is the tokenizer's vocabulary size"}
    return apply_overrides(model_config, model_set, forbidden), apply_overrides(preset.train, train_set)


def _training_device(device: str | None, config: TrainConfig) -> str:
    """The device this process trains on, once it is known that the run can train there: the
    precision, and under torchrun the micro-batches shared out among the processes, whose
    process group this then joins (gloo on CPU, nccl on GPUs)."""
    device = check_device(device)
    check_precision(torch.device(device), config.dtype)
    distributed.local_micro_batches(config.grad_accum_steps, distributed.launched_world_size())
    return distributed.setup(device)


def _new_trainer(model_config, train_config: TrainConfig, train_data, val_data, tokenizer, device, **options):
    device = _training_device(device, train_config)
    seed_everything(train_config.seed)  # then the model's initial weights: the run's first random numbers
    return Trainer(GPT(model_config), train_data, val_data, train_config, device=device, tokenizer=tokenizer,
                   **options)


def make_trainer(preset: str | Preset, train_data: torch.Tensor, val_data: torch.Tensor, settings: dict | None = None,
                 *, tokenizer=None, device: str | None = None, out_dir=None, progress: bool = True,
                 verbose: bool = True) -> Trainer:
    """A new run of a preset's GPT and training settings, with ``settings`` applied, on token ids
    you have already split (1-D tensors). With a ``tokenizer`` the model's vocabulary is the
    tokenizer's (and its checkpoints store it). ``device`` None: the best this machine has."""
    preset = trainable_preset(preset) if isinstance(preset, str) else preset
    model_set, train_set = split_settings(settings or {}, preset.model, preset.train)
    model_config, train_config = _configs(preset, model_set, train_set, tokenizer and tokenizer.vocab_size)
    return _new_trainer(model_config, train_config, train_data, val_data, tokenizer, device, out_dir=out_dir,
                        progress=progress, verbose=verbose)


def start_run(preset: str | None = None, text_file: str | None = None, settings: dict | None = None, *,
              device: str | None = None, out_dir=None, progress: bool = True, verbose: bool = True) -> Run:
    """What ``python -m course_lib train`` starts: the preset's tokenizer trained on its corpus
    (or on ``text_file``), the text split 90/10, the preset's GPT with ``settings`` applied."""
    preset_name = preset or DEFAULT_PRESET
    chosen = trainable_preset(preset_name)
    check_preset_device(preset_name, chosen, device)
    text, trained_on = read_run_text(preset_name, text_file)
    model_set, train_set = split_settings(settings or {}, chosen.model, chosen.train)  # before the tokenizer trains
    tokenizer = train_tokenizer(chosen.tokenizer, text)
    model_config, train_config = _configs(chosen, model_set, train_set, tokenizer.vocab_size)
    train_data, val_data = split_tokens(tokenizer, text, model_config.block_size)
    trainer = _new_trainer(model_config, train_config, train_data, val_data, tokenizer, device, out_dir=out_dir,
                           progress=progress, verbose=verbose)
    trainer.trained_on = trained_on
    return Run(trainer, text, train_data, val_data)


# --- resumed runs --------------------------------------------------------------------------------


def resume_run(path: str | Path, settings: dict | None = None, *, preset: str | None = None,
               text_file: str | None = None, device: str | None = None, progress: bool = True,
               verbose: bool = True) -> Run:
    """The run saved in ``path`` (a checkpoint written by ``train``), continued: the checkpoint is
    read once; the run keeps its model and tokenizer, ``settings`` may change training settings
    (a larger ``max_iters`` extends a finished run), and the data must be what it learned from."""
    path = Path(path)
    ckpt = load_checkpoint(path)
    check_made_by(ckpt, path, "train")
    if not ckpt.get("train_config"):
        raise CheckpointError(f"{path} stores a model but no training run to resume")
    preset_name = preset or (ckpt["trained_on"] or {}).get("preset") or DEFAULT_PRESET
    chosen = trainable_preset(preset_name)
    check_preset_device(preset_name, chosen, device)
    text, trained_on = read_run_text(preset_name, text_file)
    check_same_data(path, ckpt["trained_on"], trained_on)
    model_set, train_set = split_settings(settings or {}, chosen.model, chosen.train)
    model_config = type(chosen.model).from_dict(ckpt["model_config"])
    changed = [k for k, v in model_set.items() if apply_overrides(model_config, {k: v}) != model_config]
    if changed:
        raise ValueError(f"--set {', '.join(changed)}: a resumed run keeps its model ({path}); "
                         "start a new run in another --out to change it")
    train_config = apply_overrides(TrainConfig.from_dict(ckpt["train_config"]), train_set)
    tokenizer = load_tokenizer(ckpt, path)
    train_data, val_data = split_tokens(tokenizer, text, model_config.block_size)
    device = _training_device(device, train_config)
    trainer = Trainer.resume(path, train_data=train_data, val_data=val_data, device=device, config=train_config,
                             tokenizer=tokenizer, progress=progress, verbose=verbose, checkpoint=ckpt)
    trainer.trained_on = trained_on
    return Run(trainer, text, train_data, val_data)
