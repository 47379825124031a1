"""A chat template: a conversation as one sequence of token ids, with the roles marked (chapter 17).

A chat model is still a next-token predictor. What makes it answer is the format of what it
reads: each message starts with a role token and ends with the end-of-turn token::

    <|system|>You are a small GPT.<|end|><|user|>What is 12+7?<|end|>
    <|assistant|><|calc|>12+7<|/calc|><|result|>19<|/result|>19<|end|>

The role tokens and ``<|end|>`` are **special tokens**: new ids that no text encodes to, so a
user who types "<|assistant|>" writes those characters, never the token (no injection through
the text). The assistant may call the calculator by writing an expression between ``<|calc|>``
and ``<|/calc|>``; the chat engine (:mod:`course_lib.chat.engine`) answers between
``<|result|>`` and ``<|/result|>``, and the assistant goes on.

:class:`ChatTokenizer` wraps any tokenizer of the course (characters or byte-level BPE) and
appends the special ids after its vocabulary, so the pretrained model keeps every id it knows
and grows only new rows (``course_lib.lora_gpt.extend_vocabulary``, as chapter 15 does).

**The loss mask.** Fine-tuning trains on what the assistant writes, in every assistant turn,
and on nothing else: its text, its calculator calls (``<|calc|>`` ... ``<|/calc|>``) and the
``<|end|>`` that closes its turn (the model must learn to stop). Not trained: the system and
user messages, every role token (the engine writes ``<|assistant|>`` itself), and the
calculator's results (the tool writes them, not the model). :func:`render` returns this mask.

**Too long for the context** (:func:`fit_to_context`): a conversation is never cut inside a
turn (half a turn would teach the model to start mid-sentence). The oldest exchanges (a user
message and the assistant's answer) are dropped, the system message kept, until it fits; if the
newest exchange alone does not fit, it is refused with a ``ConversationTooLong`` error. Training
(``policy="refuse"``) refuses every conversation that does not fit as it is.

Shapes: T tokens of one conversation; B conversations in a batch.
"""
from __future__ import annotations

import re

import torch

from ..tokenizers import CharTokenizer, register_tokenizer, tokenizer_from_dict, train_tokenizer
from ..utils import IGNORE_INDEX

SYSTEM, USER, ASSISTANT, END = "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
CALC, CALC_END, RESULT, RESULT_END = "<|calc|>", "<|/calc|>", "<|result|>", "<|/result|>"
CHAT_SPECIALS = (SYSTEM, USER, ASSISTANT, END, CALC, CALC_END, RESULT, RESULT_END)
ROLE_TOKENS = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}
# an assistant's non-text parts
PART_TOKENS = {"tool": (CALC, CALC_END), "result": (RESULT, RESULT_END)}
POLICIES = ("refuse", "drop-oldest")


class ConversationTooLong(ValueError):
    """A conversation (or its newest exchange) has more tokens than the context holds."""


@register_tokenizer("chat")
class ChatTokenizer:
    """A tokenizer (``base``) plus the chat's special tokens, whose ids come after the base's:
    ``base.vocab_size``, ``base.vocab_size + 1``, ... in the order of ``specials``.

    ``encode`` is the base's (a text never encodes to a special id); ``decode`` writes a special
    id by its name, or leaves it out with ``skip_special=True``.
    """

    def __init__(self, base, specials=CHAT_SPECIALS):
        specials = tuple(specials)
        if isinstance(base, ChatTokenizer):
            raise ValueError("this tokenizer already has the chat's special tokens: wrap its base, "
                             "not it")
        if len(set(specials)) != len(specials) or not all(isinstance(s, str) and s
                                                          for s in specials):
            raise ValueError(f"special tokens must be distinct non-empty strings, got {specials!r}")
        self.base, self.specials = base, specials
        self.base_vocab_size = base.vocab_size
        self.special_ids = {s: self.base_vocab_size + i
                            for i, s in enumerate(specials)}  # name -> id
        self.special_names = {i: s for s, i in self.special_ids.items()}  # id -> name

    @property
    def vocab_size(self) -> int:
        return self.base_vocab_size + len(self.specials)

    def encode(self, text: str) -> list[int]:
        return self.base.encode(text)

    def decode(self, ids, skip_special: bool = False) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        out, run = [], []  # run: base ids decoded together (a BPE character may span several ids)
        for i in ids:
            if i in self.special_names:
                out.append(self.base.decode(run))
                out.append("" if skip_special else self.special_names[i])
                run = []
            else:
                run.append(i)
        out.append(self.base.decode(run))
        return "".join(out)

    def to_dict(self) -> dict:
        return {"type": "chat", "base": self.base.to_dict(), "specials": list(self.specials)}

    @classmethod
    def from_dict(cls, d: dict) -> "ChatTokenizer":
        if d.get("type") != "chat" or "base" not in d:
            raise ValueError(f"not a ChatTokenizer description: {sorted(d)}")
        return cls(tokenizer_from_dict(d["base"]), d.get("specials", CHAT_SPECIALS))

    @classmethod
    def train(cls, text: str, base="char", **options) -> "ChatTokenizer":
        """A base tokenizer of type ``base`` trained on ``text``
        (``options`` are its own), plus the specials."""
        spec = {"type": base, **options} if isinstance(base, str) else {**base, **options}
        return cls(train_tokenizer(spec, text))

    def __repr__(self) -> str:
        return f"ChatTokenizer(vocab_size={self.vocab_size}, base={self.base!r})"


def chat_tokenizer(base, extra_chars: str = "") -> ChatTokenizer:
    """The chat tokenizer of a pretrained model's ``base`` tokenizer. A character tokenizer first
    gets the characters of ``extra_chars`` it lacks, appended in sorted order (old ids keep their
    meaning); a byte-level BPE spells any text already. The specials come last."""
    if isinstance(base, ChatTokenizer):
        return base
    if isinstance(base, CharTokenizer):
        new = sorted(set(extra_chars) - set(base.chars))
        base = CharTokenizer(base.chars + new, base.specials)
    return ChatTokenizer(base)


# --- conversations: checked, and in one canonical form --------------------------------------------


def check_conversation(messages) -> list[dict]:
    """``messages``, checked: a list of ``{"role", "content"}`` dicts, an optional system message
    first, then user and assistant in turn, starting with the user. A user or system content is
    a string; an assistant's is a string or a list of parts ``{"type": "text" | "tool" |
    "result", "text": str}``. A ValueError names the first thing wrong."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("a conversation is a non-empty list of messages {'role': ..., 'content': "
                         "...}")
    start = 1 if isinstance(messages[0], dict) and messages[0].get("role") == "system" else 0
    for n, m in enumerate(messages):
        if not isinstance(m, dict) or set(m) != {"role", "content"}:
            raise ValueError(f"message {n} must be a dict with the keys 'role' and 'content', got "
                             f"{m!r:.80}")
        expected = "system" if n < start else ("user", "assistant")[(n - start) % 2]
        if m["role"] != expected:
            raise ValueError(f"message {n} has role {m['role']!r} where {expected!r} is due: a "
                             "conversation is an optional system message, then user and assistant "
                             "in turn")
        for part in _parts(m):
            if (not isinstance(part.get("text"), str)
                    or part.get("type") not in ("text", *PART_TOKENS)):
                raise ValueError(f"message {n} has a bad part {part!r:.80}: parts are {{'type': "
                                 "'text', 'tool' or "
                                 "'result', 'text': str}, and only the assistant's content may "
                                 "have parts")
    return list(messages)


def _parts(message: dict) -> list[dict]:
    content = message["content"]
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if (message["role"] == "assistant" and isinstance(content, list)
            and all(isinstance(p, dict) for p in content)):
        return content
    return [{"type": None, "text": None}]  # refused by check_conversation


def normalize(messages) -> list[dict]:
    """The canonical form :func:`parse` returns: adjacent text parts merged, empty text parts
    dropped, and an assistant content that is text alone written as a plain string."""
    out = []
    for m in check_conversation(messages):
        parts = []
        for p in _parts(m):
            if p["type"] == "text" and parts and parts[-1]["type"] == "text":
                parts[-1] = {"type": "text", "text": parts[-1]["text"] + p["text"]}
            elif p["type"] != "text" or p["text"]:
                parts.append(dict(p))
        if all(p["type"] == "text" for p in parts):
            parts = "".join(p["text"] for p in parts)
        out.append({"role": m["role"], "content": parts})
    return out


# --- rendering, with the assistant-only mask, and back --------------------------------------------


def render(tokenizer: ChatTokenizer, messages) -> tuple[list[int], list[bool]]:
    """``(ids, trained)``, two lists of length T: the conversation's token ids, and for each
    token whether fine-tuning learns to write it (the rule in the module's docstring)."""
    ids, trained = [], []
    for m in check_conversation(messages):
        m_ids, m_trained = render_message(tokenizer, m)
        ids += m_ids
        trained += m_trained
    return ids, trained


def render_message(tokenizer: ChatTokenizer, message: dict) -> tuple[list[int], list[bool]]:
    """One message of a checked conversation: its role
    token, content and ``<|end|>``, with the mask."""
    sp = tokenizer.special_ids
    by_assistant = message["role"] == "assistant"
    ids, trained = [sp[ROLE_TOKENS[message["role"]]]], [False]
    for part in _parts(message):
        if part["type"] == "text":
            new, learn = tokenizer.encode(part["text"]), by_assistant
        else:
            opener, closer = PART_TOKENS[part["type"]]
            new = [sp[opener]] + tokenizer.encode(part["text"]) + [sp[closer]]
            # the assistant writes the call; the calculator the result
            learn = part["type"] == "tool"
        ids += new
        trained += [learn] * len(new)
    return ids + [sp[END]], trained + [by_assistant]


def render_prompt(tokenizer: ChatTokenizer, messages) -> list[int]:
    """The ids a model reads before it answers: the conversation (ending with the user's message)
    and the ``<|assistant|>`` token that opens its turn."""
    messages = check_conversation(messages)
    if messages[-1]["role"] != "user":
        raise ValueError("a prompt ends with the user's message: the assistant answers it")
    return render(tokenizer, messages)[0] + [tokenizer.special_ids[ASSISTANT]]


def parse(tokenizer: ChatTokenizer, ids) -> list[dict]:
    """The conversation that :func:`render` turned into ``ids`` (in :func:`normalize`'s form)."""
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    names = tokenizer.special_names
    roles = {tok: role for role, tok in ROLE_TOKENS.items()}
    closers = {opener: (kind, closer) for kind, (opener, closer) in PART_TOKENS.items()}
    messages, i = [], 0
    while i < len(ids):
        if names.get(ids[i]) not in roles:
            raise ValueError(f"token {i} should open a message with a role token "
                             f"({', '.join(roles)}), got "
                             f"{tokenizer.decode(ids[i:i + 1])!r}")
        role, parts, i = roles[names[ids[i]]], [], i + 1
        while i < len(ids) and names.get(ids[i]) != END:
            i = _parse_part(tokenizer, ids, i, closers, parts)
        if i == len(ids):
            raise ValueError(f"the last message ({role}) is not closed by {END}")
        if role != "assistant" and any(p["type"] != "text" for p in parts):
            raise ValueError(f"a {role} message holds a calculator part: only the assistant's may")
        messages.append({"role": role, "content": parts if role == "assistant"
                         else "".join(p["text"] for p in parts)})
        i += 1
    return normalize(messages)


def _parse_part(tokenizer, ids: list[int], i: int, closers: dict, parts: list) -> int:
    """Append the part that starts at token ``i`` (text, or a tool call or result with its two
    tokens) to ``parts``; return where the next part starts."""
    names = tokenizer.special_names
    if ids[i] not in names:  # text: up to the next special token
        j = i
        while j < len(ids) and ids[j] not in names:
            j += 1
        parts.append({"type": "text", "text": tokenizer.decode(ids[i:j])})
        return j
    if names[ids[i]] not in closers:
        raise ValueError(f"unexpected {names[ids[i]]} at token {i} inside a message")
    kind, closer = closers[names[ids[i]]]
    j = i + 1
    while j < len(ids) and ids[j] not in names:
        j += 1
    if j == len(ids) or names[ids[j]] != closer:
        raise ValueError(f"{names[ids[i]]} at token {i} is not closed by {closer}")
    parts.append({"type": kind, "text": tokenizer.decode(ids[i + 1:j])})
    return j + 1


# --- too long for the context ---------------------------------------------------------------------


def exchanges(messages) -> tuple[list[dict], list[list[dict]]]:
    """``(system, exchanges)``: the system message (a list of 0 or 1) and the conversation cut
    into exchanges, each a user message and what the assistant answered."""
    messages = check_conversation(messages)
    start = 1 if messages[0]["role"] == "system" else 0
    rest = messages[start:]
    return messages[:start], [rest[i:i + 2] for i in range(0, len(rest), 2)]


def fit_to_context(tokenizer: ChatTokenizer, messages, max_tokens: int, policy: str = "drop-oldest",
                   reserve: int = 0) -> tuple[list[dict], int]:
    """``(messages, dropped)``: the conversation made to fit ``max_tokens`` tokens (with
    ``reserve`` more left free, e.g. for the reply and its ``<|assistant|>`` token), and how many
    exchanges were dropped. ``policy="drop-oldest"`` drops the oldest exchanges (never the system
    message, never part of a turn); ``"refuse"`` drops nothing. Either raises
    :class:`ConversationTooLong` when what is left still does not fit."""
    system, turns = exchanges(messages)
    lengths = [sum(len(render_message(tokenizer, m)[0]) for m in ex) for ex in turns]
    dropped = exchanges_to_drop(len(render(tokenizer, system)[0]) if system else 0,
                                lengths, max_tokens, policy, reserve)
    return system + [m for ex in turns[dropped:] for m in ex], dropped


def exchanges_to_drop(system_length: int, lengths: list[int], max_tokens: int,
                      policy: str = "drop-oldest", reserve: int = 0) -> int:
    """How many of the oldest exchanges (of ``lengths`` tokens each, after a system message of
    ``system_length``) :func:`fit_to_context`'s rule drops; the chat engine applies the same rule
    to the tokens it holds."""
    if policy not in POLICIES:
        raise ValueError(f"policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    budget, dropped = max_tokens - reserve, 0
    while system_length + sum(lengths[dropped:]) > budget:
        if policy == "refuse" or dropped >= len(lengths) - 1:
            n = system_length + sum(lengths[dropped:])
            what = "the conversation" if policy == "refuse" else "its newest exchange alone"
            raise ConversationTooLong(f"{what} takes {n} "
                                      f"tokens{f' plus {reserve} kept free' if reserve else ''}, "
                                      f"more than the context's {max_tokens}: write a shorter "
                                      "message (or start a new conversation)")
        dropped += 1
    return dropped


# The follow-up questions of the training conversations (course_lib.chat.data's _follow_up), which
# mean nothing without the exchange before them: the chat engine drops such an exchange together
# with the one it follows (course_lib.chat.engine)
FOLLOW_UP = re.compile(r"(plus|minus|times) \d+\??|how many letters\??|its length\??|which "
                       r"(year|month|day)\??", re.IGNORECASE)


def is_follow_up(text: str) -> bool:
    """Whether the user's ``text`` is one of the training conversations' follow-up questions
    ("Plus 5?", "How many letters?", "Which year?", ...: the second exchange of a follow-up
    conversation), which a model can answer only with the exchange it follows."""
    return bool(FOLLOW_UP.fullmatch(text.strip()))


# --- training examples ----------------------------------------------------------------------------


def training_pair(ids: list[int], trained: list[bool]) -> tuple[torch.Tensor, torch.Tensor]:
    """One conversation as next-token inputs x (T - 1,) and targets y (T - 1,): y is ids shifted
    by one, IGNORE_INDEX wherever the target is not the assistant's (``trained`` False)."""
    if len(ids) != len(trained) or len(ids) < 2:
        raise ValueError(f"need ids and trained of one length >= 2, got {len(ids)} and "
                         f"{len(trained)}")
    x = torch.tensor(ids[:-1], dtype=torch.long)
    y = torch.tensor([t if keep else IGNORE_INDEX for t, keep in zip(ids[1:], trained[1:])],
                     dtype=torch.long)
    return x, y


def collate(pairs: list[tuple[torch.Tensor, torch.Tensor]],
            pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs of :func:`training_pair` -> x (B, T), y (B, T), padded on the right to the longest:
    x with ``pad_id`` and y with IGNORE_INDEX (a causal
    model never looks right: pads change nothing)."""
    T = max(len(x) for x, _ in pairs)
    x = torch.full((len(pairs), T), pad_id, dtype=torch.long)
    y = torch.full((len(pairs), T), IGNORE_INDEX, dtype=torch.long)
    for row, (xi, yi) in enumerate(pairs):
        x[row, :len(xi)], y[row, :len(yi)] = xi, yi
    return x, y
