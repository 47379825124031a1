"""Checks for chapter 10, Padding and masks: ``from course_lib.exercises import ch10``."""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data import pad_batch
from ..losses import masked_accuracy, masked_cross_entropy
from ..utils import IGNORE_INDEX
from . import as_number, call, describe, expect_close, expect_sequence, expect_tensor, fail, passed


def _seqs():
    g = torch.Generator().manual_seed(10)
    cases = [[[5, 6, 7], [8]], [[3], [4, 4], [9, 9, 9, 9]], [[2, 3, 4, 5]]]
    lengths = torch.randint(1, 9, (6,), generator=g).tolist()
    cases.append([torch.randint(1, 30, (n,), generator=g).tolist() for n in lengths])
    return cases


def _as_bool_mask(mask, what: str, shape) -> torch.Tensor:
    if not isinstance(mask, torch.Tensor):
        fail(f"{what}: the mask should be a tensor, got {describe(mask)}.",
             "return (ids, mask), both tensors.")
    if tuple(mask.shape) != tuple(shape):
        fail(f"{what}: the mask has shape {tuple(mask.shape)}, expected {tuple(shape)}.",
             "one entry per position of the padded batch: (B, T) with T the longest length.")
    if mask.dtype != torch.bool:
        fail(f"{what}: the mask has dtype {mask.dtype}, expected torch.bool.",
             "compare, e.g. positions < lengths, which gives booleans; or convert with .bool().")
    return mask


def check_pad_batch(fn) -> None:
    """``fn(seqs, pad_id, side) -> (ids, mask)``: the sequences (lists of ints) padded with
    ``pad_id`` to the longest, after the tokens (``side="right"``) or before them (``"left"``);
    ``ids`` (B, T) long, ``mask`` (B, T) bool, True on real tokens. Must equal
    ``course_lib.data.pad_batch``."""
    # pad_id 99 too: an answer that pads with zeros whatever pad_id says must not pass.
    for seqs, side, pad_id in [(s, side, pad_id) for s in _seqs() for side in ("right", "left")
                               for pad_id in (0, 99)]:
        what = f"pad_and_mask({seqs}, pad_id={pad_id}, side={side!r})"
        got = call(fn, [list(s) for s in seqs], pad_id, side)
        ids, mask = expect_sequence(got, 2, f"{what}: expected a pair (ids, mask)",
                                    "return ids, mask")
        exp_ids, exp_mask = pad_batch(seqs, pad_id, side=side)
        if not isinstance(ids, torch.Tensor) or tuple(ids.shape) != tuple(exp_ids.shape):
            fail(f"{what}: ids should be a tensor of shape {tuple(exp_ids.shape)}, got "
                 f"{tuple(ids.shape) if isinstance(ids, torch.Tensor) else describe(ids)}.",
                 "pad every sequence to the length of the longest one.")
        integer = not ids.is_floating_point() and not ids.is_complex() and ids.dtype != torch.bool
        expect_tensor(ids, exp_ids.shape, f"{what}: ids", dtype=torch.long,
                      dtype_hint=("the exercise asks for a (B, T) long tensor, the dtype of token "
                                  "ids throughout the course: nn.Embedding takes int32 too, but "
                                  "F.cross_entropy refuses int32 targets ('expected target dtype "
                                  "to be Long'), and the ids become targets: torch.full((B, T), "
                                  "pad_id, dtype=torch.long).") if integer else
                      "token ids are integers, and nn.Embedding only takes integer ids: "
                      "torch.full((B, T), pad_id, dtype=torch.long).")
        mask = _as_bool_mask(mask, what, exp_mask.shape)
        if torch.equal(mask, ~exp_mask):
            fail(f"{what}: your mask is inverted.",
                 "the mask is True on REAL tokens and False on pads.")
        if torch.equal(ids, exp_ids) and torch.equal(mask, exp_mask):
            continue
        if side == "left" and torch.equal(ids, pad_batch(seqs, pad_id, side="right")[0]):
            fail(f"{what}: you padded on the right.",
                 "side='left' puts the pads BEFORE the tokens.")
        if side == "right" and torch.equal(ids, pad_batch(seqs, pad_id, side="left")[0]):
            fail(f"{what}: you padded on the left.", "side='right' puts the pads AFTER the tokens.")
        if pad_id != 0 and torch.equal(ids, pad_batch(seqs, 0, side=side)[0]):
            fail(f"{what}: you padded with 0, not with pad_id={pad_id}.",
                 "fill the empty places with the pad_id you were given: torch.full((B, T), pad_id, "
                 "...).")
        if not torch.equal(ids, exp_ids):
            fail(f"{what}: ids {ids.tolist()}, expected {exp_ids.tolist()}.",
                 "copy each sequence into its row and fill the rest with pad_id.")
        if not torch.equal(mask, exp_mask):
            fail(f"{what}: mask {mask.int().tolist()}, expected {exp_mask.int().tolist()}.",
                 "True exactly where a real token was copied.")
    passed("your padded batches and masks equal course_lib.data.pad_batch, on both sides.")


def _loss_cases():
    g = torch.Generator().manual_seed(11)
    cases = []
    for B, T, V in [(2, 5, 7), (4, 9, 29), (3, 6, 11)]:
        logits = torch.randn(B, T, V, generator=g) * 2
        targets = torch.randint(V, (B, T), generator=g)
        lengths = torch.randint(1, T + 1, (B,), generator=g)
        lengths[0] = T  # one full row
        lengths[-1] = 1  # and one very short row: per-row means and token means then differ
        mask = torch.arange(T)[None, :] < lengths[:, None]
        cases.append((logits, targets, mask))
    return cases


def check_masked_mean_loss(fn) -> None:
    """``fn(logits, targets, mask) -> loss``: logits (B, T, V), targets (B, T), mask (B, T) True on
    real positions. The mean cross-entropy over the real positions only (every real token counts
    once). Must equal ``course_lib.losses.masked_cross_entropy``."""
    for logits, targets, mask in _loss_cases():
        what = (f"masked_mean_loss on a batch of shape {tuple(targets.shape)} with "
                f"{int(mask.sum())} real tokens")
        got = as_number(call(fn, logits.clone(), targets.clone(), mask.clone()), what)
        expected = masked_cross_entropy(logits, targets, mask).item()
        losses = F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
                                 reduction="none").view(targets.shape)
        everything = losses.mean().item()
        per_row = ((losses * mask).sum(1) / mask.sum(1)).mean().item()
        if abs(got - everything) < 1e-5 and abs(everything - expected) > 1e-4:
            fail(f"{what}: you averaged over every position, pads included (got {got:.4f}).",
                 "multiply the per-token losses by the mask, and divide by the number of real "
                 "tokens.")
        if abs(got - per_row) < 1e-5 and abs(per_row - expected) > 1e-4:
            fail(f"{what}: you averaged the mean of each row (got {got:.4f}); then a short name "
                 "weighs as much as a long one.",
                 "sum the masked losses over the whole batch, then divide by mask.sum().")
        if abs(got - (losses * mask).sum().item()) < 1e-4:
            fail(f"{what}: you returned the sum of the losses, not their mean.",
                 "divide by mask.sum().")
        expect_close(got, expected, what,
                     "cross_entropy(..., reduction='none'), times the mask, summed, divided by "
                     "the number of real tokens.")
    passed("your masked mean equals course_lib.losses.masked_cross_entropy: every real token "
           "counts once, no pad counts.")


def check_masked_accuracy(fn) -> None:
    """``fn(logits, targets, mask) -> float``: the share of real positions (mask True) whose
    most likely token (argmax over V) is the target."""
    for logits, targets, mask in _loss_cases():
        targets = targets.clone()
        hits = logits.argmax(-1)
        targets[:, ::2] = hits[:, ::2]  # about half right, so that wrong denominators show
        what = (f"masked_accuracy on a batch of shape {tuple(targets.shape)} with "
                f"{int(mask.sum())} real tokens")
        got = as_number(call(fn, logits.clone(), targets.clone(), mask.clone()), what)
        expected = masked_accuracy(logits, targets.masked_fill(~mask, IGNORE_INDEX))
        correct = (hits == targets)
        everything = correct.float().mean().item()
        per_row = ((correct & mask).sum(1) / mask.sum(1)).mean().item()
        if abs(got - everything) < 1e-6 and abs(everything - expected) > 1e-6:
            fail(f"{what}: you counted every position, pads included (got {got:.4f}, expected "
                 f"{expected:.4f}).",
                 "count the correct predictions where the mask is True, and divide by mask.sum().")
        if abs(got - per_row) < 1e-6 and abs(per_row - expected) > 1e-6:
            fail(f"{what}: you averaged the accuracy of each row.",
                 "divide the total number of correct real "
                 "predictions by the total number of real positions.")
        expect_close(got, expected, what,
                     "(argmax == targets) & mask, summed, divided by mask.sum().", atol=1e-6)
    passed("your accuracy counts the real positions only.")


def _combined(real: torch.Tensor) -> torch.Tensor:
    T = real.shape[1]
    causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
    return causal[None] & real[:, None, :]


def check_combine_masks(fn) -> None:
    """``fn(real) -> allowed``: ``real`` (B, T) bool, True on real tokens; ``allowed`` (B, T, T)
    bool with ``allowed[b, t, s]`` True when query t may attend to key s: s <= t (causal) and s
    is a real token of row b (padding). Built by broadcasting, without loops over the batch."""
    for real in [torch.tensor([[True, True, True, False]]),
                 torch.tensor([[True, True, False, False, False],
                               [False, False, True, True, True]]),
                 torch.tensor([[True] * 6, [True] * 2 + [False] * 4, [False] * 5 + [True]])]:
        B, T = real.shape
        what = f"combine_masks of a ({B}, {T}) padding mask"
        got = call(fn, real.clone())
        expected = _combined(real)
        if not isinstance(got, torch.Tensor):
            fail(f"{what}: expected a tensor, got {type(got).__name__}.",
                 "return a (B, T, T) boolean tensor.")
        if got.dim() == 4 and got.shape[1] == 1:
            got = got[:, 0]  # (B, 1, T, T), ready for the heads, is fine too
        if tuple(got.shape) != (B, T, T):
            fail(f"{what}: expected shape {(B, T, T)}, got {tuple(got.shape)}.",
                 "broadcast causal (1, T, T) against the keys' mask (B, 1, T).")
        if got.dtype != torch.bool and (got.is_floating_point() or got.is_complex()):
            fail(f"{what}: expected a boolean mask, got dtype {got.dtype}.",
                 "F.scaled_dot_product_attention ADDS a float attn_mask to the scores, so a mask "
                 "of 0. and 1. masks nothing: build it from booleans, torch.tril(torch.ones(T, T, "
                 "dtype=torch.bool)) & real[:, None, :], and do not convert it with .float() or "
                 ".long().")
        if got.dtype != torch.bool:
            fail(f"{what}: expected a boolean mask, got dtype {got.dtype}.",
                 "F.scaled_dot_product_attention takes a boolean attn_mask (True: may attend) or a "
                 "float one that it adds to the scores; an integer mask it refuses ('Expected "
                 "attn_mask dtype to be bool or float'). Build it from booleans, "
                 "torch.tril(torch.ones(T, T, dtype=torch.bool)) & real[:, None, :], and do not "
                 "convert it with .int() or .long().")
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))[None]
        if not torch.equal(got, expected) and (torch.equal(got, expected & real[:, :, None])
                                               or torch.equal(got, causal & real[:, :, None])):
            # With right padding, masking the pad queries too looks like masking the queries only:
            # a left-padded row tells them apart.
            probe = torch.tensor([[False, False, True, True]])
            on_probe = call(fn, probe.clone())
            if (isinstance(on_probe, torch.Tensor) and on_probe.dim() == 4
                and on_probe.shape[1] == 1):
                on_probe = on_probe[:, 0]
            if isinstance(on_probe, torch.Tensor) and on_probe.shape == (1, 4, 4) and \
                    torch.equal(on_probe, _combined(probe) & probe[:, :, None]):
                fail(f"{what}: you masked the pad queries (rows) as well as the pad keys "
                     "(columns). A pad query then may attend to nothing: its row is all False, and "
                     "scaled_dot_product_attention gives NaN there (a softmax over no keys).",
                     "mask the keys only, torch.tril(...) & real[:, None, :]: a pad position's own "
                     "output is never used (the loss ignores it), it just must not be LOOKED AT.")
        if torch.equal(got, causal & real[:, :, None]):
            fail(f"{what}: you masked the queries (rows), not the keys (columns).",
                 "a pad must not be LOOKED AT: index the padding mask as real[:, None, :] (the key "
                 "axis).")
        if torch.equal(got, real[:, None, :].expand(B, T, T)):
            fail(f"{what}: the causal part is missing: queries see the future.",
                 "AND with torch.tril(ones(T, T)).")
        if torch.equal(got,
                       torch.triu(torch.ones(T, T, dtype=torch.bool))[None] & real[:, None, :]):
            fail(f"{what}: your causal mask is upper triangular: queries see the future, not the "
                 "past.",
                 "use torch.tril: entry [t, s] is allowed when s <= t.")
        if not torch.equal(got, expected):
            fail(f"{what}: {got.int().tolist()} differs from the expected "
                 f"{expected.int().tolist()}.",
                 "allowed[b, t, s] = (s <= t) and real[b, s].")
    passed("causal AND padding, combined by broadcasting: (1, T, T) & (B, 1, T) -> (B, T, T).")


def check_accuracy_fixed(fn) -> None:
    """``fn(logits, targets) -> float``: accuracy over the targets that are not ``IGNORE_INDEX``
    (-100), the padded ones. Must equal ``course_lib.losses.masked_accuracy``."""
    for logits, targets, mask in _loss_cases():
        targets = targets.clone()
        targets[:, ::2] = logits.argmax(-1)[:, ::2]
        targets = targets.masked_fill(~mask, IGNORE_INDEX)
        what = (f"accuracy on a batch of shape {tuple(targets.shape)} with {int((~mask).sum())} "
                "padded targets")
        got = as_number(call(fn, logits.clone(), targets.clone()), what)
        expected = masked_accuracy(logits, targets)
        buggy = (logits.argmax(-1) == targets).float().mean().item()
        if abs(got - buggy) < 1e-6 and abs(buggy - expected) > 1e-6:
            fail(f"{what}: this is still the buggy number ({got:.4f}): every pad counts as a wrong "
                 "prediction.",
                 "keep = targets != IGNORE_INDEX; divide the correct kept predictions by "
                 "keep.sum().")
        expect_close(got, expected, what,
                     "count only the positions whose target is not IGNORE_INDEX.", atol=1e-6)
    passed("the pads no longer count: your accuracy equals course_lib.losses.masked_accuracy.")


__all__ = ["check_pad_batch", "check_masked_mean_loss", "check_masked_accuracy",
           "check_combine_masks", "check_accuracy_fixed"]
