"""``python -m course_lib chat-sft`` and ``chat``: chapter 17's chat fine-tune and the chat itself,
in the terminal or (``--web``) in a browser. ``chat-sft``'s body is every training command's
(:func:`course_lib.cli.common.cmd_run`); the run is :mod:`course_lib.runs.chat_sft`'s.
"""
from __future__ import annotations

from ..chat.engine import ChatEngine, load_chat_model
from ..chat.terminal import run_terminal
from ..chat.web import serve
from ..utils import check_device
from .common import add_run_options, add_sampling_options, check_sampling_options


def cmd_chat(args) -> int:
    """Chapter 17: talk to a chat model in the terminal, or (``--web``) in a browser."""
    check_sampling_options(args, args.max_tokens, "--max-tokens")
    model, tokenizer = load_chat_model(args.checkpoint, check_device(args.device))
    engine = ChatEngine(model, tokenizer, temperature=args.temperature, top_k=args.top_k,
                        top_p=args.top_p, seed=args.seed, max_reply_tokens=args.max_tokens)
    args.on_interrupt = "the server stopped" if args.web else "the chat ended"
    return (serve(engine, args.host, args.port) if args.web
            else run_terminal(engine, args.checkpoint or "the model"))


def add_chat_sft_parser(sub) -> None:
    p = sub.add_parser("chat-sft", help="fine-tune a pretrained GPT into a chat model on the "
                       "shipped conversations, writing DIR/ckpt.pt")
    p.add_argument("--checkpoint", dest="base_checkpoint",
                   help="the pretrained GPT (default: the one course_lib "
                   "ships); with --resume only the run's own base (or a copy) is accepted")
    # default None, not False: a resume tells "not given"
    # (continue as started) from "given" (must match)
    p.add_argument("--from-scratch", action="store_true", default=None,
                   help="the control: a fresh GPT of the same shape")
    p.add_argument("--pack", action="store_true", default=None,
                   help="rows of block_size tokens packed with conversations one after another (no "
                        "padding)")
    p.add_argument("--more-phrasings", action="store_true", default=None,
                   help="add chat.variety's 24,000 training conversations in wider phrasings, "
                        "typos and operand sizes (issue 54)")
    p.add_argument("--count-first", nargs="?", const="bare",
                   choices=("bare", "worked", "worked-all"), default=None,
                   help="add chat.counting's 6,000 letters conversations drawn count first "
                        "(answers 0 to 4, a fifth each; issue 54), replied with the bare number "
                        "(the default) or worked (the word spelled, each hit counted); worked-all: "
                        "the last reply of every letters conversation of training worked too")
    p.add_argument("--wide-identity", action="store_true", default=None,
                   help="add chat.identity's 4,000 identity conversations in 128 more phrasings "
                        "(the bank's training half; issue 54)")
    p.add_argument("--word-anywhere", action="store_true", default=None,
                   help="add chat.anywhere's 4,000 spelling and letters conversations with the "
                        "word anywhere in the request and letters repeated (worked replies: needs "
                        "--count-first worked-all; issue 54)")
    add_run_options(p, "runs/chat")


def add_chat_parser(sub) -> None:
    p = sub.add_parser("chat", help="talk to a chat model in the terminal (/reset, /quit) or, with "
                                    "--web, in a browser")
    p.add_argument("--checkpoint",
                   help="a chat model written by `chat-sft` (default: the one course_lib ships)")
    p.add_argument("--web", action="store_true",
                   help="serve a chat page instead of chatting in the terminal")
    p.add_argument("--host", default="127.0.0.1",
                   help="the page's address (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="the page's port (default 8000)")
    p.add_argument("--max-tokens", type=int, default=200,
                   help="the most tokens in one reply (default 200)")
    add_sampling_options(p, temperature=0.0)
    p.set_defaults(func=cmd_chat)


def add_chat_parsers(sub) -> None:
    add_chat_sft_parser(sub)
    add_chat_parser(sub)
