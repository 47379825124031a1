"""Scoring a chat model task by task (chapter 17), with chapter 16's harness.

:func:`play` has a conversation of the test split played by the chat engine as a user would:
its user messages in order, each answered greedily (temperature 0) by the model, with the tool
loop on, and the model's **own** earlier replies kept in the context (a follow-up after a wrong
first answer is asked about that wrong answer, as in a real chat). The final reply is scored
against the conversation's last assistant message by one rule per task:

- ``dates``, ``spelling``, ``identity``: exact match of the reply's text
  (:func:`course_lib.evaluation.exact_match`, so stripped of spaces at either end). Each has
  one right answer in the data's own form (an ISO date, letters joined by "-", the assistant's
  fixed sentence).
- ``letters``: the **last integer** in the reply is the count (:func:`last_number`), the rule the
  robustness sets judge a count by (``chat.robustness``). nanochat's spelling-bee task is stricter:
  it reads the number after a marker (``#### 3``), and a reply without one is wrong. Here a hedge
  that ends on the right count ("2 or 3" for 3) and a worked reply about the wrong word whose count
  happens to match are judged right: the rule judges the count, not the work. A bare count is
  judged as by exact match; a worked reply that spells the word and counts as it goes
  (``s-t-r1-a-w-b-e-r2-r3-y: 3``, ``chat-sft --count-first worked``) is judged by the count it
  ends on, which exact match would mark wrong whatever the count.
- ``arithmetic`` and ``follow-up``: exact match of the text the assistant writes after the
  calculator's result (the number it answers with, not the call). Scored twice: **with the
  calculator**, and **without** it, where the calculator answers nothing (an empty result):
  the number written after it is then the model's own arithmetic. The model was trained to
  copy the result, not to compute, so "without" is what the same weights do when the tool is
  gone, not what a model trained without a tool would do.
- ``speak-as``: the share of the reply's words that are words of tiny Shakespeare (a value in
  [0, 1]), if the reply is one finished line (it ended its turn itself, with no line break);
  0 otherwise, and for an empty reply. Exact match against the held-out line would be a guess of
  which of the speaker's hundreds of lines was drawn, impossible by design; and "a real line of
  that speaker" measures memorising the corpus, which the test split's unseen lines exclude.
  What a fine-tune can learn is to answer in the corpus's language rather than in invented
  words, and this measures that. The row also says how many replies are verbatim a line the
  speaker says somewhere in tiny Shakespeare (``verbatim``), which is memorisation, kept apart.
  This rule checks the vocabulary and the stop only: a constant real line ("What then?") scores
  1.00 on it, so it cannot say whether the reply is in the *speaker's* voice.
- :func:`speaker_preference` (the row ``speak-as (right speaker)``): a discriminative score that no
  constant answer can max out. For each held-out line, its log-likelihood (teacher-forced, the
  line and its ``<|end|>``) after the request naming the right speaker is compared with that after
  the same request naming each other speaker of the split: the share of the others it beats
  (a tie counts one half). A model that ignores the name scores 0.5, chance.

Each task's score comes with chapter 16's standard error
(:func:`~course_lib.evaluation.mean_stderr`) and 95% percentile bootstrap interval
(:func:`~course_lib.evaluation.bootstrap_interval`) over the conversations; :func:`across_seeds`
gives the mean and spread of several runs' scores.
"""
from __future__ import annotations

import re
import statistics

from .data import EXTRA_CHARS, CHAT_TASKS
from .engine import ChatEngine, Piece
from .template import END, chat_tokenizer, render_prompt
from ..data import load_text
from ..evaluation import bootstrap_interval, exact_match, loglikelihood_tokens, mean_stderr
from ..lora_gpt import extend_vocabulary

TOOL_TASKS = ("arithmetic", "follow-up")  # the tasks scored with and without the calculator
MAX_REPLY_TOKENS = 48  # the longest reply in the data has 41 characters
WORD = re.compile(r"[A-Za-z']+")


def no_calculator(expression: str) -> str:
    """The calculator gone: every call is answered with an empty result."""
    return ""


def play(engine: ChatEngine, conversation: dict) -> list[list[Piece]]:
    """The engine's replies (their pieces) to ``conversation``'s user messages, in order, from a
    fresh start (the engine is reset first)."""
    engine.reset()
    return [list(engine.stream(m["content"])) for m in conversation["messages"]
            if m["role"] == "user"]


def reply_text(pieces: list[Piece]) -> str:
    """What the assistant wrote as its answer: the text
    pieces (not the calls, results or notices)."""
    return "".join(p.text for p in pieces if p.kind == "text")


def last_number(text: str) -> str | None:
    """The last integer written in ``text`` (``"s-t-r1-a-w-b-e-r2-r3-y: 3"`` gives ``"3"``), or
    None."""
    numbers = re.findall(r"-?\d+", text)
    return numbers[-1] if numbers else None


def judge(task: str, outputs: list[str], references: list[str]) -> list[float]:
    """Each reply of ``task`` judged against its reference by the task's rule (module docstring):
    1.0 right, 0.0 wrong; an empty reply is wrong."""
    if task == "letters":
        return [float(last_number(o) == r.strip()) for o, r in zip(outputs, references,
                                                                    strict=True)]
    return exact_match(outputs, references)


def reference(conversation: dict) -> str:
    """The right final answer: the text of the conversation's last assistant message."""
    content = conversation["messages"][-1]["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content
                                                            if p["type"] == "text")


def speaker_of(conversation: dict) -> str:
    """The speaker a ``speak-as`` conversation asks for ("Speak as ROMEO." -> "ROMEO")."""
    return re.search(r"([A-Z][A-Z ]*[A-Z])\.$", conversation["messages"][0]["content"]).group(1)


def shakespeare_lines() -> dict[str, set[str]]:
    """Speaker -> every line they say in tiny Shakespeare (each line of each of their speeches)."""
    lines: dict[str, set[str]] = {}
    for speaker, speech in re.findall(r"(?:^|\n\n)([A-Z][A-Z ]*):\n(.+?)(?=\n\n|\Z)",
                                      load_text("tinyshakespeare"), re.S):
        lines.setdefault(speaker, set()).update(speech.split("\n"))
    return lines


def shakespeare_words() -> set[str]:
    """Every word of tiny Shakespeare, lower-cased."""
    return {w.lower() for w in WORD.findall(load_text("tinyshakespeare"))}


def known_word_share(text: str, words: set[str]) -> float:
    """The share of ``text``'s words that are in ``words`` (0.0 for a text with no word)."""
    found = WORD.findall(text)
    return sum(w.lower() in words for w in found) / len(found) if found else 0.0


def one_finished_line(pieces: list[Piece]) -> bool:
    """Whether a reply ended its turn itself (no notice of a cut) and is a single line."""
    return not any(p.kind == "notice" for p in pieces) and "\n" not in reply_text(pieces)


def summarize(per_item: list[float], seed: int = 0) -> dict:
    """Chapter 16's summary of per-item scores: mean, standard error, 95% bootstrap interval, n."""
    lo, hi = bootstrap_interval(per_item, seed=seed)
    return {"score": sum(per_item) / len(per_item), "stderr": mean_stderr(per_item),
            "interval": [lo, hi], "n": len(per_item)}


def best_constant(conversations: list[dict], task: str, choose_on: list[dict]
                  | None = None) -> dict:
    """The baseline a task's exact-match score must beat: one constant reply, the most common right
    answer of ``task`` in ``choose_on`` (default ``conversations`` itself; pass the training split
    for a constant chosen without the test), and its exact-match score on ``conversations`` (for
    letters, "1" scores about 0.6: review R17-M1)."""
    from collections import Counter

    items, pool = ([reference(c) for c in convs if c["task"] == task]
                   for convs in (conversations, choose_on or conversations))
    if not items or not pool:
        raise ValueError(f"no {task} conversation to find a constant answer on")
    answer = Counter(pool).most_common(1)[0][0]
    per_item = judge(task, [answer] * len(items), items)
    return {"answer": answer, **summarize(per_item)}


def score_task(model, tokenizer, conversations: list[dict], task: str,
               calculator: bool = True, max_reply_tokens: int = MAX_REPLY_TOKENS,
               progress: bool = False, lines=None, words=None) -> dict:
    """One task's row: its conversations in ``conversations`` played and scored by the task's rule
    (module docstring); the summary, the per-item
    scores (for paired tests) and the final replies."""
    if task not in CHAT_TASKS:
        raise ValueError(f"unknown task {task!r}: choose from {', '.join(CHAT_TASKS)}")
    from tqdm.auto import tqdm

    items = [c for c in conversations if c["task"] == task]
    if not items:
        raise ValueError(f"no {task} conversation to score")
    options = {} if calculator else {"calculator": no_calculator}
    engine = ChatEngine(model, tokenizer, temperature=0.0,
                        max_reply_tokens=max_reply_tokens, **options)
    finals = [play(engine, c)[-1] for c in tqdm(items, desc=task,
                                                disable=not progress, leave=False)]
    outputs = [reply_text(pieces) for pieces in finals]
    row = {"task": task, "calculator": calculator}
    if task == "speak-as":
        lines = lines if lines is not None else shakespeare_lines()
        words = words if words is not None else shakespeare_words()
        per_item = [known_word_share(o, words) if one_finished_line(p) else 0.0
                    for o, p in zip(outputs, finals)]
        row.update(metric="known_words",
                   verbatim=sum(o.strip() in lines.get(speaker_of(c), ())
                                for o, c in zip(outputs, items)))
    else:
        per_item = judge(task, outputs, [reference(c) for c in items])
        row["metric"] = "last_number" if task == "letters" else "exact_match"
    return {**row, **summarize(per_item), "per_item": per_item, "outputs": outputs}


def speaker_preference(model, tokenizer, conversations: list[dict], progress: bool = False) -> dict:
    """The ``speak-as (right speaker)`` row: per speak-as conversation, the share of the split's
    other speakers whose request makes the held-out line less likely than the right speaker's
    request (ties count 0.5; chance 0.5). The line is scored teacher-forced (chapter 16's
    :func:`~course_lib.evaluation.loglikelihood_tokens`): its tokens and the ``<|end|>`` after
    it."""
    items = [c for c in conversations if c["task"] == "speak-as"]
    if not items:
        raise ValueError("no speak-as conversation to score")
    speakers = sorted({speaker_of(c) for c in items})
    if len(speakers) < 2:
        raise ValueError("speaker preference needs at least two speakers in the conversations")
    requests, spans = [], []
    for c in items:
        right, ask = speaker_of(c), c["messages"][0]["content"]
        line = tokenizer.encode(reference(c)) + [tokenizer.special_ids[END]]
        asks = [ask] + [ask[:-len(right) - 1] + other + "." for other in speakers if other != right]
        spans.append((len(requests), len(asks)))
        requests += [(render_prompt(tokenizer, [{"role": "user", "content": a}]), line)
                     for a in asks]
    lls = [ll for ll, _ in loglikelihood_tokens(model, requests, share_context=False,
                                                progress=progress)]
    per_item = []
    for start, n in spans:
        right, others = lls[start], lls[start + 1:start + n]
        per_item.append(sum(1.0 if right > o else 0.5 if right == o else 0.0 for o in others)
                        / len(others))
    return {"task": "speak-as", "calculator": True, "key": "speak-as (right speaker)",
            "metric": "right_speaker_preferred", "speakers": len(speakers), **summarize(per_item),
            "per_item": per_item}


def score_model(model, tokenizer, conversations: list[dict], tasks=CHAT_TASKS,
                without_calculator=TOOL_TASKS, progress: bool = False) -> list[dict]:
    """Every task's row with the calculator (speak-as also :func:`speaker_preference`'s row), then
    the ``without_calculator`` tasks' rows without it."""
    lines, words = shakespeare_lines(), shakespeare_words()
    rows = [score_task(model, tokenizer, conversations, t, True,
                       progress=progress, lines=lines, words=words)
            for t in tasks]
    if "speak-as" in tasks:
        rows.append(speaker_preference(model, tokenizer, conversations, progress=progress))
    return rows + [score_task(model, tokenizer, conversations, t, False, progress=progress)
                   for t in without_calculator]


def across_seeds(scores: list[float]) -> dict:
    """Several runs' scores of one task: their mean,
    sample standard deviation, lowest and highest."""
    if not scores:
        raise ValueError("no scores to summarise")
    return {"mean": statistics.fmean(scores),
            "std": statistics.stdev(scores) if len(scores) > 1 else float("nan"),
            "min": min(scores), "max": max(scores), "runs": len(scores)}


def before_fine_tuning(model, base_tokenizer):
    """``(model, tokenizer)``: a pretrained GPT (and its tokenizer) as the chat fine-tune starts
    from it (``runs.start_chat_sft_run``: the chat tokenizer, the new rows the mean of
    the old), to score it "before"."""
    tokenizer = chat_tokenizer(base_tokenizer, EXTRA_CHARS)
    return (extend_vocabulary(model, tokenizer.vocab_size - model.config.vocab_size).eval(),
            tokenizer)
