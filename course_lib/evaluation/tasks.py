"""The evaluation tasks that ship with the package (chapter 16), built by code from the book's own
data, each frozen as JSON in ``course_lib/tasks/`` with its SHA-256.

Held-out text: the models of the book train on the first 90% of tiny Shakespeare (by tokens;
``course_lib.data.train_val_split``). Test items come from the text after 91% of its characters
(:data:`HELDOUT_START`): a margin, because a BPE model's 90% of tokens ends at a slightly
different character than a character model's. Few-shot examples ("train" items) come from the
training text. ``tests/test_eval_tasks.py`` rebuilds every task and checks it gives the stored
bytes; the frozen files are what evaluations read (:func:`load_task` checks their hashes).

| task | kind | what | chance |
|---|---|---|---|
| next-line | choice | the true next line of a held-out passage among 4 (3 from far away) | 1/4 |
| next-speaker | choice | who speaks next after a held-out speech, among 4 speakers | 1/4 |
| next-word | generate | the next word of a held-out line, exact match | most frequent |
| dates | generate | chapter 11's dates to ISO 8601 (``src=``), held-out days | most frequent |
| arithmetic | generate | two-digit addition ``a+b=``, held-out pairs | most frequent |
| gsm8k-style | generate | GSM8K's format (answer after ``####``), our own items | most frequent |

A generative task's chance level is the score of always giving its most frequent answer.
"""
from __future__ import annotations

import hashlib
import json
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..data import load_text
from ..dates import date_split_days, date_test_set, sample_dates

TASKS_DIR = Path(__file__).parent.parent / "tasks"
HELDOUT_START = 0.91  # test items come from tiny Shakespeare after this share of its characters
TRAIN_END = 0.89  # few-shot examples from before this share
N_TEST, N_TRAIN = 200, 20
# SHA-256 of each frozen file (python -c "from course_lib.evaluation.tasks import write_tasks;
# write_tasks()")
TASK_SHA256 = {
    "next-line": "f04b15947d5223b446af6c9cdcd580ab563e2966fbd66323cb5600495285b2d1",
    "next-speaker": "825232ecc82ccb2ffb2643b34ca84e024e72afc227721e9bf2fced0284deabb8",
    "next-word": "db07f0d6a44427afa89939dd929380e7b649efa2ca756659fc682f07f5a5658f",
    "dates": "2f90ba9b549112829da19497feefb70955d12e9bc7daee6978cc30389f36c2e0",
    "arithmetic": "9c2bcfe992e143e4f2396e32b0936af34ed7cad0aae33d80d8b376e6694b93a2",
    "gsm8k-style": "f7af4bc0213cfe9ce4a53d519ee5d6d6dd536f0d93b0f2e686f8e6bf8fe98702",
}


@dataclass
class Task:
    """A task: ``test`` items scored, ``train`` items for few-shot prompts. A choice item is
    ``{"context", "choices", "gold"}``; a generate item ``{"prompt", "answer"}``."""
    name: str
    kind: str  # "choice" or "generate"
    description: str
    chance: float
    test: list[dict]
    train: list[dict]
    stop: list[str] = field(default_factory=lambda: ["\n"])
    parser: str | None = None  # "first-word" or "number" (generate tasks)
    max_new_tokens: int = 16
    separator: str = "\n"  # between few-shot examples
    # between a choice item's context and each choice (lm-eval's target_delimiter)
    delimiter: str = " "

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    def texts(self, shots: int = 0) -> list[str]:
        """Every text an evaluation with ``shots`` worked examples feeds the model (for the
        encodability check), joined as ``report_card.evaluate_task`` joins them: the test items,
        the first ``shots`` training items with their worked solutions, the stop sequences."""
        items = self.test + self.train[:shots]
        if self.kind == "choice":
            return [i["context"] + self.delimiter + c + self.separator for i in items
                    for c in i["choices"]]
        shots_text = [s["prompt"] + s.get("solution", s["answer"]) + self.separator
                      for s in self.train[:shots]]
        return [i["prompt"] + i["answer"] for i in self.test] + shots_text + self.stop


def _enough(items: list[dict], n: int, what: str) -> list[dict]:
    """The first ``n`` items; a rebuild from another text that yields fewer says so instead of
    shipping a smaller task."""
    if len(items) < n:
        raise ValueError(f"{what}: only {len(items)} candidates passed the filters, {n} are needed")
    return items[:n]


def _majority(answers: list[str]) -> float:
    return Counter(answers).most_common(1)[0][1] / len(answers)


def _lines(start: float, end: float) -> list[tuple[int, str, str]]:
    """(index, line, speaker) of the non-empty, non-name lines of tiny Shakespeare between two
    shares."""
    text = load_text()
    part = text[int(start * len(text)):int(end * len(text))]
    out, speaker = [], None
    for i, line in enumerate(part.split("\n")[1:-1]):  # the first and last may be cut
        if re.fullmatch(r"[A-Za-z][A-Za-z ']*:", line):
            speaker = line[:-1]
        elif line and speaker:
            out.append((i, line, speaker))
    return out


def _next_line_items(lines, n: int, rng: random.Random) -> list[dict]:
    items = []
    picks = rng.sample(range(2, len(lines)), n)
    for p in picks:
        (i0, a, _), (_, b, s1), (i2, true, s2) = lines[p - 2], lines[p - 1], lines[p]
        if not (i2 - i0 == 2 and s1 == s2):  # three consecutive lines of one speech
            continue
        far = [ln for j, ln, _ in lines if abs(j - i2) > 200 and ln != true]
        choices = rng.sample(far, 3) + [true]
        rng.shuffle(choices)
        items.append({"context": a + "\n" + b + "\n", "choices": choices,
                      "gold": choices.index(true)})
    return items


def build_next_line(seed: int = 0) -> Task:
    rng = random.Random(seed)
    test = _enough(_next_line_items(_lines(HELDOUT_START, 1.0), 3 * N_TEST, rng), N_TEST,
                   "next-line test")
    train = _enough(_next_line_items(_lines(0.0, TRAIN_END), 3 * N_TRAIN, rng), N_TRAIN,
                    "next-line train")
    return Task("next-line", "choice",
                "the true next line of a held-out speech among 4 (3 lines from far away)", 0.25,
                test, train)


def _speeches(start: float, end: float) -> list[tuple[str, str]]:
    """(speaker, speech) in order, between two shares of the text."""
    text = load_text()
    part = text[int(start * len(text)):int(end * len(text))]
    return re.findall(r"\n\n([A-Za-z][A-Za-z ']*):\n(.+?)(?=\n\n)", part, flags=re.S)


def _speaker_items(speeches, n: int, rng: random.Random) -> list[dict]:
    names = [s for s, _ in speeches]
    items = []
    for p in rng.sample(range(1, len(speeches)), min(n, len(speeches) - 1)):
        true = names[p]
        near = sorted({s for s in names[max(0, p - 60):p + 60]} - {true})  # the same scene or play
        if len(near) < 3:
            continue
        choices = rng.sample(near, 3) + [true]
        rng.shuffle(choices)
        last = speeches[p - 1][1].split("\n")[-2:]
        items.append({"context": "\n".join(last) + "\n\n", "choices": [c + ":" for c in choices],
                      "gold": choices.index(true)})
    return items


def build_next_speaker(seed: int = 1) -> Task:
    rng = random.Random(seed)
    test = _enough(_speaker_items(_speeches(HELDOUT_START, 1.0), 2 * N_TEST, rng), N_TEST,
                   "next-speaker test")
    train = _enough(_speaker_items(_speeches(0.0, TRAIN_END), 2 * N_TRAIN, rng), N_TRAIN,
                    "next-speaker train")
    # the name starts a line: no space before it
    return Task("next-speaker", "choice",
                "who speaks next after a held-out speech, among 4 speakers of the "
                "same scene", 0.25, test, train, delimiter="")


def _word_items(lines, n: int, rng: random.Random) -> list[dict]:
    items = []
    for p in rng.sample(range(1, len(lines)), 3 * n):
        words = lines[p][1].split(" ")
        # two consecutive lines of one speech
        if len(words) < 4 or lines[p - 1][0] != lines[p][0] - 1:
            continue
        k = rng.randrange(2, len(words))
        target = re.match(r"[A-Za-z']*", words[k]).group(0)
        if target:
            items.append({"prompt": lines[p - 1][1] + "\n" + " ".join(words[:k]) + " ",
                          "answer": target})
    return items[:n]


def build_next_word(seed: int = 2) -> Task:
    rng = random.Random(seed)
    test = _enough(_word_items(_lines(HELDOUT_START, 1.0), N_TEST, rng), N_TEST, "next-word test")
    train = _enough(_word_items(_lines(0.0, TRAIN_END), N_TRAIN, rng), N_TRAIN, "next-word train")
    return Task("next-word", "generate",
                "the next word of a held-out line (first word of the output)",
                _majority([i["answer"] for i in test]), test, train, stop=["\n"],
                parser="first-word", max_new_tokens=12, separator="\n\n")


def build_dates(seed: int = 0) -> Task:
    test = [{"prompt": s + "=", "answer": t} for s, t in date_test_set(N_TEST, seed)]
    days = date_split_days(seed)["train"]
    train = [{"prompt": s + "=", "answer": t}
             for s, t in sample_dates(days, N_TRAIN, torch.Generator().manual_seed(seed + 999))]
    return Task("dates", "generate", "chapter 11's dates to ISO 8601 (held-out days)",
                _majority([i["answer"] for i in test]), test, train, max_new_tokens=12)


def build_arithmetic(seed: int = 3) -> Task:
    pairs = [(a, b) for a in range(10, 100) for b in range(10, 100)]
    random.Random(seed).shuffle(pairs)
    item = lambda a, b: {"prompt": f"{a}+{b}=", "answer": str(a + b)}  # noqa: E731
    test = [item(a, b) for a, b in pairs[:N_TEST]]
    train = [item(a, b) for a, b in pairs[N_TEST:N_TEST + N_TRAIN]]
    return Task("arithmetic", "generate", "two-digit addition a+b= (held-out pairs)",
                _majority([i["answer"] for i in test]), test, train, max_new_tokens=5)


# GSM8K's format (Cobbe et al. 2021): a word problem, a worked solution, the answer after "####".
# Twelve items written for this book: the first two are the few-shot examples, the other ten the
# test.
GSM8K_STYLE = [
    ("Romeo has 12 roses and gives 5 to Juliet. How many roses does he keep?",
     "12 - 5 = 7. #### 7"),
    ("A play has 5 acts of 4 scenes each. How many scenes is that?", "5 * 4 = 20. #### 20"),
    ("Falstaff drinks 3 cups of sack a day. How many cups does he drink in 6 days?",
     "3 * 6 = 18. #### 18"),
    ("The Globe holds 30 people per row and has 9 rows. How many people fit?",
     "30 * 9 = 270. #### 270"),
    ("Prospero has 48 books and loses half of them at sea. How many books remain?",
     "48 / 2 = 24. #### 24"),
    ("Hamlet writes 14 lines, then 11 more. How many lines did he write?", "14 + 11 = 25. #### 25"),
    ("Each of 7 actors needs 2 swords. How many swords are needed?", "7 * 2 = 14. #### 14"),
    ("A ticket costs 6 pence. How much do 15 tickets cost, in pence?", "6 * 15 = 90. #### 90"),
    ("Lear divides 90 acres among 3 daughters equally. How many acres does each get?",
     "90 / 3 = 30. #### 30"),
    ("Puck circles the earth in 40 minutes. How many minutes do 4 circles take?",
     "40 * 4 = 160. #### 160"),
    ("Viola has 25 coins, spends 8, then finds 6. How many coins has she now?",
     "25 - 8 + 6 = 23. #### 23"),
    ("There are 64 guests and each table seats 8. How many tables are needed?",
     "64 / 8 = 8. #### 8"),
]


def build_gsm8k_style() -> Task:
    item = lambda q, a: {"prompt": f"Question: {q}\nAnswer: ",  # noqa: E731
                         "answer": a.split("#### ")[1],
                         "solution": a}
    train = [item(q, a) for q, a in GSM8K_STYLE[:2]]
    test = [item(q, a) for q, a in GSM8K_STYLE[2:]]
    return Task("gsm8k-style", "generate",
                "GSM8K's format on 10 word problems written for the book (the number "
                "after ####, else the last number)", _majority([i["answer"] for i in test]), test,
                train, stop=["\n\n", "Question:"], parser="number", max_new_tokens=40,
                separator="\n\n")


BUILDERS = {"next-line": build_next_line, "next-speaker": build_next_speaker,
            "next-word": build_next_word, "dates": build_dates, "arithmetic": build_arithmetic,
            "gsm8k-style": build_gsm8k_style}
TASK_NAMES = tuple(BUILDERS)


def task_bytes(task: Task) -> bytes:
    """The frozen form of a task: sorted-key JSON, UTF-8."""
    return (json.dumps(task.to_dict(), indent=1, sort_keys=True,
                       ensure_ascii=False) + "\n").encode("utf-8")


def write_tasks(folder: str | Path = TASKS_DIR) -> dict[str, str]:
    """Build every task and write ``folder/<name>.json``; returns each file's SHA-256 (paste
    them into :data:`TASK_SHA256`)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    hashes = {}
    for name, build in BUILDERS.items():
        data = task_bytes(build())
        (folder / f"{name}.json").write_bytes(data)
        hashes[name] = hashlib.sha256(data).hexdigest()
    return hashes


def check_task_names(names) -> list[str]:
    """The task names of ``names`` (a list or a comma-separated string), each known and named once,
    else one error."""
    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in names if n not in BUILDERS]
    if unknown or not names:
        raise ValueError(f"unknown task {', '.join(unknown) or '(none given)'}: choose from "
                         f"{', '.join(TASK_NAMES)}")
    twice = sorted({n for n in names if list(names).count(n) > 1})
    if twice:  # it would be scored, and printed, twice
        raise ValueError(f"task {', '.join(twice)} is named more than once: name each task once")
    return list(names)


def load_task(name: str, folder: str | Path = TASKS_DIR) -> Task:
    """The frozen task ``name``, after checking its SHA-256."""
    check_task_names([name])
    path = Path(folder) / f"{name}.json"
    if not path.exists():
        raise FileNotFoundError(f"the task file {path} is missing from this installation: "
                                "reinstall course_lib")
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if TASK_SHA256.get(name) != digest:
        raise ValueError(f"{path} has SHA-256 {digest}, not the {TASK_SHA256.get(name)} this "
                         "course_lib was released with: the file is damaged or was edited. "
                         "Reinstall course_lib")
    return Task(**json.loads(data))
