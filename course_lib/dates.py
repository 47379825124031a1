"""Chapter 11's toy task: dates written in many ways, normalised to ISO 8601
("the 3rd of March, 2021" -> "2021-03-03"), for the encoder-decoder of :mod:`course_lib.seq2seq`.

The task's data (formats, a held-out split of days, random pairs, batches for the ``Trainer``),
its tokenizer, and the chapter's model and training settings, from which
:mod:`course_lib.runs` builds the command line's ``train-dates`` run. Chapter 15 fine-tunes a
GPT on the same task (:mod:`course_lib.finetune`).
"""
from __future__ import annotations

import calendar
import datetime
import torch

from .seq2seq import SPECIALS, Seq2SeqConfig, encode_batch
from .tokenizers import CharTokenizer
from .train import TrainConfig
from .utils import IGNORE_INDEX

DATE_ALPHABET = "".join(sorted(set(
    "0123456789 ,./-" + "".join(calendar.month_name[1:]) + "".join(calendar.month_name[1:]).upper()
    + "".join(calendar.month_name[1:]).lower() + "thesofTHEOF"
)))
# two-digit years: 50-99 -> 19xx
FIRST_DAY, LAST_DAY = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)
N_DAYS = (LAST_DAY - FIRST_DAY).days + 1


def _ordinal(d: int) -> str:
    return str(d) + ("th" if 11 <= d % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(d % 10, "th"))


DATE_FORMATS = (  # (name, how to write a date); month names come in Title, lower or UPPER case
    ("3 March 2021", lambda d, M, m: f"{d.day} {M} {d.year}"),
    ("3 Mar 2021", lambda d, M, m: f"{d.day} {m} {d.year}"),
    ("March 3, 2021", lambda d, M, m: f"{M} {d.day}, {d.year}"),
    ("March 3rd, 2021", lambda d, M, m: f"{M} {_ordinal(d.day)}, {d.year}"),
    ("Mar 3 2021", lambda d, M, m: f"{m} {d.day} {d.year}"),
    ("3rd March 2021", lambda d, M, m: f"{_ordinal(d.day)} {M} {d.year}"),
    ("the 3rd of March, 2021", lambda d, M, m: f"the {_ordinal(d.day)} of {M}, {d.year}"),
    ("03/03/21", lambda d, M, m: d.strftime("%d/%m/%y")),
    ("03/03/2021", lambda d, M, m: d.strftime("%d/%m/%Y")),
    ("3.3.2021", lambda d, M, m: f"{d.day}.{d.month}.{d.year}"),
    ("03-Mar-21", lambda d, M, m: f"{d.day:02d}-{m}-{d.strftime('%y')}"),
    ("2021/03/03", lambda d, M, m: d.strftime("%Y/%m/%d")),
    ("20210303", lambda d, M, m: d.strftime("%Y%m%d")),
)


def format_date(day: datetime.date, style: int, case: int = 0) -> str:
    """``day`` written in ``DATE_FORMATS[style]``; month names in Title (case 0), lower (1) or
    UPPER (2) case. Day-first order for all-digit forms (03/04/21 is 3 April 2021)."""
    M, m = calendar.month_name[day.month], calendar.month_abbr[day.month]
    if case == 1:
        M, m = M.lower(), m.lower()
    elif case == 2:
        M, m = M.upper(), m.upper()
    text = DATE_FORMATS[style][1](day, M, m)
    return text.upper() if case == 2 else text


def date_split_days(seed: int = 0, n_heldout: int = 3650) -> dict[str, torch.Tensor]:
    """Day numbers (0 = 1950-01-01) split into "train" and "val": held-out dates the model never
    sees in training, in any format. A fixed permutation from ``seed``."""
    perm = torch.randperm(N_DAYS, generator=torch.Generator().manual_seed(seed))
    return {"train": perm[n_heldout:], "val": perm[:n_heldout]}


def sample_dates(days: torch.Tensor, n: int, generator: torch.Generator) -> list[tuple[str, str]]:
    """``n`` (source, target) pairs: a random day from ``days``, a random format and case, and
    its ISO form, e.g. ("March 3rd, 2021", "2021-03-03"). All randomness from ``generator``."""
    idx = torch.randint(len(days), (n,), generator=generator)
    style = torch.randint(len(DATE_FORMATS), (n,), generator=generator)
    case = torch.randint(3, (n,), generator=generator)
    pairs = []
    for i, s, c in zip(idx.tolist(), style.tolist(), case.tolist()):
        day = FIRST_DAY + datetime.timedelta(days=int(days[i]))
        pairs.append((format_date(day, s, c), day.isoformat()))
    return pairs


def date_tokenizer() -> CharTokenizer:
    """The task's characters after the specials <pad>, <s>, </s> (ids 0, 1, 2, the model's)."""
    return CharTokenizer(DATE_ALPHABET, specials=SPECIALS)


def date_batch_fn(tokenizer, batch_size: int, seed: int = 0, device="cpu"):
    """A ``Trainer`` batch_fn: fresh random dates of the split each call -> (src (B, S), targets (B,
    T))."""
    days = date_split_days(seed)

    def batch_fn(split: str, generator: torch.Generator):
        pairs = sample_dates(days[split], batch_size, generator)
        src = encode_batch(tokenizer, [p[0] for p in pairs], device=device)
        tgt = encode_batch(tokenizer, [p[1] for p in pairs], eos=True, pad=IGNORE_INDEX,
                           device=device)
        return src, tgt

    return batch_fn


def date_test_set(n: int = 1000, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` fixed held-out (source, target) pairs, from days never used in training."""
    return sample_dates(date_split_days(seed)["val"], n,
                        torch.Generator().manual_seed(seed + 12345))


# The chapter's model and training run (the command line uses them too).
DATES_MODEL = Seq2SeqConfig(vocab_size=len(SPECIALS) + len(DATE_ALPHABET), block_size=32,
                            n_encoder_layers=2, n_decoder_layers=2, n_head=4, n_embd=64,
                            dropout=0.0, label_smoothing=0.1)


def dates_train_config(max_iters: int = 750, batch_size: int = 64,
                       warmup_iters: int = 200) -> TrainConfig:
    return TrainConfig(max_iters=max_iters, batch_size=batch_size, schedule="transformer",
                       warmup_iters=warmup_iters, beta1=0.9, beta2=0.98, weight_decay=0.0,
                       grad_clip=1.0, eval_interval=250, eval_iters=4)
