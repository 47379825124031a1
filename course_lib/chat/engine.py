"""Talking to a chat model: the engine behind the
terminal, the notebook and the web page (chapter 17).

:class:`ChatEngine` holds one conversation as the token ids the model has read, and the model's
KV cache of them (:class:`course_lib.attention.KVCache`, chapter 8's), **kept across turns**:
a new message is the only thing the model reads before it answers, not the whole conversation
again. :meth:`ChatEngine.stream` yields the reply as it is written, in :class:`Piece` s:

- ``text``: a piece of the answer (tokens decoded as they come; a BPE character split over
  several tokens is held back until it is whole);
- ``tool`` and ``result``: the assistant wrote an expression between ``<|calc|>`` and
  ``<|/calc|>``; the engine evaluated it with :func:`course_lib.chat.calculator.calculate` and fed
  ``<|result|>`` value ``<|/result|>`` back into the context, and the model goes on;
- ``notice``: what the engine did to the conversation, said plainly.

A reply ends at the end-of-turn token ``<|end|>`` (or at any other role token: the model left
the format), after ``max_reply_tokens`` sampled tokens, or when the context is full.

**When the conversation outgrows the context** (the model's ``block_size``): before a reply,
the oldest exchanges are dropped (the rule of :func:`course_lib.chat.template.fit_to_context`:
whole exchanges, the system message kept) until the conversation and ``min_reply_room`` tokens
for the reply fit (default 8, an eighth of a context under 64); a reply that needs more room
drops the oldest exchanges as it goes (never the message it answers). **A follow-up goes with
the exchange it follows**: an exchange whose message is a follow-up (``follow_up(text)``, by
default :func:`course_lib.chat.template.is_follow_up`: "Plus 5?", "How many letters?", ...) is
never kept without the one before it, since a model reads it as nothing but a bare question (no
training conversation starts with one); and during a reply, the exchange a follow-up being
answered follows is not dropped (the reply is cut instead). Each drop is said in a notice that
names the messages dropped, and the cache is filled again from what is left. A reply that fills the
context with nothing left to drop is cut there, with a notice. A message too long to fit even alone
is refused (``ConversationTooLong``), and the conversation stays as it was.

Sampling is :func:`course_lib.generate.sample_next`'s (temperature, top-k, top-p; temperature 0
is greedy), drawn from the engine's own generator (``seed``).

Shapes: T tokens, V vocabulary size; the engine runs one conversation (batch 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from ..attention import KVCache
from .calculator import calculate
from .template import (ASSISTANT, CALC, CALC_END, END, RESULT, RESULT_END,
                       ROLE_TOKENS, ChatTokenizer, check_conversation,
                       exchanges_to_drop, is_follow_up, normalize, render_message)
from ..checkpoint import load_model, load_tokenizer
from ..data import sha256_of
from ..generate import check_sampling_args, sample_next
from ..model import GPT
from ..tokenizers import CharTokenizer
from ..utils import check_seed

# The chat model `chat` loads: chat-char-cpu-4 (the first chat model trained further, its context
# lengthened to 256 tokens, 6000 GPU steps with chat.variety's conversations) trained 1500 CPU steps
# more with --count-first worked-all: run cpu4-wallL-s1 of records/chat_count_first_runs.json
CHAT_MODEL_PATH = Path(__file__).parent.parent / "weights" / "chat-char-cpu-5.pt"
CHAT_MODEL_SHA256 = "cf441f8bfbbaacf12102740b80e29de1dad5102c1bc18ff66ec3f951addc3c8a"
# The first chat model (64-token context, the first conversations: chat_v1.json), kept for the
# records that measured it and the runs that start from it (chapter 18): benchmarks/chat_sft.py, the
# 1000-step seed-0 run
CHAT_V1_MODEL_PATH = CHAT_MODEL_PATH.with_name("chat-char-cpu.pt")
CHAT_V1_MODEL_SHA256 = "bda0cd5df7f52497e736b8d94ac18ebf617ba6ec450a2a09d5c645334c183e63"
MAX_TOOL_CALLS = 4  # calculator calls in one reply: a model that loops on the tool is stopped
# What the terminal and the web page show where the model wrote nothing, so that an empty reply is
# not taken for a broken chat (the scores count it as wrong: it holds no answer)
NO_REPLY = "(no reply: the model ended its turn at once)"


@dataclass(frozen=True)
class Piece:
    """One piece of a reply as it streams: ``kind`` is "text", "tool", "result" or "notice"."""
    kind: str
    text: str


class ChatEngine:
    """One conversation with ``model`` (a GPT whose vocabulary is ``tokenizer``'s, a
    :class:`~course_lib.chat.template.ChatTokenizer`). ``use_cache=False`` re-reads the whole
    conversation for every token (the reference the cached engine is checked against)."""

    def __init__(self, model, tokenizer: ChatTokenizer, *, system: str | None = None,
                 temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 seed: int = 0, max_reply_tokens: int = 200, min_reply_room: int | None = None,
                 use_cache: bool = True, calculator=calculate, follow_up=is_follow_up):
        if not isinstance(tokenizer, ChatTokenizer):
            raise ValueError("a chat needs a ChatTokenizer (the chat template's special tokens), "
                             f"got {type(tokenizer).__name__}: fine-tune the model into a chat "
                             "model first (chat-sft)")
        if tokenizer.vocab_size != model.config.vocab_size:
            raise ValueError(f"the tokenizer has {tokenizer.vocab_size} tokens and the model "
                             f"{model.config.vocab_size}: they do not belong together (load both "
                             "from one checkpoint)")
        check_sampling_args(temperature, top_k, top_p, max_reply_tokens)
        if max_reply_tokens < 1:
            raise ValueError(f"max_reply_tokens must be at least 1 (the most tokens in one reply), "
                             f"got {max_reply_tokens}")
        # room for a short answer; a longer one makes more room as it goes
        if min_reply_room is None:
            min_reply_room = min(8, max(1, model.config.block_size // 8))
        if not isinstance(min_reply_room, int) or not 1 <= min_reply_room < model.config.block_size:
            raise ValueError("min_reply_room must be an integer in [1, block_size "
                             f"{model.config.block_size}), got {min_reply_room!r}")
        self.model, self.tokenizer, self.system = model.eval(), tokenizer, system
        self.sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p)
        self.max_reply_tokens, self.min_reply_room, self.use_cache = (max_reply_tokens,
                                                                       min_reply_room, use_cache)
        self.calculator, self.follow_up = calculator, follow_up or (lambda text: False)
        self.device = next(model.parameters()).device
        self.generator = torch.Generator(device=self.device).manual_seed(check_seed(seed))
        self.sp = tokenizer.special_ids
        self.stop_ids = {self.sp[t] for t in (END, *ROLE_TOKENS.values(), RESULT, RESULT_END)}
        self.reset()

    # --- the conversation -------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget the conversation (the system message stays) and empty the cache."""
        self.messages: list[dict] = []
        # the ids of each message, exactly as the model read them
        self.turn_ids: list[list[int]] = []
        if self.system is not None:
            self.messages.append({"role": "system", "content": self.system})
            self.turn_ids.append(render_message(self.tokenizer, self.messages[0])[0])
        self.empty_cache()

    def empty_cache(self) -> None:
        """Empty the KV cache, keeping the conversation: the next reply reads it all again."""
        self.cache = KVCache(self.model.config.n_layer, self.model.config.block_size)
        self.fed: list[int] = []  # the ids the cache holds

    @property
    def ids(self) -> list[int]:
        """The whole conversation as the model reads it."""
        return [i for turn in self.turn_ids for i in turn]

    @property
    def block_size(self) -> int:
        return self.model.config.block_size

    @property
    def longest_message(self) -> int:
        """The most tokens a user's message may hold: alone after the system message, with its role
        token, its ``<|end|>``, ``<|assistant|>`` and
        ``min_reply_room`` tokens, it fills the context."""
        system = len(self.turn_ids[0]) if self.system is not None else 0
        return self.block_size - system - 2 - 1 - self.min_reply_room

    def about(self) -> str:
        """What a user must know to talk to this model, in two sentences (the terminal's banner and
        the web page say it)."""
        unit = "characters" if isinstance(self.tokenizer.base, CharTokenizer) else "tokens"
        return (f"The {self.block_size}-token context holds a message of at most "
                f"{self.longest_message} {unit}; when it is full, the oldest exchanges are dropped "
                "(a follow-up with its question), each drop said. The model was trained on short "
                "conversations of a few exchanges at most: start each new topic with a reset."
                + (" Quotation marks are outside its vocabulary: type a word without them."
                   if unit == "characters" else ""))

    # --- one reply --------------------------------------------------------------------------------

    def send(self, text: str) -> str:
        """The reply's text to the user's ``text`` (streamed pieces collected)."""
        return "".join(p.text for p in self.stream(text) if p.kind == "text")

    def check_message(self, text) -> None:
        """Raise the ValueError :meth:`stream` would raise for the user's ``text`` (empty, a
        character the model cannot read, too long even alone), changing nothing."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError("a message is a non-empty text")
        user_ids = render_message(self.tokenizer, {"role": "user", "content": text})[0]
        system = len(self.turn_ids[0]) if self.system is not None else 0
        exchanges_to_drop(system, [len(user_ids)], self.block_size, reserve=1 + self.min_reply_room)

    def stream(self, text: str) -> Iterator[Piece]:
        """Yield the reply to the user's ``text`` piece by piece (see the module's docstring).
        Closing the generator early (a client gone, Ctrl-C) keeps the reply written so far."""
        self.check_message(text)
        user = {"role": "user", "content": text}
        user_ids = render_message(self.tokenizer, user)[0]  # an unknown character is refused here
        dropped = self._make_room(user_ids)
        if dropped:
            orphan = self.follow_up(text) and len(self.turn_ids) == (self.system is not None)
            yield Piece("notice",
                        f"(the conversation outgrew the model's {self.block_size}-token context: "
                        f"{dropped_text(dropped)}"
                        + (f"; {'it' if len(dropped) == 1 else 'the last'} "
                           "was the question this follow-up needs: ask it again first"
                           if orphan else "")
                        + ")")
        self.messages.append(user)
        self.turn_ids.append(user_ids)
        reply = Reply(self)
        try:
            yield from reply.generate()
        finally:  # also when the consumer stops early: the conversation keeps what was written
            reply.end_segment()
            self.messages.append({"role": "assistant", "content": reply.parts})
            self.turn_ids.append([self.sp[ASSISTANT]] + reply.ids + [self.sp[END]])
            self.messages = normalize(check_conversation(self.messages))

    def _make_room(self, user_ids: list[int]) -> list[str]:
        """Drop the oldest exchanges until the conversation, ``user_ids``, ``<|assistant|>`` and
        ``min_reply_room`` fit the context, and then any follow-up left first; returns the user
        messages of the exchanges dropped (the cache is refilled then)."""
        system = 1 if self.system is not None else 0
        lengths = [len(self.turn_ids[i]) + len(self.turn_ids[i + 1])
                   for i in range(system, len(self.turn_ids), 2)]
        dropped = exchanges_to_drop(len(self.turn_ids[0]) if system else 0,
                                    lengths + [len(user_ids)], self.block_size,
                                    reserve=1 + self.min_reply_room)
        if dropped:
            dropped = self._with_follow_ups(dropped, len(lengths))
        return self._drop(dropped)

    def _with_follow_ups(self, dropped: int, exchanges: int) -> int:
        """``dropped`` oldest exchanges, and then every follow-up they would leave first (of the
        ``exchanges`` before the message being answered)."""
        system = 1 if self.system is not None else 0
        while (dropped < exchanges
               and self.follow_up(self.messages[system + 2 * dropped]["content"])):
            dropped += 1
        return dropped

    def _drop(self, dropped: int) -> list[str]:
        system = 1 if self.system is not None else 0
        texts = [self.messages[system + 2 * i]["content"] for i in range(dropped)]
        if dropped:
            del self.messages[system:system + 2 * dropped], \
                self.turn_ids[system:system + 2 * dropped]
            self.empty_cache()
        return texts

    def drop_oldest_exchange(self) -> list[str]:
        """During a reply that needs more room: drop the oldest exchange before the user's message
        being answered, with the follow-ups it would leave first; returns their user messages, none
        when only the message being answered is left, or when that message is a follow-up of the
        exchanges this would drop (the cache is refilled then)."""
        system = 1 if self.system is not None else 0
        exchanges = (len(self.turn_ids) - system - 1) // 2  # before the message being answered
        if exchanges < 1:
            return []
        dropped = self._with_follow_ups(1, exchanges)
        if dropped == exchanges and self.follow_up(self.messages[-1]["content"]):
            return []  # it would leave the follow-up being answered without its question
        return self._drop(dropped)

    @torch.no_grad()
    def next_logits(self, ids: list[int]) -> torch.Tensor:
        """(V,) logits of the token after ``ids`` (the conversation so far, at most block_size).
        Cached: the model reads only the ids the cache does not hold yet."""
        if not self.use_cache:
            return self.model(torch.tensor([ids], device=self.device))[0][0, -1]
        # the conversation changed under the cache: read it again
        if ids[:len(self.fed)] != self.fed:
            self.empty_cache()
        new = ids[len(self.fed):]
        logits, _ = self.model(torch.tensor([new], device=self.device), cache=self.cache)
        self.fed = list(ids)
        return logits[0, -1]


class Reply:
    """The assistant's turn being written: its ids (after ``<|assistant|>``), its parts, and the
    text decoded so far."""

    def __init__(self, engine: ChatEngine):
        self.engine, self.ids, self.parts = engine, [], []
        self.segment: list[int] = []  # ids of the text or tool call being written
        self.shown = ""  # the part of the segment's text already yielded
        self.in_tool = False

    def generate(self) -> Iterator[Piece]:
        e, sp = self.engine, self.engine.sp
        prefix = e.ids + [sp[ASSISTANT]]
        sampled = calls = 0
        while True:
            while (len(prefix) + len(self.ids) >= e.block_size
                   and (dropped := e.drop_oldest_exchange())):
                prefix = e.ids + [sp[ASSISTANT]]
                yield Piece("notice",
                            f"(the reply outgrew the model's {e.block_size}-token context: "
                                      f"{dropped_text(dropped)})")
            if len(prefix) + len(self.ids) >= e.block_size:
                yield from self._flush()
                yield Piece("notice", f"(reply cut: the {e.block_size}-token context is full)")
                return
            if sampled == e.max_reply_tokens:
                yield from self._flush()
                yield Piece("notice", f"(reply cut after {e.max_reply_tokens} tokens)")
                return
            logits = e.next_logits(prefix + self.ids)
            token = int(sample_next(logits[None], **e.sampling, generator=e.generator)[0, 0])
            sampled += 1
            in_format = token not in e.stop_ids and (token != sp[CALC_END] or self.in_tool) and (
                token != sp[CALC] or not self.in_tool)
            if not in_format:  # <|end|>, or a token only the template or the tool may write here
                yield from self._flush()
                return
            if token == sp[CALC]:
                yield from self._flush()
                self.ids.append(token)
                self.in_tool = True
            elif token == sp[CALC_END]:
                calls += 1
                yield from self._call_tool(token)
                if calls == MAX_TOOL_CALLS:
                    yield Piece("notice",
                                f"(reply stopped after {MAX_TOOL_CALLS} calculator calls)")
                    return
            else:
                self.ids.append(token)
                self.segment.append(token)
                if not self.in_tool:
                    yield from self._show(final=False)

    def _show(self, final: bool) -> Iterator[Piece]:
        text = self.engine.tokenizer.decode(self.segment)
        if not final and text.endswith("\ufffd"):  # a character not whole yet (byte-level BPE)
            return
        if len(text) > len(self.shown) and text.startswith(self.shown):
            yield Piece("text", text[len(self.shown):])
        self.shown = text

    def _flush(self) -> Iterator[Piece]:
        rest = self.end_segment()
        if rest:
            yield Piece("text", rest)

    def end_segment(self) -> str:
        """Close the text segment (returns its text not yielded yet); a calculator call the reply
        never closed is closed unanswered."""
        text, rest = self.engine.tokenizer.decode(self.segment), ""
        if self.in_tool:
            self.ids.append(self.engine.sp[CALC_END])
            self.parts.append({"type": "tool", "text": text})
        elif self.segment:
            rest = text[len(self.shown):] if text.startswith(self.shown) else ""
            self.parts.append({"type": "text", "text": text})
        self.segment, self.shown, self.in_tool = [], "", False
        return rest

    def _call_tool(self, closer: int) -> Iterator[Piece]:
        e, sp = self.engine, self.engine.sp
        expression = e.tokenizer.decode(self.segment)
        result = e.calculator(expression)
        try:
            result_ids = e.tokenizer.encode(result)
        except ValueError:  # a character this model cannot read: say so in words it can
            result, result_ids = "error", e.tokenizer.encode("error")
        self.ids += [closer, sp[RESULT], *result_ids, sp[RESULT_END]]
        self.parts += [{"type": "tool", "text": expression}, {"type": "result", "text": result}]
        self.segment, self.shown, self.in_tool = [], "", False
        yield Piece("tool", expression)
        yield Piece("result", result)


def dropped_text(messages: list[str]) -> str:
    """What a notice says of the exchanges dropped,
    named by their user messages (a long one cut)."""
    quoted = [f'"{m}"' if len(m) <= 40 else f'"{m[:37]}..."' for m in messages]
    if len(quoted) == 1:
        return f"dropped the oldest exchange, {quoted[0]}"
    listed = ", ".join(quoted[:-1]) + " and " + quoted[-1]
    return f"dropped the oldest {len(quoted)} exchanges, {listed}"


def format_piece(piece: Piece) -> str:
    """A piece as the terminal and the notebook show it: the text as it is, a calculator call as
    ``[calc 12+7 = 19]``, a notice on a line of its own."""
    if piece.kind == "text":
        return piece.text
    if piece.kind == "tool":
        return f"[calc {piece.text}"
    if piece.kind == "result":
        return f" = {piece.text}]"
    return f"\n{piece.text}\n"


# --- the chat model, and a chat for notebooks -----------------------------------------------------


def load_chat_model(checkpoint: str | Path | None = None, device="cpu"):
    """``(model, tokenizer)`` of a chat model: ``checkpoint`` (written by ``chat-sft``), or the one
    the package ships, checked by its SHA-256 (so is the first one, ``CHAT_V1_MODEL_PATH``)."""
    path = Path(checkpoint) if checkpoint is not None else CHAT_MODEL_PATH
    if checkpoint is not None and path.resolve() == CHAT_V1_MODEL_PATH.resolve():
        if sha256_of(path) != CHAT_V1_MODEL_SHA256:
            raise ValueError(f"{path} is not the first chat model this course_lib was released "
                             "with (its SHA-256 differs): reinstall course_lib")
    elif checkpoint is None:
        if not path.exists() or CHAT_MODEL_SHA256 is None:
            raise FileNotFoundError("no chat model ships with this course_lib yet: fine-tune one "
                                    "with `python -m course_lib chat-sft --out runs/chat`, then "
                                    "chat with `python -m course_lib chat --checkpoint "
                                    "runs/chat/ckpt.pt`")
        if sha256_of(path) != CHAT_MODEL_SHA256:
            raise ValueError(f"{path} is not the chat model this course_lib was released with (its "
                             "SHA-256 differs): reinstall course_lib")
    model, ckpt = load_model(path, device)
    tokenizer = load_tokenizer(ckpt, path)
    if not isinstance(tokenizer, ChatTokenizer):
        raise ValueError(_not_a_chat_model(path, model, ckpt))
    return model, tokenizer


def _not_a_chat_model(path: Path, model, ckpt: dict) -> str:
    """The error for a checkpoint that is not a chat model, and its fix: ``chat-sft`` fine-tunes a
    GPT, and only a GPT (``runs.kind.load_base_gpt``'s rule), so it is advised for this checkpoint
    only where it can start from it."""
    if type(model) is GPT:
        return (f"{path} is not a chat model (its tokenizer has no chat tokens): fine-tune it into "
                f"one with `python -m course_lib chat-sft --checkpoint {path} --out runs/chat`")
    return (f"{path} holds a {ckpt.get('model_kind')!r} model, not a chat model: `chat-sft` makes "
            "one from a GPT (a checkpoint written by `train`), e.g. from the shipped one: `python "
            "-m course_lib chat-sft --out runs/chat`")


class Chat:
    """A chat for notebooks: ``chat.send("What is 12+7?")`` prints the reply as it is written
    (calculator calls shown as ``[calc 12+7 = 19]``) and returns its text; ``chat.reset()``
    starts again. ``Chat()`` loads the shipped chat model; ``Chat(checkpoint=...)`` another;
    ``Chat(model=..., tokenizer=...)`` one in memory. Other options go to :class:`ChatEngine`."""

    def __init__(self, model=None, tokenizer=None, checkpoint=None,
                 device="cpu", printer=print, **options):
        if model is None:
            model, tokenizer = load_chat_model(checkpoint, device)
        self.engine, self.printer = ChatEngine(model, tokenizer, **options), printer

    def send(self, text: str) -> str:
        answer = []
        for piece in self.engine.stream(text):
            self.printer(format_piece(piece), end="", flush=True)
            answer += [piece.text] if piece.kind == "text" else []
        self.printer()
        return "".join(answer)

    def reset(self) -> None:
        self.engine.reset()

    @property
    def messages(self) -> list[dict]:
        return self.engine.messages
