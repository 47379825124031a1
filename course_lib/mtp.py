"""Multi-token prediction (chapter 22): heads that predict the tokens after the next one.

Gloeckle et al. 2024 ("Better & Faster Large Language Models via Multi-token Prediction") put n
output heads on one shared trunk: head 0 is the usual next-token head, head j predicts the token
j + 1 places ahead, all from the same last hidden state z_t. We take their parallel heads (not
DeepSeek-V3's sequential MTP module, which runs a Transformer block per depth on z_t and the
embedding of the next token), because parallel heads read one hidden state only: at decoding
time they draft k tokens from the hidden state the target already computed while verifying, for
the cost of k small matrix products and no extra forward of the trunk. Each extra head is
Medusa's (Cai et al. 2024) residual block, z + SiLU(W_j z) with W_j of C x C, read out by the
model's own ``ln_f``-normalised ``lm_head`` (shared, as Gloeckle et al. share the unembedding).

The training loss is DeepSeek-V3's weighting (Liu et al. 2024): the next-token cross-entropy plus
``mtp_weight`` (they use 0.3, then 0.1) times the mean of the D extra heads' cross-entropies. The
extra term counts only while training: evaluation reports the next-token loss a plain GPT reports.

Shapes: B batch, T time, C channels, V vocabulary size, D = ``mtp_heads`` extra heads.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .utils import IGNORE_INDEX


class MTPHead(nn.Module):
    """One extra head's residual block: (..., C) -> (..., C), z + SiLU(W z)."""

    def __init__(self, n_embd: int, bias: bool = False):
        super().__init__()
        self.proj = nn.Linear(n_embd, n_embd, bias=bias)
        nn.init.normal_(
            self.proj.weight, mean=0.0, std=0.02
        )  # the GPT's own init (GPT._init_weights)
        if bias:
            nn.init.zeros_(self.proj.bias)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return z + F.silu(self.proj(z))


class MTPHeads(nn.Module):
    """D extra heads; head j (1..D) predicts the token j + 1 places after each position.

    The GPT builds them last, after its own weights: a GPT with heads starts from the very trunk a
    GPT without them starts from with the same seed (so an A/B of the loss is paired at step 0).

    They own no unembedding: :meth:`logits` takes the model's ``lm_head`` (V x C), so a head's
    logits live in the vocabulary the next-token head writes."""

    def __init__(self, n_embd: int, n_heads: int, bias: bool = False):
        super().__init__()
        self.heads = nn.ModuleList(MTPHead(n_embd, bias) for _ in range(n_heads))

    def logits(self, z: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """z (..., C), the trunk's ``ln_f``-normalised hidden states -> (D, ..., V): head j's logits
        at index j - 1, each a guess of the token j + 1 places after its position."""
        return torch.stack([lm_head(head(z)) for head in self.heads])

    def loss(
        self,
        z: torch.Tensor,
        lm_head: nn.Module,
        targets: torch.Tensor,
        ignore_index: int = IGNORE_INDEX,
    ) -> torch.Tensor:
        """The mean over heads of head j's cross-entropy against ``targets`` (B, T) shifted by j:
        position t's head j is scored on targets[:, t + j] (the next-token targets are
        targets[:, t], so targets[:, t + j] is the token j + 1 places after position t). Positions
        whose shifted target falls past the window are left out, as are ``ignore_index`` ones.
        z: (B, T, C). A window too short for head j (T <= j) gives that head no term."""
        T = targets.shape[1]
        losses = []
        for j, head in enumerate(self.heads, start=1):
            if T <= j:
                continue
            logits = lm_head(head(z[:, : T - j]))  # (B, T - j, V)
            shifted = targets[:, j:]  # (B, T - j)
            if (shifted != ignore_index).any():
                losses.append(
                    F.cross_entropy(
                        logits.reshape(-1, logits.shape[-1]),
                        shifted.reshape(-1),
                        ignore_index=ignore_index,
                    )
                )
        return torch.stack(losses).mean() if losses else z.new_zeros(())
