r"""The chat engine's KV cache kept across turns against re-reading the whole conversation for
every token (chapter 17): reply tokens per second (calculator results included) over one
multi-turn conversation, both ways on the same model, messages and seed, alternately, the
fastest of ``--repeats`` runs of each counting; both must write the same tokens.

The model is untrained (the speed does not depend on the weights): a GPT of the ``--preset``'s
architecture with the character chat tokenizer's vocabulary, its special tokens ruled out
(:class:`NoSpecials`), so that every reply has ``--reply-tokens`` tokens and no calculator call:
an untrained model may otherwise pick the end-of-turn token first, and a reply of no tokens
times nothing. At the shipped model's block_size
of 64 the conversation is short and the saving small; at the GPU preset's 256 it is what a
longer chat gains. Usage:

    python benchmarks/chat_cache.py [--preset shakespeare-char-gpu] [--turns 6] [--repeats 3] \
        [--out FILE]
    # rewrite course_lib/records/chat_cache_speed.json:
    python benchmarks/chat_cache.py --update-record

Prints each preset's numbers; writes the record (with the load average, since the machine may be
shared) only when asked: to --out FILE, or, with --update-record, to the shipped
course_lib/records/chat_cache_speed.json, which chapter 17 cites.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from bench_args import add_record_options, count, preset, record_file, threads

from course_lib.chat.data import (CHAT_V1_PATH, CHAT_V1_SHA256,
                                  char_chat_tokenizer, load_conversations)
from course_lib.chat.engine import ChatEngine
from course_lib.model import GPT
from course_lib.presets import get_preset

RECORD = Path(__file__).resolve().parents[1] / "course_lib" / "records" / "chat_cache_speed.json"


def conversation_messages(turns: int) -> list[str]:
    """The first ``turns`` user messages of the test split's follow-up conversations (the first
    conversations, chat_v1.json, on which the record was measured)."""
    test = load_conversations("test", path=CHAT_V1_PATH, sha256=CHAT_V1_SHA256)
    messages = [m["content"] for c in test if c["task"] == "follow-up"
                for m in c["messages"] if m["role"] == "user"]
    return messages[:turns]


class NoSpecials(torch.nn.Module):
    """``model`` with the chat's special tokens ruled out of its logits (B, T, V)."""

    def __init__(self, model, banned):
        super().__init__()
        self.model, self.config, self.banned = model, model.config, sorted(banned)

    def forward(self, idx, cache=None):
        logits, loss = self.model(idx, cache=cache)
        logits[..., self.banned] = float("-inf")
        return logits, loss


def run(model, tokenizer, messages, use_cache: bool,
        reply_tokens: int) -> tuple[float, int, list[int]]:
    """Seconds and reply tokens of one conversation; the ids it ended with."""
    engine = ChatEngine(model, tokenizer, max_reply_tokens=reply_tokens,
                        use_cache=use_cache, seed=0)
    start, written = time.perf_counter(), 0
    for text in messages:
        list(engine.stream(text))
        written += len(engine.turn_ids[-1]) - 2  # the reply, without <|assistant|> and <|end|>
    return time.perf_counter() - start, written, engine.ids


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", type=preset, action="append",
                        help="whose architecture (repeat; default: both CPU and GPU)")
    parser.add_argument("--turns", type=count, default=6)
    parser.add_argument("--reply-tokens", type=count, default=24,
                        help="tokens per reply (every reply has this many)")
    parser.add_argument("--repeats", type=count, default=3)
    parser.add_argument("--threads", type=threads, default=2)
    add_record_options(parser, RECORD, "--out")
    args = parser.parse_args(argv)
    out = record_file(parser, args, RECORD, "--out")
    argv = sys.argv[1:] if argv is None else argv
    torch.set_num_threads(args.threads)
    tokenizer, results = char_chat_tokenizer(), {}
    messages = conversation_messages(args.turns)
    for name in args.preset or ["shakespeare-char-cpu", "shakespeare-char-gpu"]:
        torch.manual_seed(0)
        config = replace(get_preset(name).model, vocab_size=tokenizer.vocab_size, dropout=0.0)
        model = NoSpecials(GPT(config).eval(), tokenizer.special_ids.values())
        best, ids = {True: float("inf"), False: float("inf")}, {}
        for _ in range(args.repeats):
            for use_cache in (False, True):
                seconds, written, ids[use_cache] = run(model, tokenizer, messages,
                                                       use_cache, args.reply_tokens)
                best[use_cache] = min(best[use_cache], seconds)
        results[name] = {"block_size": config.block_size, "turns": len(messages),
                         "reply_tokens": written, "reread_tokens_per_s": written / best[False],
                         "cached_tokens_per_s": written / best[True],
                         "speedup": best[False] / best[True],
                         "same_tokens": ids[True] == ids[False]}
        print(name, json.dumps(results[name]))
        record = {"command": "python benchmarks/chat_cache.py " + " ".join(argv),
                  "threads": args.threads, "load_average": os.getloadavg()[0], "results": results}
        out.progress(record)  # after each preset, where no whole record is replaced
    out.finish(record, say=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
