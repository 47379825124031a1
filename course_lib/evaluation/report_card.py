"""A report card for a language model (chapter 16, ``python -m course_lib eval``): bits per byte
on held-out tiny Shakespeare, then every shipped task (:mod:`course_lib.evaluation.tasks`) scored
with its standard error, a 95% bootstrap interval and its baseline (chance for multiple choice, the
majority answer for a generative task).

A task whose text the model's tokenizer cannot encode (digits for a model that only knows
Shakespeare's 65 characters) is listed as skipped when every task is asked for, and is an
error when it was asked for by name.
"""
from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

from ..checkpoint import CheckpointError, load_model, load_tokenizer
from ..data import load_text
from ..tokenizers import describe_chars, unwritable
from .tasks import HELDOUT_START, TASK_NAMES, Task, check_task_names, load_task
from . import (bits_per_byte, bootstrap_interval, exact_match, few_shot_prompt, greedy_generate,
                         mean_stderr, multiple_choice, parse_number)
from ..utils import check_output_file, write_text_atomic

HELDOUT_CHARS = 20_000  # bits per byte are measured on this much held-out text


def heldout_text(chars: int | None = None) -> str:
    """The first ``chars`` (default :data:`HELDOUT_CHARS`) characters of tiny Shakespeare after
    :data:`HELDOUT_START`."""
    text = load_text()
    return text[int(HELDOUT_START * len(text)):][:chars or HELDOUT_CHARS]


def first_word(text: str) -> str:
    """The first word of a generated text (letters and apostrophes), '' if none."""
    found = re.match(r"\s*([A-Za-z']+)", text)
    return found.group(1) if found else ""


PARSERS = {None: None, "first-word": first_word, "number": parse_number}


def cannot_encode(tokenizer, task: Task, shots: int = 0) -> str | None:
    """Why ``tokenizer`` cannot encode ``task``'s texts with ``shots`` worked examples (one line,
    whole: the characters it lacks), or None when it can."""
    missing = unwritable(tokenizer, "".join(task.texts(shots)))
    return f"the tokenizer cannot write {describe_chars(missing)}" if missing else None


def check_shots(task: Task, shots: int, other_fix: str = "") -> None:
    """One error line when ``task`` has fewer training items than ``shots`` worked examples."""
    if shots > len(task.train):
        raise ValueError(f"task {task.name} has {len(task.train)} training items for few-shot "
                         f"examples, not {shots}: give --shots {len(task.train)} or "
                         f"fewer{other_fix}")


def _summary(per_item: list[float], seed: int = 0) -> dict:
    lo, hi = bootstrap_interval(per_item, seed=seed)
    return {"score": sum(per_item) / len(per_item),
            "stderr": mean_stderr(per_item), "interval": [lo, hi]}


def evaluate_task(model, tokenizer, task: Task, limit: int | None = None, shots: int = 0,
                  batch_size: int = 32, progress: bool = False) -> dict:
    """Score ``model`` on ``task``'s first ``limit`` test items, with ``shots`` worked examples
    from its train items before each. Returns the score (``acc``, or ``exact_match``), its standard
    error and bootstrap interval, the chance level and the per-item scores (for paired tests)."""
    items = task.test[:limit] if limit else task.test
    check_shots(task, shots)
    shot_items = task.train[:shots]
    row = {"task": task.name, "kind": task.kind,
           "chance": task.chance, "n": len(items), "shots": shots}
    if task.kind == "choice":
        prefix = "".join(s["context"] + task.delimiter + s["choices"][s["gold"]] + task.separator
                         for s in shot_items)
        scored = multiple_choice(model, tokenizer,
                                 [{**i, "context": prefix + i["context"]} for i in items],
                                 batch_size, progress, delimiter=task.delimiter)
        row.update(metric="acc", **_summary(scored["acc"]), per_item=scored["acc"])
        norm = _summary(scored["acc_norm"])
        row.update(acc_norm=norm["score"], acc_norm_stderr=norm["stderr"],
                   per_item_norm=scored["acc_norm"])
        return row
    shots_text = [(s["prompt"], s.get("solution", s["answer"])) for s in shot_items]
    prompts = [few_shot_prompt(shots_text, i["prompt"], task.separator) for i in items]
    outputs = greedy_generate(model, tokenizer, prompts, task.max_new_tokens,
                              task.stop, batch_size, progress)
    per_item = exact_match(outputs, [i["answer"] for i in items], PARSERS[task.parser])
    row.update(metric="exact_match", **_summary(per_item), per_item=per_item, outputs=outputs)
    return row


def report_card(model, tokenizer, tasks=None, limit: int | None = None, shots: int = 0,
                name: str = "model", heldout_chars: int | None = None,
                progress: bool = False) -> dict:
    """Bits per byte on held-out text and every task's score. ``tasks``: names (a list or
    comma-separated); None means every task, skipping those the tokenizer cannot encode."""
    explicit = tasks is not None
    loaded = [load_task(n) for n in (check_task_names(tasks) if explicit else TASK_NAMES)]
    reasons = {task.name: cannot_encode(tokenizer, task, shots) for task in loaded}
    for task in loaded:  # a task asked for by name that cannot run fails before any work
        if explicit and reasons[task.name]:
            raise ValueError(f"this model's tokenizer cannot encode task {task.name} "
                             f"({reasons[task.name]}): leave --tasks out to run every task it can "
                             "encode")
    # too few worked examples: before any work too, not after the tasks before it
    for task in loaded:
        if not reasons[task.name]:
            check_shots(task, shots, ", or leave it out of --tasks" if explicit else
                        ", or name other tasks in --tasks")
    text = heldout_text(heldout_chars)
    missing = unwritable(tokenizer, text)  # a tokenizer of another alphabet than Shakespeare's
    why_no_bpb = f"the tokenizer cannot write {describe_chars(missing)}" if missing else None
    # before any work, not a card of nothing with exit status 0
    if why_no_bpb and all(reasons.values()):
        raise ValueError(f"nothing to score in {name}: {why_no_bpb} of the held-out Shakespeare, "
                         "and every task needs characters it lacks too; evaluate a model whose "
                         "tokenizer was built from tiny Shakespeare (`train --preset ...`, or "
                         "`--text` on a text with these characters)")
    bpb = None if why_no_bpb else bits_per_byte(model, tokenizer, text, progress=progress)
    rows = []
    for task in loaded:
        if reasons[task.name]:
            rows.append({"task": task.name, "kind": task.kind, "chance": task.chance,
                         "skipped": reasons[task.name]})
        else:
            rows.append(evaluate_task(model, tokenizer, task, limit, shots, progress=progress))
    return {"model": name, "bits_per_byte": bpb, "bits_per_byte_skipped": why_no_bpb,
            "heldout_chars": len(text), "shots": shots, "tasks": rows}


def baseline_name(row: dict) -> str:
    """What a row's ``chance`` is: a multiple-choice task's chance (1 / choices), or a generative
    task's majority baseline (always giving the test set's most frequent answer), not chance."""
    return row.get("baseline") or ("chance" if row["kind"] == "choice" else "majority")


def format_card(card: dict) -> str:
    """The report card as a text table a student can read: each score with its standard error,
    95% bootstrap interval and baseline (named: chance or the majority answer), acc_norm with its
    own, skipped tasks with the reason whole, then one line per task saying what it asks."""
    bpb = card["bits_per_byte"]
    lines = [f"report card: {card['model']}",
             f"bits per byte (held-out tiny Shakespeare, {card['heldout_chars']:,} characters): "
             + (f"{bpb:.3f}" if bpb is not None else f"n/a ({card.get('bits_per_byte_skipped')})"),
             f"{'task':<13} {'metric':<12} {'score':>6} {'+-se':>6} {'95% interval':>15} "
             f"{'baseline':>16} {'n':>4}"]
    for r in card["tasks"]:
        if "skipped" in r:
            lines.append(f"{r['task']:<13} skipped: {r['skipped']}")
            continue
        lo, hi = r["interval"]
        baseline = f"{r['chance']:.3f} {baseline_name(r)}"
        lines.append(f"{r['task']:<13} {r['metric']:<12} {r['score']:6.3f} {r['stderr']:6.3f} "
                     f"{f'[{lo:.3f}, {hi:.3f}]':>15} {baseline:>16} {r['n']:4d}")
        if "acc_norm" in r:
            lo, hi = (bootstrap_interval(r["per_item_norm"]) if r.get("per_item_norm")
                      else (None, None))
            interval = f"[{lo:.3f}, {hi:.3f}]" if lo is not None else ""
            lines.append(f"{'':<13} {'acc_norm':<12} {r['acc_norm']:6.3f} "
                         f"{r['acc_norm_stderr']:6.3f} "
                         f"{interval:>15} {baseline:>16} {r['n']:4d}")
    lines.append("what each task asks:")
    lines += [f"  {r['task']:<13} {r.get('description') or load_task(r['task']).description}"
              for r in card["tasks"]]
    return "\n".join(lines)


def evaluate_checkpoint(path: str | Path, tasks=None, limit: int | None = None,
                        json_path: str | Path | None = None, shots: int = 0, device: str = "cpu",
                        progress: bool = True, more_rows=None) -> dict:
    """``python -m course_lib eval``: load a checkpoint of any decoder kind, print its report card,
    and write it as JSON to ``json_path`` when given (``-``: standard output, the table then goes to
    standard error). Bad arguments fail before any work (the model is not even loaded), ``shots``
    beyond a task's training items and a ``json_path`` that is the checkpoint, a device or a folder
    included (:func:`course_lib.utils.check_output_file`). ``more_rows(model, tokenizer, limit,
    progress)``: rows a later chapter adds to the card when no ``tasks`` are named (the CLI gives
    chapter 17's robustness sets, :func:`course_lib.chat.robustness.card_rows`)."""
    if tasks is not None:
        tasks = check_task_names(tasks)
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be at least 1, got {limit}")
    if shots < 0:
        raise ValueError(f"--shots must be 0 or more, got {shots}")
    asked = [load_task(n) for n in (tasks or TASK_NAMES)]
    short = [task for task in asked if shots > len(task.train)]
    if tasks is not None and short:
        check_shots(short[0], shots, ", or leave it out of --tasks")
    # no task has enough (else report_card checks those it can encode)
    if short and len(short) == len(asked):
        check_shots(max(short, key=lambda task: len(task.train)), shots)
    if json_path is not None:
        check_output_file(json_path, inputs=[path])
    model, ckpt = load_model(path, device)
    if not hasattr(model.config, "block_size") or ckpt.get("model_kind") == "seq2seq":
        raise CheckpointError(f"{path} holds an encoder-decoder ({ckpt.get('model_kind')}), and "
                              "eval scores decoder-only language models: give a checkpoint written "
                              "by `train` or `finetune`")
    card_tokenizer = load_tokenizer(ckpt, path)
    card = report_card(model, card_tokenizer, tasks, limit,
                       shots, name=str(path), progress=progress)
    if more_rows is not None and tasks is None:
        card["tasks"] += more_rows(model, card_tokenizer, limit, progress)
    to_stdout = json_path is not None and str(json_path) == "-"
    print(format_card(card), file=sys.stderr if to_stdout else sys.stdout)  # stdout stays pure JSON
    if json_path is not None:
        _write_json(json_path, card, inputs=[path])
        if not to_stdout:
            print(f"wrote {json_path}")
    return card


def _write_json(path: str | Path, card: dict, inputs=()) -> None:
    """The card as JSON, atomically (a reader never sees half a file), never over an input. JSON has
    no infinity or NaN (Python's ``Infinity`` token breaks other readers: a counting bigram with
    smoothing 0 has infinite bits per byte), so such a number is written as the string "Infinity",
    "-Infinity" or "NaN", which Python's ``float`` and JavaScript's ``Number`` read back."""
    write_text_atomic(path, json.dumps(_strict_json(card), indent=1, allow_nan=False) + "\n",
                      inputs=inputs)


def _strict_json(value):
    """``value`` with every float that is not finite
    replaced by its name (see :func:`_write_json`)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(v) for v in value]
    return value
