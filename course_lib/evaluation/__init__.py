"""Evaluating a language model beyond its loss (chapter 16): log-likelihoods with the semantics
of EleutherAI's lm-evaluation-harness, multiple choice (``acc``, ``acc_norm``), bits per byte,
greedy generation with stop sequences and exact match, standard errors, bootstrap intervals,
paired comparisons, and a contamination check.

A **request** is a pair of strings ``(context, continuation)``. Its log-likelihood is the sum,
over the continuation's tokens, of ``log p(token | everything before it)``; ``is_greedy`` says
whether every one of those tokens is the model's argmax. As in lm-eval (``_encode_pair``),
whitespace at the end of the context moves to the continuation, and the pair is encoded as one
text (``encode(context + continuation)``) whose first ``len(encode(context))`` tokens are the
context. Where a BPE token spans the join of the two texts, that split is wrong (lm-eval then
feeds ids that need not spell the text, or stops on an empty continuation): the split moves back
to the last token boundary before the join, and the continuation's tokens spell the end of the
context that shares their first token, then the continuation (:mod:`course_lib.evaluation.pairs`
gives the rule and its reasons).

**Shared context, computed once.** The four choices of a multiple-choice item share their
context. Instead of four rows ``context + choice_i``, one row holds ``context, choice_1, ...,
choice_4`` and a (T, T) attention mask lets each choice see the context and itself only, with
position ids restarting after the context for every choice: the same numbers as four rows (up
to float rounding), for a fraction of the work. Models without ``attention_mask`` (the bigram
table) and groups longer than ``block_size`` get one row per request, cropped on the left as
lm-eval does.

Shapes: B batch (rows), T time, V vocabulary size.
"""
from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from .pairs import encode_pair
from ..generate import generate, generate_batch

# --- log-likelihood of a continuation -------------------------------------------------------------


def _accepts_mask(model) -> bool:
    return "attention_mask" in inspect.signature(model.forward).parameters


def _rows(groups: list[tuple[tuple, list[tuple[int, list[int]]]]], block_size: int, packed: bool):
    """Turn groups ``(context_ids, [(request index, continuation ids), ...])`` into rows, dicts of
    ``ids`` (the row's input tokens), ``segments`` (0 for the context, k for the k-th continuation;
    None for a plain row), ``positions`` and ``where``: [(request index, input positions whose
    logits predict its continuation, continuation ids)]."""
    rows = []
    for context, conts in groups:
        context = list(context)
        L = len(context)
        if packed and len(conts) > 1 and L + sum(len(c) - 1 for _, c in conts) <= block_size \
                and L + max(len(c) for _, c in conts) - 1 <= block_size:
            # context, then each continuation but its last token: cont[0] is predicted from the
            # context's last position (shared), cont[j] from cont[j - 1] in the continuation's
            # segment
            ids, segments, positions, where = context[:], [0] * L, list(range(L)), []
            for k, (i, cont) in enumerate(conts, start=1):
                where.append((i, [L - 1] + list(range(len(ids), len(ids) + len(cont) - 1)), cont))
                ids += cont[:-1]
                segments += [k] * (len(cont) - 1)
                positions += list(range(L, L + len(cont) - 1))
            rows.append(dict(ids=ids, segments=segments, positions=positions, where=where))
        else:
            for i, cont in conts:
                rows += _plain_rows(i, context, cont, block_size)
    return rows


def _plain_rows(i: int, context: list[int], cont: list[int], block_size: int) -> list[dict]:
    """One row for request ``i``, cropped on the left as lm-eval does (input ``(context +
    cont)[-(block_size + 1):][:-1]``); a continuation longer than ``block_size`` is scored in
    pieces of ``block_size`` tokens, each with as much context as fits (the chain rule), where
    lm-eval would read logits that do not exist."""
    seq, rows = context + cont, []
    for a in range(len(context), len(seq), block_size):  # targets seq[a:b]
        b = min(a + block_size, len(seq))
        start = max(0, b - 1 - block_size)
        rows.append(dict(ids=seq[start:b - 1], segments=None, positions=None,
                         where=[(i, [t - 1 - start for t in range(a, b)], seq[a:b])]))
    return rows


def _packed_mask(segments: list[int], T: int) -> torch.Tensor:
    """(T, T) mask of a packed row: a query sees the context (segment 0) and its own segment; the
    model adds causality. Padding (segment -1) sees only itself."""
    seg = torch.tensor(segments + [-1] * (T - len(segments)))
    same = seg[:, None] == seg[None, :]
    return same | ((seg[None, :] == 0) & (seg[:, None] >= 0))


@torch.no_grad()
def loglikelihood_tokens(model, requests: Sequence[tuple[list[int], list[int]]],
                         batch_size: int = 32, progress: bool = False,
                         share_context: bool = True) -> list[tuple[float, bool]]:
    """``[(log-likelihood, is_greedy)]`` for token-id requests ``(context_ids, continuation_ids)``.

    Requests with the same context are grouped (``share_context``) and packed into one row
    when the model takes an ``attention_mask`` and the row fits in ``block_size``; rows are
    sorted by length so that a batch wastes little padding. Sums are in float64."""
    from tqdm.auto import tqdm

    block_size = model.config.block_size
    device = next(model.parameters()).device
    by_context: dict[tuple, list] = {}
    for i, (context, cont) in enumerate(requests):
        if len(cont) == 0:
            raise ValueError(f"request {i} has no continuation tokens: there is nothing to score")
        if len(context) == 0:
            raise ValueError(f"request {i} has an empty context: give at least one token of "
                             "context")
        key = tuple(context) if share_context else (i, tuple(context))
        by_context.setdefault(key, []).append((i, list(cont)))
    groups = [(k if share_context else k[1], v) for k, v in by_context.items()]
    rows = _rows(groups, block_size, packed=share_context and _accepts_mask(model))
    rows.sort(key=lambda r: -len(r["ids"]))
    results: list[tuple[float, bool] | None] = [None] * len(requests)
    was_training = model.training
    model.eval()
    for start in tqdm(range(0, len(rows), batch_size), desc="log-likelihoods", disable=not progress,
                      leave=False):
        batch = rows[start:start + batch_size]
        T = max(len(r["ids"]) for r in batch)
        ids = torch.zeros(len(batch), T, dtype=torch.long)
        for b, r in enumerate(batch):
            ids[b, :len(r["ids"])] = torch.tensor(r["ids"])
        if any(r["segments"] is not None for r in batch):
            mask = torch.stack([_packed_mask(r["segments"] or [0] * len(r["ids"]), T)
                                for r in batch])
            positions = torch.zeros(len(batch), T, dtype=torch.long)
            for b, r in enumerate(batch):
                pos = r["positions"] or list(range(len(r["ids"])))
                positions[b, :len(pos)] = torch.tensor(pos)
            logits, _ = model(ids.to(device), attention_mask=mask.to(device),
                              position_ids=positions.to(device))
        else:
            # right padding: a causal model's real positions never see it (lm-eval passes no mask)
            logits, _ = model(ids.to(device))
        logprobs = F.log_softmax(_at_least_float32(logits), dim=-1).cpu()  # (B, T, V)
        for b, r in enumerate(batch):
            _score_row(r, logprobs[b], results)
    model.train(was_training)
    return results


def _at_least_float32(logits: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 logits in float32; float64 ones (a model in double precision) stay as they are."""
    return logits if logits.dtype == torch.float64 else logits.float()


def _score_row(row: dict, logprobs: torch.Tensor, results: list) -> None:
    """Fill ``results`` for every request of one row from its (T, V) log-probabilities."""
    for i, where, cont in row["where"]:
        lp = logprobs[where]  # (len(cont), V)
        target = torch.tensor(cont)
        total = lp.gather(-1, target[:, None]).double().sum().item()
        greedy = bool((lp.argmax(-1) == target).all())
        if results[i] is not None:  # a long continuation's earlier pieces
            total, greedy = results[i][0] + total, results[i][1] and greedy
        results[i] = (total, greedy)


def loglikelihood(model, tokenizer, requests: Sequence[tuple[str, str]], batch_size: int = 32,
                  progress: bool = False, share_context: bool = True) -> list[tuple[float, bool]]:
    """``[(log-likelihood, is_greedy)]`` for text requests ``(context, continuation)``, with
    lm-eval's semantics where no token spans the join (see the module's docstring and
    :func:`course_lib.evaluation.pairs.encode_pair`)."""
    pairs = [encode_pair(tokenizer, c, x) for c, x in requests]
    return loglikelihood_tokens(model, pairs, batch_size, progress, share_context)


# --- multiple choice ------------------------------------------------------------------------------


def choice_scores(lls: Sequence[float], choices: Sequence[str], gold: int) -> dict[str, float]:
    """lm-eval's ``acc`` and ``acc_norm`` of one item: is the choice of highest log-likelihood the
    gold one, and is it still when each log-likelihood is divided by its choice's length in
    characters (``len(choice)``, the choice without the space that joins it to the question)."""
    lls = torch.tensor(list(lls), dtype=torch.float64)
    lengths = torch.tensor([float(len(c)) for c in choices], dtype=torch.float64)
    return {"acc": float(int(lls.argmax()) == gold),
            "acc_norm": float(int((lls / lengths).argmax()) == gold)}


def multiple_choice(model, tokenizer, items: Sequence[dict], batch_size: int = 32,
                    progress: bool = False, delimiter: str = " ") -> dict:
    """Score items ``{"context", "choices", "gold"}``: each choice's continuation is
    ``delimiter + choice``. Returns per-item ``lls``, ``acc`` and ``acc_norm`` lists."""
    requests, spans = [], []
    for item in items:
        spans.append((len(requests), len(item["choices"])))
        requests += [(item["context"], delimiter + c) for c in item["choices"]]
    results = loglikelihood(model, tokenizer, requests, batch_size, progress)
    out = {"lls": [], "acc": [], "acc_norm": []}
    for item, (start, n) in zip(items, spans):
        lls = [ll for ll, _ in results[start:start + n]]
        scores = choice_scores(lls, item["choices"], item["gold"])
        out["lls"].append(lls)
        out["acc"].append(scores["acc"])
        out["acc_norm"].append(scores["acc_norm"])
    return out


# --- bits per byte --------------------------------------------------------------------------------


@torch.no_grad()
def text_nll(model, ids: Sequence[int], stride: int | None = None, batch_size: int = 16,
             progress: bool = False) -> tuple[float, int]:
    """``(total negative log-likelihood in nats, number of tokens scored)`` of the token ids
    ``ids``: every token but the first is scored once, in windows of ``block_size`` tokens that
    advance by ``stride`` (default half a block), so each token has at least ``block_size -
    stride`` tokens of context (the first window's tokens aside)."""
    from tqdm.auto import tqdm

    ids = torch.as_tensor(list(ids), dtype=torch.long)
    block = model.config.block_size
    stride = stride or max(1, block // 2)
    if not 0 < stride <= block:
        raise ValueError(f"stride must be in [1, block_size={block}], got {stride}")
    if len(ids) < 2:
        raise ValueError("the text has fewer than 2 tokens: there is nothing to predict")
    # windows (start, first scored target index within the window)
    windows = [(0, 0)]
    end = min(block, len(ids) - 1)  # targets ids[1 .. end] are scored by the first window
    while end < len(ids) - 1:
        new_end = min(end + stride, len(ids) - 1)
        start = max(0, new_end - block)
        windows.append((start, end - start))
        end = new_end
    device = next(model.parameters()).device
    total, count = 0.0, 0
    was_training = model.training
    model.eval()
    for b0 in tqdm(range(0, len(windows), batch_size), desc="bits per byte", disable=not progress,
                   leave=False):
        chunk = windows[b0:b0 + batch_size]
        # equal lengths stack
        for length in sorted({min(block, len(ids) - 1 - s) for s, _ in chunk}):
            same = [(s, f) for s, f in chunk if min(block, len(ids) - 1 - s) == length]
            x = torch.stack([ids[s:s + length] for s, _ in same]).to(device)  # (B, T)
            y = torch.stack([ids[s + 1:s + 1 + length] for s, _ in same]).to(device)
            logits, _ = model(x)
            # (B, T)
            nll = F.cross_entropy(_at_least_float32(logits).transpose(1, 2), y, reduction="none")
            for row, (_, first) in enumerate(same):
                total += float(nll[row, first:].double().sum())
                count += length - first
    model.train(was_training)
    return total, count


def bits_per_byte(model, tokenizer, text: str, stride: int | None = None,
                  progress: bool = False) -> float:
    """Bits per UTF-8 byte of ``text``: the total negative log-likelihood of its tokens (after the
    first) in bits, divided by the bytes those tokens spell. A tokenizer-independent measure: a
    character model and a BPE model that predict the same text equally well get the same number,
    whatever their token counts (the loss per token does not compare them)."""
    ids = list(tokenizer.encode(text))
    nats, _ = text_nll(model, ids, stride, progress=progress)
    scored_bytes = len(text.encode("utf-8")) - len(tokenizer.decode(ids[:1]).encode("utf-8"))
    return nats / math.log(2) / scored_bytes


def bits_per_byte_from_loss(loss_nats_per_token: float, bytes_per_token: float) -> float:
    """Convert a mean loss (nats per token) into bits per byte: divide by ln 2 (nats to bits)
    and by the bytes one token spells on average."""
    return loss_nats_per_token / math.log(2) / bytes_per_token


# --- generative tasks -----------------------------------------------------------------------------


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """``text`` up to the first stop sequence (lm-eval's ``until``), which is dropped."""
    for s in stop:
        if s:
            text = text.split(s)[0]
    return text


@torch.no_grad()
def greedy_generate(model, tokenizer, prompts: Sequence[str], max_new_tokens: int = 32,
                    stop: Sequence[str] = ("\n",), batch_size: int = 32,
                    progress: bool = False) -> list[str]:
    """Greedy continuations of ``prompts``, each cut at its first stop sequence. Prompts are
    cropped on the left to leave room for ``max_new_tokens``; a one-token stop sequence ends a
    row early."""
    from tqdm.auto import tqdm

    block = model.config.block_size
    keep = max(1, block - max_new_tokens)
    stop_ids = [tokenizer.encode(s) for s in stop if s]
    end_id = stop_ids[0][0] if len(stop_ids) == 1 and len(stop_ids[0]) == 1 else None
    encoded = [list(tokenizer.encode(p))[-keep:] for p in prompts]
    if any(len(e) == 0 for e in encoded):
        raise ValueError("a prompt is empty: give every prompt at least one character")
    use_cache = "cache" in inspect.signature(model.forward).parameters
    outs = []
    for start in tqdm(range(0, len(encoded), batch_size), desc="generating", disable=not progress,
                      leave=False):
        chunk = encoded[start:start + batch_size]
        if _accepts_mask(model):
            new = generate_batch(model, chunk, max_new_tokens, temperature=0, end_id=end_id,
                                 use_cache=use_cache)
        else:  # a model without padding masks (the bigram table): one prompt at a time
            device = next(model.parameters()).device
            new = [generate(model, torch.tensor([p], device=device), max_new_tokens,
                            temperature=0)[0].tolist()
                   for p in chunk]
        outs += [cut_at_stop(tokenizer.decode(n[len(p):]), stop) for p, n in zip(chunk, new)]
    return outs


def parse_number(text: str) -> str | None:
    """The answer of a GSM8K-style solution: the number after ``####`` if there is one (lm-eval's
    ``strict-match``), else the last number in the text (its ``flexible-extract``), written in one
    canonical form: commas gone, trailing zeros of a decimal gone ("1,200.00" -> "1200", "18.50"
    -> "18.5"). None when there is no number."""
    found = re.search(r"####\s*(-?[\d,]*\.?\d+)", text)
    numbers = [found.group(1)] if found else re.findall(r"-?[\d,]*\.?\d+", text)
    if not numbers:
        return None
    answer = numbers[-1].replace(",", "")
    if "." in answer:
        answer = answer.rstrip("0").rstrip(".")
    return answer if answer not in ("", "-") else "0"


def exact_match(predictions: Sequence[str], references: Sequence[str],
                parser: Callable[[str], str | None] | None = None) -> list[float]:
    """1.0 where a prediction (parsed by ``parser``, then stripped) equals its reference."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions for {len(references)} references")
    parse = parser or (lambda s: s)
    return [float((parse(p) or "").strip() == r.strip()) for p, r in zip(predictions, references)]


def few_shot_prompt(shots: Sequence[tuple[str, str]], prompt: str, separator: str = "\n") -> str:
    """Worked examples ``prompt + answer`` from the task's training items, then the prompt."""
    return "".join(p + a + separator for p, a in shots) + prompt


# --- uncertainty ----------------------------------------------------------------------------------


def mean_stderr(xs: Sequence[float]) -> float:
    """The standard error of a mean: sample standard deviation (n - 1) over sqrt(n), as lm-eval."""
    n = len(xs)
    if n < 2:
        return float("nan")
    mu = sum(xs) / n
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (n - 1) / n)


def bootstrap_interval(xs: Sequence[float], iters: int = 2000, level: float = 0.95, seed: int = 0,
                       statistic: Callable[[torch.Tensor],
                                           torch.Tensor] | None = None) -> tuple[float, float]:
    """A percentile bootstrap interval of ``statistic`` (default the mean): resample the items
    with replacement ``iters`` times and take the central ``level`` of the statistic's values."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    x = torch.as_tensor(list(xs), dtype=torch.float64)
    if len(x) == 0:
        raise ValueError("no items: a score over nothing has no interval")
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(x), (iters, len(x)), generator=g)
    stats = statistic(x[idx]) if statistic else x[idx].mean(dim=1)  # (iters,)
    lo, hi = torch.quantile(stats,
                            torch.tensor([(1 - level) / 2, (1 + level) / 2], dtype=torch.float64))
    return float(lo), float(hi)


def paired_comparison(a: Sequence[float], b: Sequence[float], iters: int = 2000,
                      seed: int = 0) -> dict:
    """Compare two models scored on the same items: the mean difference ``a - b``, its paired
    standard error and bootstrap interval (resampling items, not models), the items each one
    wins, and a two-sided p-value of the paired bootstrap (how often the resampled difference
    falls on the other side of zero, doubled: a percentile approximation, not a resampling under
    the null). For 0/1 scores also McNemar's exact test (``mcnemar_p``): under the null each item
    that the two disagree on is a fair coin. Pairing removes the items' own difficulty from the
    noise, so it detects smaller differences than two separate intervals."""
    if len(a) != len(b):
        raise ValueError(f"paired scores need the same items: {len(a)} and {len(b)} scores")
    d = [x - y for x, y in zip(a, b)]
    x = torch.as_tensor(d, dtype=torch.float64)
    # the resamples of bootstrap_interval(d, iters, seed=seed)
    g = torch.Generator().manual_seed(seed)
    means = x[torch.randint(len(x), (iters, len(x)), generator=g)].mean(dim=1)
    lo, hi = torch.quantile(means, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    mean = float(x.mean())
    other_side = (float((means <= 0).double().mean()) if mean > 0
                  else float((means >= 0).double().mean()))
    a_wins, b_wins = sum(v > 0 for v in d), sum(v < 0 for v in d)
    out = {"diff": mean, "stderr": mean_stderr(d), "interval": (lo, hi), "a_wins": a_wins,
           "b_wins": b_wins, "p_value": min(1.0, 2 * other_side)}
    if set(a) | set(b) <= {0.0, 1.0}:
        out["mcnemar_p"] = mcnemar_p(a_wins, b_wins)
    return out


def mcnemar_p(a_wins: int, b_wins: int) -> float:
    """McNemar's exact two-sided p-value (a sign test on the discordant items): the chance that
    a fair coin over ``a_wins + b_wins`` items splits at least as unevenly."""
    n, k = a_wins + b_wins, min(a_wins, b_wins)
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


# --- contamination --------------------------------------------------------------------------------


def word_ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    """The set of ``n``-word sequences of ``text`` (lower-cased words, punctuation dropped)."""
    words = re.findall(r"[a-z0-9']+", text.lower())
    return {tuple(words[i:i + n]) for i in range(len(words) - n + 1)}


def contamination(items: Sequence[str], train_ngrams: set, n: int = 8) -> list[float]:
    """For each evaluation text, the share of its ``n``-word sequences found in the training text
    (``train_ngrams = word_ngrams(train_text, n)``); an item shorter than ``n`` words gets 0.
    GPT-3's report used 13-grams over whole documents; our items are lines, hence a smaller
    ``n``."""
    shares = []
    for text in items:
        grams = word_ngrams(text, n)
        shares.append(sum(g in train_ngrams for g in grams) / len(grams) if grams else 0.0)
    return shares
