"""Supervised fine-tuning of a pretrained GPT on a task (chapter 15): chapter 11's dates, recast
for a decoder-only model, a prompt-masked loss, exact match, and LoRA checkpoints.

A decoder-only model sees a task as one text to continue::

    prompt + SEP + answer + END        "3rd March 2021" "=" "2021-03-03" "\\n"

and generates the answer after the separator, stopping at the end token. The loss is computed
on the answer (and END) alone: the prompt's targets are set to ``IGNORE_INDEX``, so the model
is not trained to *write* dates in thirteen formats, only to answer.

**New characters.** The pretrained model knows the 65 characters of tiny Shakespeare, which
has no digits but 3 and no slash, and no "=". :func:`extend_vocabulary` appends them to the
tokenizer (old ids unchanged, so Shakespeare encodes as before) and adds rows for them to the
token embedding and the LM head, each set to the mean of the existing rows: a new token then
starts as an "average" token, and the model's distribution over the old tokens barely moves
(Hewitt 2021). In a LoRA fine-tune, those new rows train along with the adapters (peft's
``trainable_token_indices``); the old rows stay frozen.

Shapes: B batch, T time, C channels, V vocabulary size (V0 before the new characters).
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checkpoint import CheckpointError, load_checkpoint, unwrap
from .generate import generate_batch
from .lora import DEFAULT_TARGETS, add_lora, check_rank, lora_parameter_count
from .model import GPT, GPTConfig
from .dates import DATE_ALPHABET, date_split_days, date_test_set, sample_dates
from .registry import register_model
from .tokenizers import CharTokenizer
from .utils import IGNORE_INDEX

SEP, END = "=", "\n"  # the separator between prompt and answer, and the end of an answer
TASK_CHARS = DATE_ALPHABET + SEP + END  # every character a dates example can contain


# --- new characters for a pretrained model ----------------------------------------------------------


def extend_tokenizer(tokenizer, chars: str) -> CharTokenizer:
    """``tokenizer`` plus the characters of ``chars`` it lacks, appended in sorted order (the old
    ids keep their meaning)."""
    if not isinstance(tokenizer, CharTokenizer):
        raise ValueError(f"the dates task needs a character-level model, and this one uses a "
                         f"{type(tokenizer).__name__}: fine-tune a checkpoint trained with the char tokenizer")
    new = sorted(set(chars) - set(tokenizer.chars))
    return CharTokenizer(tokenizer.chars + new)


@torch.no_grad()
def extend_vocabulary(model: GPT, n_new: int) -> GPT:
    """A copy of ``model`` with ``n_new`` more tokens: the embedding (and an untied LM head) get
    ``n_new`` rows at the end, each the mean of the existing rows. All other weights are copied,
    so the model's logits over the old tokens are unchanged."""
    model = unwrap(model)
    V0 = model.config.vocab_size
    bigger = GPT(GPTConfig.from_dict({**model.config.to_dict(), "vocab_size": V0 + n_new}))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for name in ("wte.weight", "lm_head.weight"):
        old = state[name]  # (V0, C)
        state[name] = torch.cat([old, old.mean(0, keepdim=True).expand(n_new, -1)])  # (V0 + n, C)
    bigger.load_state_dict(state)  # with tied weights both names hold the same matrix: loaded twice, equal
    return bigger.to(model.wte.weight.device)


# --- the task as text: batches with a masked prompt, and exact match ----------------------------------


def encode_examples(tokenizer, pairs: list[tuple[str, str]], mask_prompt: bool = True, device="cpu"):
    """``(source, target)`` pairs -> inputs x (B, T) and targets y (B, T) for next-token training.

    Each row is ``source SEP target END`` shifted by one; rows are padded on the right (x with
    END, y with IGNORE_INDEX; a causal model never looks right, so the pads change nothing).
    With ``mask_prompt`` the targets inside the prompt (``source[1:] + SEP``) are IGNORE_INDEX
    too: the first target kept is the answer's first character, predicted at the SEP position.
    """
    rows = [(tokenizer.encode(s + SEP), tokenizer.encode(t + END)) for s, t in pairs]
    T = max(len(p) + len(a) for p, a in rows) - 1
    end = tokenizer.encode(END)[0]
    x = torch.full((len(rows), T), end, dtype=torch.long)
    y = torch.full((len(rows), T), IGNORE_INDEX, dtype=torch.long)
    for i, (prompt, answer) in enumerate(rows):
        ids = torch.tensor(prompt + answer)
        n = len(ids) - 1
        x[i, :n], y[i, :n] = ids[:-1], ids[1:]
        if mask_prompt:
            y[i, :len(prompt) - 1] = IGNORE_INDEX
    return x.to(device), y.to(device)


def dates_batch_fn(tokenizer, batch_size: int, mask_prompt: bool = True, seed: int = 0, device="cpu"):
    """A ``Trainer`` batch_fn: fresh random dates each call, "train" from the training days and
    "val" from the held-out days of chapter 11's split (``seq2seq.date_split_days``)."""
    days = date_split_days(seed)

    def batch_fn(split: str, generator: torch.Generator):
        return encode_examples(tokenizer, sample_dates(days[split], batch_size, generator), mask_prompt, device)

    return batch_fn


def answer_prompts(model, tokenizer, sources: list[str], max_new_tokens: int = 12) -> list[str]:
    """Greedy answers of ``model`` to ``sources`` (the text it writes after SEP, up to END)."""
    end = tokenizer.encode(END)[0]
    prompts = [tokenizer.encode(s + SEP) for s in sources]
    out = generate_batch(model, prompts, max_new_tokens, temperature=0.0, end_id=end, use_cache=True)
    return [tokenizer.decode(row[len(p):]).split(END)[0] for row, p in zip(out, prompts)]


def exact_match(model, tokenizer, pairs: list[tuple[str, str]], batch_size: int = 250) -> float:
    """Share of held-out ``(source, target)`` pairs answered exactly right with greedy decoding
    (chapter 11's metric, so the two models compare on the same pairs: ``date_test_set``)."""
    right = 0
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        got = answer_prompts(model, tokenizer, [s for s, _ in chunk])
        right += sum(g == t for g, (_, t) in zip(got, chunk))
    return right / max(1, len(pairs))


@torch.no_grad()
def text_loss(model, tokenizer, text: str, batches: int = 20, batch_size: int = 32, seed: int = 0) -> float:
    """Mean next-token loss of ``model`` on random windows of ``text`` (e.g. Shakespeare's
    validation split: how much a fine-tune forgot). The same windows for every model."""
    from .data import get_batch

    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    was_training = model.training
    model.eval()
    losses = [model(*get_batch(data, model.config.block_size, batch_size, generator, device))[1].item()
              for _ in range(batches)]
    model.train(was_training)
    return sum(losses) / len(losses)


# --- LoRA checkpoints: adapters and new rows only, with a reference to the base -------------------------


class GrownRows(nn.Module):
    """A (V, C) token matrix as frozen pretrained rows (V0, C) plus trainable new rows (V - V0, C):
    an embedding (``forward(idx)``: (B, T) -> (B, T, C)) or, with ``head=True``, an LM head
    (``forward(x)``: (B, T, C) -> (B, T, V))."""

    def __init__(self, weight: torch.Tensor, n_new: int, head: bool = False):
        super().__init__()
        V0 = weight.shape[0] - n_new
        self.frozen = nn.Parameter(weight[:V0].detach().clone(), requires_grad=False)
        self.new = nn.Parameter(weight[V0:].detach().clone())
        self.head = head

    @property
    def weight(self) -> torch.Tensor:  # (V, C)
        return torch.cat([self.frozen, self.new])

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        return F.linear(t, self.weight) if self.head else F.embedding(t, self.weight)


@dataclass
class LoRAGPTConfig(GPTConfig):
    """A GPT config (the fine-tuned model's, with the new tokens) plus the LoRA settings and
    the base checkpoint the adapters belong to, identified by its SHA-256."""
    base_checkpoint: str = ""
    base_sha256: str = ""
    base_vocab_size: int = 0
    rank: int = 8
    alpha: float = 8.0
    targets: str = ",".join(DEFAULT_TARGETS)  # comma-separated module names (see lora.add_lora)

    def __post_init__(self):
        super().__post_init__()
        check_rank(self.rank, self.alpha)
        if not 0 < self.base_vocab_size <= self.vocab_size:
            raise ValueError(f"base_vocab_size must be in [1, vocab_size={self.vocab_size}], got {self.base_vocab_size}")

    def gpt_config(self) -> GPTConfig:
        names = [f.name for f in fields(GPTConfig)]
        return GPTConfig(**{k: v for k, v in self.to_dict().items() if k in names})


def file_sha256(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load_base(config: LoRAGPTConfig) -> GPT:
    """The base GPT a LoRA checkpoint was trained from, checked against the checkpoint's record:
    the file must exist, have the recorded SHA-256, and hold a GPT of the same shape."""
    from .checkpoint import load_model

    path = Path(config.base_checkpoint)
    if not path.exists():
        raise CheckpointError(f"the base model of this LoRA checkpoint, {path}, is missing: a LoRA checkpoint holds "
                              "only the adapters; put the base checkpoint back at that path (or fine-tune again)")
    if file_sha256(path) != config.base_sha256:
        raise CheckpointError(f"the base model {path} is not the one this LoRA checkpoint was trained on (its SHA-256 "
                              "differs; was that run continued or replaced?): restore that file, or fine-tune again")
    base, _ = load_model(path)
    expected = GPTConfig.from_dict({**config.gpt_config().to_dict(), "vocab_size": config.base_vocab_size})
    if not isinstance(base, GPT) or type(base) is not GPT or base.config != expected:
        raise CheckpointError(f"the base model {path} is not a GPT of the shape this LoRA checkpoint expects")
    return base


@register_model("gpt-lora", LoRAGPTConfig)
class LoRAGPT(GPT):
    """A GPT made of a frozen base checkpoint, LoRA adapters and new token rows. Its
    ``state_dict()`` holds only what training changes (the adapters' A and B, the new rows);
    building it from its config loads and checks the base (:func:`load_base`)."""

    def __init__(self, config: LoRAGPTConfig):
        super().__init__(config)
        n_new = config.vocab_size - config.base_vocab_size
        grown = extend_vocabulary(load_base(config), n_new)
        nn.Module.load_state_dict(self, grown.state_dict())
        self.wte = GrownRows(self.wte.weight, n_new)
        self.lm_head = GrownRows(self.lm_head.weight, n_new, head=True)
        if config.tie_weights:  # one matrix reads and writes tokens, as in the base
            self.lm_head.frozen, self.lm_head.new = self.wte.frozen, self.wte.new
        add_lora(self, config.rank, config.alpha, targets=tuple(config.targets.split(",")))
        for rows in (self.wte, self.lm_head):
            rows.new.requires_grad_(True)

    @classmethod
    def from_base(cls, base_checkpoint: str | Path, tokenizer, rank: int = 8, alpha: float = 8.0,
                  targets=DEFAULT_TARGETS) -> "LoRAGPT":
        """Adapters of ``rank`` on the base checkpoint, its vocabulary grown to ``tokenizer``'s."""
        path = Path(base_checkpoint).resolve()
        ckpt = load_checkpoint(path)
        config = LoRAGPTConfig(**{**ckpt["model_config"], "vocab_size": tokenizer.vocab_size},
                               base_checkpoint=str(path), base_sha256=file_sha256(path),
                               base_vocab_size=ckpt["model_config"]["vocab_size"], rank=rank, alpha=alpha,
                               targets=",".join(targets))
        return cls(config)

    def trained_names(self) -> list[str]:
        return [n for n, p in self.named_parameters(remove_duplicate=False) if p.requires_grad]

    def state_dict(self, *args, destination=None, prefix: str = "", keep_vars: bool = False):
        full = nn.Module.state_dict(self, prefix=prefix, keep_vars=keep_vars)
        keep = {prefix + n for n in self.trained_names()}
        out = destination if destination is not None else {}
        out.update({k: v for k, v in full.items() if k in keep})
        return out

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        expected = set(self.trained_names())
        if set(state_dict) != expected:
            raise RuntimeError(f"a LoRA state dict holds {sorted(expected)[:4]}..., got {sorted(state_dict)[:4]}...")
        params = dict(self.named_parameters(remove_duplicate=False))
        with torch.no_grad():
            for name, value in state_dict.items():
                params[name].copy_(value)

    def trainable_count(self) -> int:
        """Adapters, by the formula r (in + out) per wrapped layer, plus the new token rows."""
        c = self.config
        base_shape = GPT(c.gpt_config())
        n_new = (c.vocab_size - c.base_vocab_size) * c.n_embd * (1 if c.tie_weights else 2)
        return lora_parameter_count(base_shape, c.rank, tuple(c.targets.split(","))) + n_new

    def merged(self) -> GPT:
        """A plain GPT with the adapters folded in (``W + (alpha / r) B A``) and the new rows in
        place: what ``sample`` and any GPT code can run, at the base model's speed."""
        from .lora import lora_layers

        gpt = GPT(self.config.gpt_config()).to(self.wte.frozen.device)
        state = {}
        for name, module in self.named_modules():
            for pname, p in module.named_parameters(recurse=False):
                state[f"{name}.{pname}" if name else pname] = p.detach()
        for name, layer in lora_layers(self).items():
            state.pop(f"{name}.lora_A"), state.pop(f"{name}.lora_B")
            state[f"{name}.weight"] = layer.base.weight.detach() + layer.delta_weight().detach()
            state[f"{name}.bias"] = layer.base.bias
            state = {k: v for k, v in state.items() if not k.startswith(f"{name}.base.")}
        for rows in ("wte", "lm_head"):
            state[f"{rows}.weight"] = getattr(self, rows).weight.detach()
            state.pop(f"{rows}.frozen"), state.pop(f"{rows}.new")
        gpt.load_state_dict({k: v for k, v in state.items() if v is not None})
        return gpt.eval()


def dates_test_pairs(n: int = 500) -> list[tuple[str, str]]:
    """Held-out pairs shared with chapter 11 (``seq2seq.date_test_set``)."""
    return date_test_set(n)


# --- the command line: python -m course_lib finetune ---------------------------------------------------

TASKS = ("dates",)
# Chapter 15's recipe; benchmarks/finetune_dates.py runs it with seeds and stores what it measures in
# course_lib/records/finetune_runs.json. LoRA takes a larger learning rate because an Adam step on B
# moves the weight only by about lr * (alpha / r) * |A|, with A small (Kaiming-uniform) at the start.
FINETUNE_TRAIN = dict(max_iters=600, batch_size=32, learning_rate=1e-3, min_lr=1e-4, warmup_iters=20,
                      weight_decay=0.0, grad_clip=1.0, eval_interval=100, eval_iters=4)
LORA_LEARNING_RATE = 1e-2


def finetune_config(lora: bool = False, **overrides):
    """The training settings of a fine-tuning run (LoRA: a larger learning rate), with ``overrides``."""
    from .train import TrainConfig

    defaults = {**FINETUNE_TRAIN, **({"learning_rate": LORA_LEARNING_RATE} if lora else {})}
    return TrainConfig(**{**defaults, **overrides})


def longest_example(tokenizer) -> int:
    """Tokens in the longest dates example (the 13 formats' longest sources, SEP, answer, END)."""
    import datetime

    from .dates import DATE_FORMATS, format_date
    day = datetime.date(2027, 9, 23)  # the longest month name and a two-digit ordinal
    return max(len(tokenizer.encode(format_date(day, s, c) + SEP + day.isoformat() + END))
               for s in range(len(DATE_FORMATS)) for c in range(3))


def cmd_finetune(args) -> int:
    """``python -m course_lib finetune``: the same checks, crash safety and ``--resume`` as ``train``."""
    from .checkpoint import CHECKPOINT_NAME, build_model, claim_folder, load_model, load_tokenizer
    from .runs import parse_settings
    from .speed import check_precision
    from .train import TrainConfig
    from .utils import apply_overrides, check_device, seed_everything

    if args.task not in TASKS:
        raise ValueError(f"unknown --task {args.task!r}; choose one of: {', '.join(TASKS)}")
    if args.lora_rank is not None:
        check_rank(args.lora_rank, args.lora_alpha if args.lora_alpha is not None else 1.0)
    device = check_device(args.device)
    model_set, train_set = parse_settings(args.set, GPTConfig(), finetune_config())
    if model_set:
        raise ValueError(f"--set {', '.join(model_set)}: fine-tuning keeps the pretrained model's shape; "
                         f"only training settings can be set ({', '.join(f.name for f in fields(TrainConfig))})")
    if args.max_iters is not None:
        train_set["max_iters"] = str(args.max_iters)
    out = Path(args.out)
    ckpt_path = out / CHECKPOINT_NAME
    resuming = ckpt_path.exists()
    if resuming and not args.resume:
        raise FileExistsError(f"{ckpt_path} already exists: pass --resume to continue that run, "
                              "or choose another --out so that it is not overwritten")
    if resuming:
        ckpt = load_checkpoint(ckpt_path)
        if ckpt.get("model_kind") not in ("gpt", "gpt-lora") or not ckpt.get("train_config"):
            raise CheckpointError(f"{ckpt_path} is not a fine-tuning run that can be resumed")
        saved_rank = ckpt["model_config"].get("rank") if ckpt["model_kind"] == "gpt-lora" else None
        if args.lora_rank is not None and args.lora_rank != saved_rank:
            raise ValueError(f"--lora-rank {args.lora_rank}: {ckpt_path} was fine-tuned with "
                             f"{'LoRA rank ' + str(saved_rank) if saved_rank else 'full fine-tuning'}; "
                             "a resumed run keeps its model (start a new run in another --out)")
        if saved_rank:  # its base must be the --checkpoint given, and unchanged
            base = Path(ckpt["model_config"]["base_checkpoint"])
            if args.checkpoint and Path(args.checkpoint).resolve() != base:
                raise ValueError(f"{ckpt_path} fine-tunes {base}, not --checkpoint {args.checkpoint}")
        tokenizer = load_tokenizer(ckpt, ckpt_path)
        config = apply_overrides(TrainConfig.from_dict(ckpt["train_config"]), train_set)
        model = build_model(ckpt, ckpt_path)  # a LoRA run checks its base model here
    else:
        if not args.checkpoint:
            raise ValueError("--checkpoint is needed to start a fine-tuning run: the pretrained GPT, e.g. "
                             "runs/cpu/ckpt.pt from `python -m course_lib train --out runs/cpu`")
        config = apply_overrides(finetune_config(lora=args.lora_rank is not None), train_set)
        base, ckpt = load_model(args.checkpoint)
        if type(base) is not GPT:
            raise ValueError(f"{args.checkpoint} holds a {ckpt['model_kind']!r} model: fine-tune a GPT "
                             "checkpoint written by `python -m course_lib train`")
        tokenizer = extend_tokenizer(load_tokenizer(ckpt, args.checkpoint), TASK_CHARS)
        need = longest_example(tokenizer)
        if base.config.block_size < need:
            raise ValueError(f"{args.checkpoint} has block_size {base.config.block_size}, shorter than the task's "
                             f"longest example ({need} tokens): pretrain with --set block_size={need} or more")
        seed_everything(config.seed)
        if args.lora_rank is not None:
            alpha = args.lora_alpha if args.lora_alpha is not None else float(args.lora_rank)
            targets = tuple(t.strip() for t in args.lora_targets.split(",") if t.strip())
            model = LoRAGPT.from_base(args.checkpoint, tokenizer, args.lora_rank, alpha, targets)
        else:
            model = extend_vocabulary(base, tokenizer.vocab_size - base.config.vocab_size).requires_grad_(True)
    check_precision(torch.device(device), config.dtype)
    with claim_folder(out):  # a second run into the same --out is refused; nothing is left if this fails
        return _train_and_report(args, model, tokenizer, config, device, out, ckpt if resuming else None)


def _train_and_report(args, model, tokenizer, config, device, out: Path, resumed: dict | None) -> int:
    """The fine-tuning run itself, once every input is checked: train (or resume), then the
    task's exact match on held-out dates and three answers."""
    from ._signals import TrainingInterrupted
    from .checkpoint import CHECKPOINT_NAME
    from .runs import resume_command
    from .train import Trainer

    ckpt_path = out / CHECKPOINT_NAME
    batch_fn = dates_batch_fn(tokenizer, config.batch_size, device=device)
    if resumed is not None:  # the checkpoint cmd_finetune has read: not read again
        trainer = Trainer.resume(ckpt_path, model, batch_fn=batch_fn, device=device, config=config,
                                 tokenizer=tokenizer, checkpoint=resumed)
        print(f"resuming {ckpt_path} at step {trainer.step} of {config.max_iters}")
    else:
        trainer = Trainer(model, config=config, batch_fn=batch_fn, device=device, out_dir=out, tokenizer=tokenizer)
    trainer.resume_hint = resume_command(args.argv)
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    kind = f"LoRA rank {model.config.rank}" if isinstance(model, LoRAGPT) else "full fine-tuning"
    print(f"fine-tuning on {args.task} ({kind}): {trained:,} of {model.num_parameters():,} parameters trained, "
          f"on {device}; {config.max_iters} iterations, checkpoints in {out}")
    try:
        trainer.train()
    except TrainingInterrupted as stop:
        return 128 + stop.signum
    pairs = dates_test_pairs(args.eval_examples)
    print(f"done: val loss {trainer.history['val_loss'][-1]:.4f}; exact match on {len(pairs)} held-out dates "
          f"{exact_match(model, tokenizer, pairs):.1%}; saved {ckpt_path}")
    for source, answer in zip([s for s, _ in pairs[:3]], answer_prompts(model, tokenizer, [s for s, _ in pairs[:3]])):
        print(f"  {source}  ->  {answer}")
    return 0


def add_finetune_parser(sub) -> None:
    """The ``finetune`` subcommand's arguments (registered by course_lib.cli)."""
    p = sub.add_parser("finetune", help="fine-tune a pretrained GPT checkpoint on a task (full or LoRA), "
                       "writing DIR/ckpt.pt")
    p.add_argument("--checkpoint", help="the pretrained GPT (a ckpt.pt written by `train`); with --resume "
                   "only needed to check a LoRA run's base")
    p.add_argument("--task", default="dates", help=f"one of: {', '.join(TASKS)} (default dates: chapter 11's "
                   "date normalisation as prompt=answer)")
    p.add_argument("--lora-rank", type=int, help="train LoRA adapters of this rank (default: full fine-tuning)")
    p.add_argument("--lora-alpha", type=float, help="LoRA's alpha (default: the rank, a scaling of 1)")
    p.add_argument("--lora-targets", default=",".join(DEFAULT_TARGETS), metavar="NAMES",
                   help="comma-separated linear layers to adapt (default: the attention projections, "
                   f"{','.join(DEFAULT_TARGETS)}; the MLP's are mlp.c_fc,mlp.c_proj)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one training setting; repeat for more")
    p.add_argument("--max-iters", type=int, help="the same as --set max_iters=N")
    p.add_argument("--out", default="runs/ft", help="output folder (default runs/ft)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out if it has a checkpoint")
    p.add_argument("--eval-examples", type=int, default=500, help="held-out dates for the final exact match")
    p.add_argument("--device", choices=["cpu", "cuda", "mps"], help="default: cuda, else mps, else cpu")
    p.set_defaults(func=cmd_finetune)
