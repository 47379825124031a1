"""Rewards computed by code, groups of sampled answers, and preference pairs from a model's own
samples (chapter 18).

**The task.** Two-digit addition without a calculator, ``"64+91="`` -> ``"155"`` then END: its
answer is checked by code, and small models get it partly right. The test items are chapter 16's
frozen ``arithmetic`` task (:func:`course_lib.evaluation.tasks.load_task`), which its harness scores
with intervals; training prompts are every other pair of two-digit numbers.

**Rewards.** A reward is a function ``reward(prompt, completion) -> float`` of the texts.
:func:`exact_answer_reward` gives 1 for the right sum and 0 otherwise. :func:`format_reward`
gives 1 to *any* number followed by END: a reward that can be hacked, on purpose - a policy
trained on it learns to write a number, any number, and its accuracy need not move at all.
:func:`units_digit_reward` pays for the right last digit: a proxy that agrees with the exact reward
on every right answer and also pays a tenth of the wrong ones.

**Samples.** :func:`sample_group` draws G answers per prompt from one ``torch.Generator``, so a
run that stores ``generator.get_state()`` in its checkpoint draws the same answers when it
resumes. :func:`score_groups` rewards them and turns the rewards into GRPO's advantages;
:func:`preference_pairs` makes DPO's (chosen, rejected) pairs from them: a right and a wrong
answer of the model itself to the same prompt.

Shapes: P prompts, G answers per prompt, N = P * G answers.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass

import torch

from ..evaluation.tasks import load_task
from ..generate import generate
from .grpo import group_advantages
from .dpo import MAX_GROUP_SIZE

END = "\n"  # an answer ends with a newline (chapter 16's tasks stop there)
_SUM = re.compile(r"^\s*(-?\d+)\s*([-+*])\s*(-?\d+)\s*=\s*$")
_NUMBER = re.compile(r"^-?\d{1,6}$")


# --- the task -----------------------------------------------------------------------------------


def arithmetic_items(split: str = "train", seed: int = 0) -> list[dict]:
    """Items ``{"prompt": "a+b=", "answer": "c"}`` of two-digit addition.

    ``"test"``: the 200 held-out items of chapter 16's frozen ``arithmetic`` task, in its order.
    ``"train"``: every other pair (a, b) with 10 <= a, b <= 99, shuffled by ``seed``.
    """
    test = load_task("arithmetic").test
    if split == "test":
        return [dict(item) for item in test]
    if split != "train":
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    held_out = {item["prompt"] for item in test}
    items = [{"prompt": f"{a}+{b}=", "answer": str(a + b)} for a in range(10, 100)
             for b in range(10, 100)
             if f"{a}+{b}=" not in held_out]
    random.Random(seed).shuffle(items)
    return items


def expected_answer(prompt: str) -> str:
    """The right answer to ``"a+b="`` (also ``-`` and ``*``), as text."""
    m = _SUM.match(prompt)
    if m is None:
        raise ValueError(f"not an arithmetic prompt: {prompt!r}; expected the form 'a+b=' (or "
                         "a-b=, a*b=)")
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    return str({"+": a + b, "-": a - b, "*": a * b}[op])


def answer_text(completion: str) -> str | None:
    """What the model answered: the completion up to END, or None when it never wrote END (cut
    off at the length limit: no answer)."""
    if END not in completion:
        return None
    return completion.split(END, 1)[0]


# --- rewards ------------------------------------------------------------------------------------


def exact_answer_reward(prompt: str, completion: str) -> float:
    """1.0 when the answer (the completion up to END, spaces ignored) is the right number, else
    0.0."""
    answer = answer_text(completion)
    return float(answer is not None and answer.strip() == expected_answer(prompt))


def format_reward(prompt: str, completion: str) -> float:
    """1.0 for any number followed by END, right or wrong. Hackable on purpose: it rewards the
    form of an answer and never checks it."""
    answer = answer_text(completion)
    return float(answer is not None and _NUMBER.match(answer.strip()) is not None)


def units_digit_reward(prompt: str, completion: str) -> float:
    """1.0 for a number followed by END whose last digit is the right sum's last digit. A proxy:
    every right answer earns it, and so does a wrong one that ends in the right digit (a tenth of
    all numbers), so pushing it up need not push the accuracy up (chapter 18's reward hacking)."""
    answer = answer_text(completion)
    if answer is None or _NUMBER.match(answer.strip()) is None:
        return 0.0
    return float(answer.strip()[-1] == expected_answer(prompt)[-1])


REWARDS = {"exact": exact_answer_reward, "format": format_reward, "units": units_digit_reward}


def get_reward(name: str):
    """The reward function called ``name`` (``exact``, ``format`` or ``units``)."""
    if name not in REWARDS:
        raise ValueError(f"unknown reward {name!r}; choose one of: {', '.join(REWARDS)}")
    return REWARDS[name]


# --- groups of samples --------------------------------------------------------------------------


@dataclass
class Group:
    """G sampled answers to one prompt: token lists (each up to and including its first END, or
    cut at the length limit), their texts and their rewards."""
    prompt: str
    prompt_ids: list[int]
    completion_ids: list[list[int]]
    completions: list[str]
    rewards: list[float]


def cut_at_end(ids: list[int], end_id: int) -> list[int]:
    """``ids`` up to and including the first ``end_id`` (all of them if there is none): the
    model is trained to stop, so the END it wrote is part of its answer."""
    return ids[:ids.index(end_id) + 1] if end_id in ids else list(ids)


def sample_group(model, tokenizer, prompt: str, group_size: int, max_new_tokens: int,
                 generator: torch.Generator,
                 temperature: float = 1.0) -> tuple[list[int], list[list[int]]]:
    """G answers to ``prompt``: its token ids and G completion token lists (:func:`cut_at_end`).

    All randomness comes from ``generator``: the same state gives the same answers, so a run
    that saves ``generator.get_state()`` resumes exactly.
    """
    group = sample_groups(model, tokenizer, [prompt], group_size, max_new_tokens, generator, None,
                          temperature)[0]
    return group.prompt_ids, group.completion_ids


def sample_groups(model, tokenizer, prompts: list[str], group_size: int, max_new_tokens: int,
                  generator: torch.Generator, reward=exact_answer_reward, temperature: float = 1.0,
                  max_rows: int = MAX_GROUP_SIZE) -> list[Group]:
    """G answers to each prompt, rewarded by ``reward(prompt, completion_text)`` (None: no rewards).

    Prompts of the same token length are sampled together, G rows each, up to ``max_rows`` rows
    per batch (two-digit sums all have one length: one batch), all from the one ``generator``.
    """
    if group_size < 1 or max_rows < group_size:
        raise ValueError(f"group_size must be at least 1 and at most max_rows ({max_rows}), got "
                         f"{group_size}")
    encoded = [tokenizer.encode(p) for p in prompts]
    end_id = tokenizer.encode(END)[0]
    device = next(model.parameters()).device
    completions: dict[int, list[list[int]]] = {}
    by_length: dict[int, list[int]] = {}
    for i, ids in enumerate(encoded):
        by_length.setdefault(len(ids), []).append(i)
    per_batch = max_rows // group_size
    for length, members in by_length.items():
        for start in range(0, len(members), per_batch):
            chunk = members[start:start + per_batch]
            idx = torch.tensor([encoded[i] for i in chunk for _ in range(group_size)],
                               dtype=torch.long,
                               device=device)  # (len(chunk) * G, Tp)
            out = generate(model, idx, max_new_tokens, temperature=temperature, generator=generator,
                           use_cache=True)[:, length:].tolist()
            for j, i in enumerate(chunk):
                completions[i] = [cut_at_end(row, end_id)
                                  for row in out[j * group_size:(j + 1) * group_size]]
    groups = []
    for i, prompt in enumerate(prompts):
        texts = [tokenizer.decode(ids) for ids in completions[i]]
        rewards = [float(reward(prompt, t)) for t in texts] if reward is not None else []
        groups.append(Group(prompt, encoded[i], completions[i], texts, rewards))
    return groups


def score_groups(groups: list[Group],
                 scale_rewards: str = "group") -> tuple[torch.Tensor, torch.Tensor]:
    """The rewards (N,) of the groups' answers, side by side, and GRPO's advantages (N,)
    (:func:`course_lib.align.grpo.group_advantages`)."""
    if not groups:
        raise ValueError("no groups to score")
    sizes = {len(g.rewards) for g in groups}
    if len(sizes) != 1:
        raise ValueError(f"every group needs the same number of answers, got sizes {sorted(sizes)}")
    rewards = torch.tensor([r for g in groups for r in g.rewards])
    return rewards, group_advantages(rewards, sizes.pop(), scale_rewards)


def flatten(groups: list[Group]) -> tuple[list[list[int]], list[list[int]]]:
    """The groups' (prompt ids, completion ids), one row per answer (N rows), for
    :func:`course_lib.align.grpo.grpo_batch_loss`."""
    prompts = [g.prompt_ids for g in groups for _ in g.completion_ids]
    return prompts, [c for g in groups for c in g.completion_ids]


def greedy_answers(model, tokenizer, items: list[dict], max_new_tokens: int = 6,
                   batch_size: int = 100) -> list[str]:
    """The greedy completion of ``model`` to each item's ``"prompt"`` (up to and including its
    first END, or cut at ``max_new_tokens``), in the items' order. Prompts of one length are
    answered as one batch."""
    if not items:
        raise ValueError("no items to answer")
    device = next(model.parameters()).device
    end_id = tokenizer.encode(END)[0]
    answers: dict[int, str] = {}
    by_length: dict[int, list[int]] = {}
    for i, item in enumerate(items):
        by_length.setdefault(len(tokenizer.encode(item["prompt"])), []).append(i)
    for members in by_length.values():
        for start in range(0, len(members), batch_size):
            chunk = members[start:start + batch_size]
            idx = torch.tensor([tokenizer.encode(items[i]["prompt"]) for i in chunk],
                               dtype=torch.long, device=device)
            out = generate(model, idx, max_new_tokens, temperature=0.0,
                           use_cache=True)[:, idx.size(1):]
            for i, row in zip(chunk, out.tolist()):
                answers[i] = tokenizer.decode(cut_at_end(row, end_id))
    return [answers[i] for i in range(len(items))]


def greedy_scores(model, tokenizer, items: list[dict], reward=exact_answer_reward,
                  max_new_tokens: int = 6, batch_size: int = 100) -> list[float]:
    """``reward`` of the greedy answer to each item (one value per item: chapter 16's intervals
    are computed from these)."""
    answers = greedy_answers(model, tokenizer, items, max_new_tokens, batch_size)
    return [float(reward(item["prompt"], answer)) for item, answer in zip(items, answers)]


def greedy_reward(model, tokenizer, items: list[dict], reward=exact_answer_reward,
                  max_new_tokens: int = 6, batch_size: int = 100) -> float:
    """Mean ``reward`` of the greedy answers of ``model`` to ``items`` (``{"prompt", ...}``): with
    the exact reward, the share answered right."""
    scores = greedy_scores(model, tokenizer, items, reward, max_new_tokens, batch_size)
    return sum(scores) / len(scores)


# --- preference pairs from the model's own samples ----------------------------------------------


def preference_pairs(groups: list[Group], max_pairs_per_prompt: int = 1,
                     threshold: float = 0.5) -> list[tuple[list[int], list[int], list[int]]]:
    """DPO pairs ``(prompt_ids, chosen_ids, rejected_ids)`` from sampled groups.

    An answer rewarded above ``threshold`` is right, the others wrong. A prompt gives pairs only
    when the model answered it both ways (all right or all wrong: no preference to learn). Pairs
    match the i-th distinct right answer with the i-th distinct wrong answer, in sampling order,
    up to ``max_pairs_per_prompt``.
    """
    pairs = []
    for g in groups:
        right, wrong = [], []
        for ids, r in zip(g.completion_ids, g.rewards):
            side = right if r > threshold else wrong
            if ids not in side:
                side.append(ids)
        for chosen, rejected in list(zip(right, wrong))[:max_pairs_per_prompt]:
            pairs.append((g.prompt_ids, chosen, rejected))
    return pairs
