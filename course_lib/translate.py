"""Decoding the encoder-decoder Transformer of :mod:`course_lib.seq2seq` (chapter 11): greedy
decoding, beam search with length normalisation, and :func:`translate`, which turns texts into
texts with either; :func:`translations_exact_match` scores a model on (source, target) pairs.

Shapes: B batch, S source length, t the decoder input so far, V vocabulary size, K beam size.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from .seq2seq import Seq2Seq, Seq2SeqConfig, encode_batch


# Beam search keeps beam_size hypotheses per source and ranks beam_size * V candidates a step: beams
# of 4 to 10 are usual, and a beam of thousands would run for hours with nothing to gain.
MAX_BEAM = 100


def check_beam_size(beam_size) -> None:
    """A clear ValueError for a beam size that is not an integer in [1, MAX_BEAM]."""
    if (not isinstance(beam_size, int) or isinstance(beam_size, bool)
        or not 1 <= beam_size <= MAX_BEAM):
        raise ValueError(f"beam_size must be an integer >= 1 and <= {MAX_BEAM} (1 is greedy "
                         f"decoding; beams of 4 to 10 are usual), got {beam_size!r}")


def _decode_args(model: Seq2Seq, src: torch.Tensor, max_len: int | None) -> int:
    if src.dim() != 2:
        raise ValueError(f"src must be a (B, S) tensor of token ids, got shape {tuple(src.shape)}")
    L = model.config.block_size
    max_len = L if max_len is None else max_len
    if not 1 <= max_len <= L:
        raise ValueError(f"max_len must be in [1, block_size={L}] (the decoder input grows to "
                         f"max_len tokens), got {max_len}")
    return max_len


@torch.no_grad()
def greedy_decode(model: Seq2Seq, src: torch.Tensor, max_len: int | None = None) -> list[list[int]]:
    """The most likely next token, one step at a time, until EOS or ``max_len`` tokens.
    src (B, S) -> B lists of token ids (BOS and EOS left out)."""
    max_len = _decode_args(model, src, max_len)
    c = model.config
    memory, src_mask = model.encode(src)
    seqs = torch.full((src.shape[0], 1), c.bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    done = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        logits = next_token_logits(model, seqs, memory, src_mask)  # (B, V)
        nxt = logits.argmax(dim=-1).masked_fill(done, c.pad_id)  # (B,)
        seqs = torch.cat([seqs, nxt[:, None]], dim=1)
        done |= nxt == c.eos_id
        if done.all():
            break
    return [_strip(row, c) for row in seqs[:, 1:].tolist()]


def _strip(ids: list[int], c: Seq2SeqConfig) -> list[int]:
    """Token ids up to (not including) the first EOS."""
    return ids[: ids.index(c.eos_id)] if c.eos_id in ids else ids


def next_token_logits(model: Seq2Seq, seqs: torch.Tensor, memory: torch.Tensor,
                      src_mask: torch.Tensor):
    """(B, t) decoder inputs -> (B, V) logits of the next token; PAD and BOS, never targets,
    are ruled out (-inf)."""
    logits = model.decode(seqs, memory, src_mask)[:, -1].float()  # only the last position is new
    logits[:, [model.config.pad_id, model.config.bos_id]] = float("-inf")
    return logits


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's length normalisation (Wu et al. 2016), used by the 2017 paper with alpha = 0.6:
    lp = ((5 + length) / 6) ** alpha. A hypothesis is ranked by log p / lp."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(model: Seq2Seq, src: torch.Tensor, beam_size: int = 4, max_len: int | None = None,
                alpha: float = 0.6) -> list[list[int]]:
    """Keep the ``beam_size`` most likely partial translations at every step.

    Each step extends every live hypothesis by every token, and ranks the K * V candidates by
    their summed log-probability. Candidates ending in EOS (among the top K) are finished;
    the best K others stay live. A source is done when it has K finished hypotheses (or at
    ``max_len``); its answer is the finished one with the best length-normalised score
    log p / :func:`length_penalty`. With ``beam_size=1`` this is exactly greedy decoding.

    src (B, S) -> B lists of token ids (BOS and EOS left out).
    """
    check_beam_size(beam_size)
    max_len = _decode_args(model, src, max_len)
    c, K = model.config, beam_size
    B = src.shape[0]
    memory, src_mask = model.encode(src)
    # (B*K, ...)
    memory, src_mask = memory.repeat_interleave(K, dim=0), src_mask.repeat_interleave(K, dim=0)
    seqs = torch.full((B * K, 1), c.bos_id, dtype=torch.long, device=src.device)  # (B*K, t)
    scores = torch.full((B, K), float("-inf"), device=src.device)
    scores[:, 0] = 0.0  # at the start only one hypothesis (BOS) is live
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(B)]
    done = [False] * B
    for step in range(max_len):
        logp = F.log_softmax(next_token_logits(model, seqs, memory, src_mask), dim=-1)  # (B*K, V)
        V = logp.shape[-1]
        cand = (scores[:, :, None] + logp.view(B, K, V)).view(B, K * V)  # (B, K*V)
        # (B, 2K): K live ones survive even if K end
        top_scores, top_idx = cand.topk(min(2 * K, K * V), dim=1)
        new_rows, new_scores = [], torch.full((B, K), float("-inf"), device=src.device)
        for b in range(B):
            rows = []
            for rank, (s, i) in enumerate(zip(top_scores[b].tolist(), top_idx[b].tolist())):
                if done[b] or len(rows) == K or s == float("-inf"):
                    break
                beam, tok = divmod(i, V)
                prefix = seqs[b * K + beam]
                if tok == c.eos_id:
                    if rank < K:
                        ids = prefix[1:].tolist()
                        finished[b].append((s / length_penalty(len(ids) + 1, alpha), ids))
                        if len(finished[b]) >= K:
                            done[b] = True
                else:
                    new_scores[b, len(rows)] = s
                    rows.append(torch.cat([prefix, prefix.new_tensor([tok])]))
            # a finished source (or too few candidates): filler rows, score -inf
            while len(rows) < K:
                rows.append(torch.cat([seqs[b * K], seqs.new_tensor([c.pad_id])]))
            new_rows.extend(rows)
        seqs, scores = torch.stack(new_rows), new_scores
        if all(done):
            break
    out = []
    for b in range(B):
        if not done[b]:  # ran out of steps: live hypotheses compete too
            for k in range(K):
                if scores[b, k] > float("-inf"):
                    ids = seqs[b * K + k, 1:].tolist()
                    finished[b].append((scores[b, k].item() / length_penalty(len(ids), alpha), ids))
        out.append(max(finished[b], key=lambda f: f[0])[1] if finished[b] else [])
    return out


# --- texts in, texts out ----------------------------------------------------------------------


def translate(model: Seq2Seq, tokenizer, texts: list[str], beam_size: int = 1,
              max_len: int | None = None, alpha: float = 0.6) -> list[str]:
    """Translate ``texts`` with greedy decoding (``beam_size=1``) or beam search."""
    check_beam_size(beam_size)
    if not texts:
        return []
    if any(len(t) == 0 for t in texts):
        raise ValueError("cannot translate an empty text: every source needs at least one "
                         "character")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    src = encode_batch(tokenizer, list(texts), device=device)
    ids = (greedy_decode(model, src, max_len) if beam_size == 1
           else beam_search(model, src, beam_size, max_len, alpha))
    model.train(was_training)
    return [tokenizer.decode(row, skip_special=True) for row in ids]


def share_answered_exactly(answer, pairs: list[tuple[str, str]], batch_size: int = 250) -> float:
    """Share of (source, target) pairs whose answer is exactly the target (a prefix or one more
    character is wrong): ``answer(sources)`` gives the answers to a batch of sources. Exact match,
    the metric of chapters 11 (an encoder-decoder) and 15 (a fine-tuned GPT), on the same pairs."""
    right = 0
    for i in range(0, len(pairs), batch_size):
        chunk = pairs[i:i + batch_size]
        got = answer([source for source, _ in chunk])
        right += sum(g == target for g, (_, target) in zip(got, chunk))
    return right / max(1, len(pairs))


def translations_exact_match(model: Seq2Seq, tokenizer, pairs: list[tuple[str, str]],
                             beam_size: int = 1,
                batch_size: int = 250) -> float:
    """Share of (source, target) pairs translated exactly right."""
    return share_answered_exactly(lambda sources: translate(model, tokenizer, sources, beam_size),
                                  pairs, batch_size)
