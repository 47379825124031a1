"""A pretrained GPT grown for new tokens, and its LoRA fine-tune as a model kind of its own,
``gpt-lora`` (chapter 15).

:func:`extend_vocabulary` appends rows for new tokens to the token embedding and the LM head,
each set to the mean of the existing rows: a new token starts as an "average" token, and the
model's distribution over the old tokens barely moves (Hewitt 2021). In a LoRA fine-tune those
new rows train along with the adapters (:class:`GrownRows`: peft's ``trainable_token_indices``)
while the old rows stay frozen.

A ``gpt-lora`` checkpoint stores only what training changed (the adapters' A and B, the new
rows) plus a reference to its base checkpoint, identified by its SHA-256: building the model
from its config (:class:`LoRAGPT`) loads and checks that base (:func:`load_base`).

Shapes: B batch, T time, C channels, V vocabulary size (V0 before the new tokens).
"""

from __future__ import annotations

import hashlib
import stat
from dataclasses import dataclass, fields
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .checkpoint import CheckpointError, load_checkpoint, load_model, unwrap
from .lora import DEFAULT_TARGETS, add_lora, check_rank, lora_layers, lora_parameter_count
from .model import GPT, GPTConfig
from .registry import register_model

# A run that starts from a base model (a fine-tune, the chat fine-tune, DPO, GRPO, chapter 18's
# starting SFT) keeps the base's shape: given as a setting, any model field is refused with this.
SHAPE_KEPT = {
    f.name: "a run from a base model keeps its shape; only training (and method) "
    "settings can be set"
    for f in fields(GPTConfig)
}


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
    # with tied weights both names hold the same matrix: loaded twice, equal
    bigger.load_state_dict(state)
    return bigger.to(model.wte.weight.device)


POSITION_FILLS = (
    "copy",
    "interpolate",
)  # how extend_positions fills the new rows of a learned table


@torch.no_grad()
def extend_positions(model: GPT, block_size: int, how: str = "copy") -> GPT:
    """A copy of ``model`` with a context of ``block_size`` (at least its own T0). A learned
    position table (T0, C) grows to (block_size, C): ``how="copy"`` repeats the T0 rows
    (position p gets row p mod T0, so neighbouring positions stay as different as the model
    learned them, and a previous-token head still finds p - 1 within each run of T0 rows);
    ``"interpolate"`` stretches the table linearly over the new length (position interpolation,
    Chen 2023, for a learned table: nearby positions become nearly equal). RoPE angles are computed
    for any length, so a RoPE model only gets the new block_size. All other weights are copied;
    with ``"copy"`` the first T0 rows are unchanged, so are the outputs on contexts of T0 tokens."""
    model = unwrap(model)
    T0 = model.config.block_size
    if how not in POSITION_FILLS:
        raise ValueError(f"how={how!r}: choose one of {', '.join(POSITION_FILLS)}")
    if block_size < T0:
        raise ValueError(
            f"block_size {block_size} is shorter than the model's {T0}: a context can only be "
            f"lengthened here; set block_size to {T0} or more"
        )
    longer = GPT(GPTConfig.from_dict({**model.config.to_dict(), "block_size": block_size}))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    if "wpe.weight" in state and block_size > T0:
        old = state["wpe.weight"]  # (T0, C)
        if how == "copy":
            state["wpe.weight"] = old[torch.arange(block_size) % T0]  # (block_size, C)
        else:  # the old rows at positions p * (T0 - 1) / (block_size - 1), linearly between
            # neighbours
            where = torch.linspace(0, T0 - 1, block_size)
            low = where.floor().long().clamp(max=max(T0 - 2, 0))
            high = (low + 1).clamp(max=T0 - 1)
            frac = (where - low).unsqueeze(1)  # (block_size, 1)
            state["wpe.weight"] = old[low] * (1 - frac) + old[high] * frac  # (block_size, C)
    longer.load_state_dict(state)
    return longer.to(next(model.parameters()).device)


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
            raise ValueError(
                f"base_vocab_size must be in [1, vocab_size={self.vocab_size}], got "
                f"{self.base_vocab_size}"
            )

    def gpt_config(self) -> GPTConfig:
        names = [f.name for f in fields(GPTConfig)]
        return GPTConfig(**{k: v for k, v in self.to_dict().items() if k in names})


def check_regular_file(path: Path) -> None:
    """Refuse, before reading a byte, a base path that is a folder, a device (``/dev/zero`` never
    ends) or a pipe: a base checkpoint is a file that ``train`` wrote."""
    mode = path.stat().st_mode
    if not stat.S_ISREG(mode):
        what = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a device or a pipe)"
        raise CheckpointError(
            f"the base model of this LoRA checkpoint, {path}, is {what}: a LoRA "
            "checkpoint names the ckpt.pt file it fine-tunes; that record is "
            "wrong, so use another checkpoint"
        )


def file_sha256(path: str | Path) -> str:
    """The SHA-256 of a regular file (a base checkpoint), read in chunks."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def load_base(config: LoRAGPTConfig) -> GPT:
    """The base GPT a LoRA checkpoint was trained from, checked against the checkpoint's record:
    the file must exist, have the recorded SHA-256, and hold a GPT of the same shape."""
    path = Path(config.base_checkpoint)
    if not path.exists():
        raise CheckpointError(
            f"the base model of this LoRA checkpoint, {path}, is missing: a LoRA "
            "checkpoint holds only the adapters; put the base checkpoint back at "
            "that path (or, to resume the fine-tune, give its new path: finetune "
            "--resume --checkpoint NEW_PATH)"
        )
    check_regular_file(path)
    if file_sha256(path) != config.base_sha256:
        raise CheckpointError(
            f"the base model {path} is not the one this LoRA checkpoint was "
            "trained on (its SHA-256 differs; was that run continued or "
            "replaced?): restore that file, or fine-tune again"
        )
    base, _ = load_model(path)
    expected = GPTConfig.from_dict(
        {**config.gpt_config().to_dict(), "vocab_size": config.base_vocab_size}
    )
    if not isinstance(base, GPT) or type(base) is not GPT or base.config != expected:
        raise CheckpointError(
            f"the base model {path} is not a GPT of the shape this LoRA checkpoint expects"
        )
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
    def from_base(
        cls,
        base_checkpoint: str | Path,
        tokenizer,
        rank: int = 8,
        alpha: float = 8.0,
        targets=DEFAULT_TARGETS,
    ) -> "LoRAGPT":
        """Adapters of ``rank`` on the base checkpoint, its vocabulary grown to ``tokenizer``'s."""
        path = Path(base_checkpoint).resolve()
        ckpt = load_checkpoint(path)
        config = LoRAGPTConfig(
            **{**ckpt["model_config"], "vocab_size": tokenizer.vocab_size},
            base_checkpoint=str(path),
            base_sha256=file_sha256(path),
            base_vocab_size=ckpt["model_config"]["vocab_size"],
            rank=rank,
            alpha=alpha,
            targets=",".join(targets),
        )
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
        expected, got = set(self.trained_names()), set(state_dict)
        if got != expected:
            missing, extra = sorted(expected - got), sorted(got - expected)
            what = [
                f"{len(names)} {kind} tensor(s), the first {names[0]}"
                for kind, names in (("missing", missing), ("unexpected", extra))
                if names
            ]
            raise RuntimeError(f"LoRA weights with {' and '.join(what)}")
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


def fine_tune_model(
    base: GPT,
    base_path: str | Path,
    tokenizer,
    rank: int | None = None,
    alpha: float = 8.0,
    targets=DEFAULT_TARGETS,
) -> GPT:
    """The model a fine-tune trains: ``base`` grown to ``tokenizer``'s vocabulary and trained in
    full (``rank`` None), or LoRA adapters of ``rank`` over the base checkpoint at ``base_path``."""
    if rank is None:
        return extend_vocabulary(
            base, tokenizer.vocab_size - base.config.vocab_size
        ).requires_grad_(True)
    return LoRAGPT.from_base(base_path, tokenizer, rank, alpha, tuple(targets))
