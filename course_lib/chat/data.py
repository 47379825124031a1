"""Conversations made by code, for fine-tuning a chat model and checking it (chapter 17).

The data is **synthetic**, and that is deliberate: a model of a million or two parameters that read
only Shakespeare cannot learn open conversation, but it can learn to follow a format and answer
questions whose answers a program can check. Every conversation here has such an answer:

- ``dates``: a date in one of chapter 11's 13 formats, asked for in ISO form;
- ``arithmetic``: a sum, difference, product or quotient of small numbers (in digits or words),
  answered through the calculator (the assistant writes the call, the calculator the result, the
  assistant copies it);
- ``spelling`` and ``letters``: spell a word letter by letter, or count one letter in it (in
  training, also strings of letters that are no word: the skill, not a list);
- ``identity``: questions about the assistant itself, each with one true answer;
- ``speak-as``: "Speak as ROMEO." answered with a real line of that speaker, the first line of
  one of their speeches;
- ``follow-up``: two exchanges where the second needs the first ("Times 3?" after a sum; "How
  many letters?" after a spelling; "Which year?" after a date).

Each request is written in one of several phrasings (:mod:`course_lib.chat.phrasing`), with noise
(case, a missing last mark) in the training split only; a quarter of the conversations of the
one-exchange tasks come after one or two exchanges of others, so the model learns to answer the
last question of a conversation that goes on.

**Splits.** ``train``, ``val`` and ``test`` share no date, no word, no pair of numbers, no line,
and no question (review 17-B1): days, words and each speaker's lines are shuffled and cut 80/10/10,
number pairs go by a fixed rule, identity questions and (speaker, phrasing) pairs of speak-as
requests are cut by phrasing. tests/test_chat_data.py checks, task by task, that no validation or
test question is a training message (compared in lower case, letters and digits only). The held-out
lines are new to the chat fine-tune, not to the pretrained model: they come from the whole of tiny
Shakespeare, whose first 90% it read.

Every conversation fits ``MAX_TOKENS`` tokens with the character template (a block_size of 256,
plus the one token a training pair shifts by). The frozen file ``course_lib/tasks/chat.json`` is
what :func:`build_conversations` writes with the default seed; :func:`load_conversations` checks
its SHA-256.
"""
from __future__ import annotations

import calendar
import datetime
import hashlib
import json
import random
import re
from collections import Counter
from pathlib import Path

import torch

from .calculator import calculate
from .phrasing import (ASK_DATE, ASK_LETTERS, ASK_SPEAK_AS, ASK_SPELLING, arithmetic_request, form,
                       held_out_forms, identity_split, noisy, speak_as_split)
from .template import (END, ConversationTooLong, chat_tokenizer,
                       collate, fit_to_context, render, training_pair)
from ..data import load_text
from ..dates import DATE_FORMATS, FIRST_DAY, N_DAYS, format_date
from ..tokenizers import CharTokenizer, describe_chars, unwritable
from ..train import TrainConfig
from ..utils import IGNORE_INDEX

CHAT_PATH = Path(__file__).parent.parent / "tasks" / "chat.json"
# The SHA-256 of CHAT_PATH: python -c "from course_lib.chat import data;
# print(chat_data.write_conversations())"
CHAT_SHA256 = "3f6a40eb758610de21fb791352f52ddd745b373da5e4a5dd9ed626deb0d4d953"
# The first version of the conversations (4,000 training conversations in two to four phrasings, no
# noise, one or two exchanges; identity's questions the same in every split, review 17-B1), on which
# the first chat model (weights/chat-char-cpu.pt) was trained and scored: kept so that its records
# can be checked
CHAT_V1_PATH = CHAT_PATH.with_name("chat_v1.json")
CHAT_V1_SHA256 = "b3b73ffa517c3677f5b0b907344a475e8c4868648408595008d585b2194cf4d0"
SPLITS = ("train", "val", "test")
SIZES = {"train": 12000, "val": 400, "test": 400}  # conversations per split
# what the conversations write beyond tiny Shakespeare's 65 characters
EXTRA_CHARS = "0123456789+-*/()="
MAX_TOKENS = 257  # the character template's length of the longest conversation: block_size 256 + 1
# a speaker the assistant can speak as has at least this many first lines (8 to 40 characters)
MIN_LINES = 20
CHAT_TASKS = ("dates", "arithmetic", "spelling", "letters", "identity", "speak-as", "follow-up")
IDENTITY = tuple(pair for split in SPLITS
                 for pair in identity_split(split))  # (question, answer), all splits
# of the conversations (but speak-as and follow-up) that start after one or two others
PREFIX_SHARE = 0.25
# of training spelling and letters requests about a string of letters, not a word
PSEUDO_SHARE = 0.3


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _assistant(content) -> dict:
    return {"role": "assistant", "content": content}


def _calc(expression: str) -> list[dict]:
    """The assistant's content for a calculation: the call, the calculator's result, and the
    result copied as the answer."""
    result = calculate(expression)
    return [{"type": "tool", "text": expression}, {"type": "result", "text": result},
            {"type": "text", "text": result}]


# --- what each split draws from -------------------------------------------------------------------


def _cut(items: list, rng: random.Random) -> dict[str, list]:
    """``items`` shuffled and cut 80/10/10 into the three splits."""
    items = list(items)
    rng.shuffle(items)
    a, b = int(0.8 * len(items)), int(0.9 * len(items))
    return {"train": items[:a], "val": items[a:b], "test": items[b:]}


def _words() -> list[str]:
    text = load_text("tinyshakespeare")
    counts = Counter(re.findall(r"[a-z]+", text))
    return sorted(w for w, c in counts.items() if 4 <= len(w) <= 9 and c >= 2)


def _speeches() -> dict[str, list[str]]:
    """Speaker -> the first lines (8 to 40 characters) of their speeches in tiny Shakespeare."""
    lines: dict[str, list[str]] = {}
    for speaker, first in re.findall(r"\n\n([A-Z][A-Z ]*):\n([^\n]+)",
                                     load_text("tinyshakespeare")):
        if 8 <= len(first) <= 40:
            lines.setdefault(speaker, []).append(first)
    return lines


def _pools(seed: int) -> dict[str, dict]:
    """Per split: days, words, speaker -> lines (each speaker's lines cut 80/10/10), the
    (speaker, phrasing) pairs of speak-as requests and the identity questions (cut by phrasing)."""
    rng = random.Random(seed)
    pools = {split: {} for split in SPLITS}
    for split, days in _cut(range(N_DAYS), rng).items():
        pools[split]["days"] = days
    words = _words()
    for split, cut in _cut(words, rng).items():
        pools[split]["words"] = cut
    lines = _speeches()
    speakers = sorted(s for s in lines if len(lines[s]) >= MIN_LINES)
    for speaker in speakers:
        for split, cut in _cut(lines[speaker], rng).items():
            pools[split].setdefault("lines", {})[speaker] = cut
    for split in SPLITS:
        pools[split]["speak_as"] = [(s, f) for i, s in enumerate(speakers)
                                    for j, f in enumerate(ASK_SPEAK_AS)
                                    if speak_as_split(i, j) == split]
        pools[split]["identity"] = identity_split(split)
    # strings of letters for training must not be a word of any split
    pools["train"]["pseudo"] = set(words)
    return pools


def _pair_split(a: int, b: int) -> str:
    """The split a pair of numbers belongs to, by a fixed rule (so no pair is in two splits)."""
    r = (a * 7919 + b * 104729) % 10
    return "test" if r == 0 else "val" if r == 1 else "train"


# --- one conversation of each task ----------------------------------------------------------------


def _date(pool, rng):
    day = FIRST_DAY + datetime.timedelta(days=rng.choice(pool["days"]))
    return day, format_date(day, rng.randrange(len(DATE_FORMATS)), rng.randrange(3))


def _dates(pool, rng):
    day, text = _date(pool, rng)
    return [_user(rng.choice(ASK_DATE).format(d=text)), _assistant(day.isoformat())]


def _numbers(split, rng):
    while True:
        a, b = rng.randint(0, 99), rng.randint(1, 99)
        if _pair_split(a, b) == split:
            return a, b


def _arithmetic(pool, rng, split):
    a, b = _numbers(split, rng)
    op = rng.choice("+-*/")
    return [_user(arithmetic_request(a, op, b, rng)), _assistant(_calc(f"{a}{op}{b}"))]


def _word(pool, rng, share: float = PSEUDO_SHARE, longest: int = 9):
    """A word of the split; in training (a pool with "pseudo"), a ``share`` of the time a string of
    3 to ``longest`` letters that is no word (the skill, not a list)."""
    if "pseudo" in pool and rng.random() < share:
        while True:
            word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz")
                           for _ in range(rng.randint(3, longest)))
            if word not in pool["pseudo"]:
                return word
    return rng.choice(pool["words"])


def _spelling(pool, rng):
    word = _word(pool, rng)
    return [_user(rng.choice(ASK_SPELLING).format(w=word)), _assistant("-".join(word))]


def _letters(pool, rng):
    word = _word(pool, rng)
    letter = rng.choice(sorted(set(word)) + ["e", "a", "z"])
    return [_user(rng.choice(ASK_LETTERS).format(c=letter, w=word)),
            _assistant(str(word.count(letter)))]


def _identity(pool, rng):
    question, answer = rng.choice(pool["identity"])
    return [_user(question), _assistant(answer)]


def _speak_as(pool, rng):
    speaker, ask = rng.choice(pool["speak_as"])
    return [_user(ask.format(s=speaker)), _assistant(rng.choice(pool["lines"][speaker]))]


def _follow_up(pool, rng, split):
    kind = rng.choice(["sum", "spell", "date"])
    if kind == "sum":
        first = _arithmetic(pool, rng, split)
        value, (word, op) = (first[1]["content"][-1]["text"],
                             rng.choice([("Plus", "+"), ("Minus", "-"), ("Times", "*")]))
        n = rng.randint(2, 9)
        return first + [_user(f"{word} {n}?"), _assistant(_calc(f"{value}{op}{n}"))]
    if kind == "spell":
        first = _spelling(pool, rng)
        word = first[1]["content"].replace("-", "")
        return first + [_user(rng.choice(["How many letters?", "Its length?"])),
                        _assistant(str(len(word)))]
    first = _dates(pool, rng)
    day = datetime.date.fromisoformat(first[1]["content"])
    question, answer = rng.choice([("Which year?", day.year),
                                   ("Which month?", calendar.month_name[day.month]),
                                   ("Which day?", day.day)])
    return first + [_user(question), _assistant(str(answer))]


MAKERS = {"dates": _dates, "arithmetic": _arithmetic, "spelling": _spelling, "letters": _letters,
          "identity": _identity, "speak-as": _speak_as, "follow-up": _follow_up}
NEEDS_SPLIT = ("arithmetic", "follow-up")  # number pairs are split by a rule, not drawn from a pool


# --- the dataset, its file and its checks ---------------------------------------------------------


def char_chat_tokenizer():
    """The chat tokenizer of the shipped pretrained model (tiny Shakespeare's characters), grown
    by every character these conversations use."""
    return chat_tokenizer(CharTokenizer.from_text(load_text("tinyshakespeare")), EXTRA_CHARS)


def _draw(task: str, pool: dict, rng: random.Random, split: str) -> list[dict]:
    """One conversation of ``task``; in training, its
    first message with noise (phrasing's ``noisy``)."""
    messages = MAKERS[task](*((pool, rng, split) if task in NEEDS_SPLIT else (pool, rng)))
    if split == "train" and task != "speak-as":
        messages[0] = _user(noisy(messages[0]["content"], rng))
    return messages


def build_conversations(seed: int = 0, sizes: dict | None = None) -> dict[str, list[dict]]:
    """``{"train": [...], "val": [...], "test": [...]}``: ``{"task", "messages"}`` dicts, the tasks
    in turn, all drawn from ``random.Random(seed)`` (the same seed, the same conversations). A
    share (``PREFIX_SHARE``) of the conversations of every task but speak-as and follow-up come
    after one or two exchanges of other tasks (a conversation goes on; the last question is the
    one scored). A conversation with a message in the
    form of a robustness request is drawn again."""
    sizes = sizes or SIZES
    pools, rng, tokenizer, forms = (_pools(seed), random.Random(seed),
                                    char_chat_tokenizer(), held_out_forms())
    single = [t for t in CHAT_TASKS if t not in ("speak-as", "follow-up")]
    out = {}
    for split in SPLITS:
        out[split], pool = [], pools[split]
        while len(out[split]) < sizes[split]:
            task = CHAT_TASKS[len(out[split]) % len(CHAT_TASKS)]
            messages = _draw(task, pool, rng, split)
            if task in single and rng.random() < PREFIX_SHARE:
                before = [m for _ in range(rng.randint(1, 2))
                          for m in _draw(rng.choice(single), pool, rng, split)]
                messages = before + messages
            users = [m["content"] for m in messages if m["role"] == "user"]
            if any(form(u) in forms for u in users):
                continue  # never a robustness request's form (phrasing's held_out_forms)
            if len(render(tokenizer, messages)[0]) <= MAX_TOKENS:  # else draw again
                out[split].append({"task": task, "messages": messages})
    return out


def conversations_bytes(data: dict) -> bytes:
    """The frozen form: one JSON object, a conversation per line, UTF-8."""
    lines = [json.dumps({"split": s, **c}, ensure_ascii=False, sort_keys=True) for s in SPLITS
             for c in data[s]]
    return ("\n".join(lines) + "\n").encode("utf-8")


def write_conversations(path: str | Path = CHAT_PATH, seed: int = 0) -> str:
    """Build the conversations and write them to ``path``; returns the file's SHA-256 (paste it
    into :data:`CHAT_SHA256`)."""
    data = conversations_bytes(build_conversations(seed))
    Path(path).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def load_conversations(split: str | None = None, path: str | Path = CHAT_PATH,
                       sha256: str | None = None):
    """The shipped conversations, after checking the file's SHA-256: a dict of the three splits,
    or the list of one ``split``."""
    if split is not None and split not in SPLITS:
        raise ValueError(f"unknown split {split!r}: choose from {', '.join(SPLITS)}")
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"the conversations {path} are missing from this installation: "
                                "reinstall course_lib, or write them with "
                                "course_lib.chat.data.write_conversations()")
    data = path.read_bytes()
    digest, expected = hashlib.sha256(data).hexdigest(), sha256 or CHAT_SHA256
    if digest != expected:
        raise ValueError(f"{path} has SHA-256 {digest}, not the {expected} this course_lib was "
                         "released with: the file is damaged or was edited. Reinstall course_lib")
    out = {s: [] for s in SPLITS}
    for line in data.decode("utf-8").splitlines():
        row = json.loads(line)
        out[row.pop("split")].append(row)
    return out if split is None else out[split]


# --- fine-tuning on them: batches, and the run's settings -----------------------------------------

# The chat fine-tune's training settings (course_lib.runs builds the run): chapter 15's recipe for
# full fine-tuning, on conversations instead of dates.
CHAT_SFT_TRAIN = dict(max_iters=1000, batch_size=32, learning_rate=1e-3,
                      min_lr=1e-4, warmup_iters=20, weight_decay=0.0,
                      grad_clip=1.0, eval_interval=100, eval_iters=4)


def chat_sft_config(**overrides) -> TrainConfig:
    return TrainConfig(**{**CHAT_SFT_TRAIN, **overrides})


def rendered_pairs(tokenizer, conversations: list[dict], block_size: int) -> tuple[list, int]:
    """``(pairs, left_out)``: each conversation as a training pair (inputs, targets with the
    assistant-only mask), and how many were left out because they do not fit ``block_size``
    (the template's rule with ``policy="refuse"``: a conversation is never cut for training)."""
    pairs, left_out = [], 0
    for c in conversations:
        try:
            fit_to_context(tokenizer, c["messages"], block_size + 1, policy="refuse")
        except ConversationTooLong:
            left_out += 1
            continue
        pairs.append(training_pair(*render(tokenizer, c["messages"])))
    return pairs, left_out


def conversation_text(conversations: list[dict]) -> str:
    """Every text the messages of ``conversations`` hold (contents and their parts), joined."""
    return "".join(m["content"] if isinstance(m["content"], str)
                   else "".join(part["text"] for part in m["content"])
                   for c in conversations for m in c["messages"])


def chat_batch_fn(tokenizer, batch_size: int, block_size: int, device="cpu",
                  data: dict | None = None, pack: bool = False):
    """A ``Trainer`` batch_fn: ``batch_size`` conversations drawn (with the Trainer's generator,
    so a resumed run draws the same) from the shipped ``train`` or ``val`` split, as x (B, T)
    and y (B, T), T the longest in the batch. The conversations are rendered once, here; a
    tokenizer that cannot write them is refused first, naming the characters it lacks.

    ``pack``: each row is instead conversations drawn one after another until ``block_size + 1``
    tokens are filled (the last one cut there), so T = block_size and no compute goes to padding;
    a row reads as one long conversation that changes topic, what a chat becomes (the model learns
    to answer the last question, not the first)."""
    data = data if data is not None else load_conversations()
    missing = unwritable(tokenizer, conversation_text(data["train"] + data["val"]))
    if missing:
        raise ValueError(f"the model's tokenizer cannot write {describe_chars(missing)}, which the "
                         "conversations use: fine-tune a GPT whose tokenizer was built from tiny "
                         "Shakespeare (leave --checkpoint out for the shipped one, or train one "
                         "with `python -m course_lib train`)")
    pairs = {}
    for split in ("train", "val"):
        pairs[split], left_out = rendered_pairs(tokenizer, data[split], block_size)
        if not pairs[split]:
            raise ValueError(f"no {split} conversation fits the model's block_size {block_size} "
                             f"({left_out} are longer): fine-tune a model with a longer context")
    pad = tokenizer.special_ids[END]

    def packed_row(split: str, generator: torch.Generator):
        xs, ys, n = [], [], 0
        while n < block_size:
            # between two conversations: the first one's last token (<|end|>) is read, the target
            # (<|user|>) not trained
            if xs:
                xs.append(torch.tensor([pad])), ys.append(torch.tensor([IGNORE_INDEX]))
            x, y = pairs[split][int(torch.randint(len(pairs[split]), (1,), generator=generator))]
            xs.append(x), ys.append(y)
            n = sum(len(t) for t in xs)
        return torch.cat(xs)[:block_size], torch.cat(ys)[:block_size]

    def batch_fn(split: str, generator: torch.Generator):
        if pack:
            rows = [packed_row(split, generator) for _ in range(batch_size)]
            return (torch.stack([x for x, _ in rows]).to(device),
                    torch.stack([y for _, y in rows]).to(device))
        rows = torch.randint(len(pairs[split]), (batch_size,), generator=generator).tolist()
        x, y = collate([pairs[split][i] for i in rows], pad)
        return x.to(device), y.to(device)

    return batch_fn
