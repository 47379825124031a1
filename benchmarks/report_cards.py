"""The report cards of chapter 16: every model the book trains, evaluated on the same items.

    python benchmarks/report_cards.py --update-record   # course_lib/records/report_cards.json
    python benchmarks/report_cards.py --models bigram --limit 2   # a trial: prints, writes nothing

Trains (CPU, one thread, the pinned numeric environment's seeds) and evaluates, in order:
the counting bigram model of chapter 2 (instant), the shipped CPU GPT (course_lib/weights, no
training), the BPE GPT of chapter 9 (preset shakespeare-bpe-cpu), the CPU speedrun model of
chapter 14 (preset shakespeare-char-speedrun), and chapter 15's fine-tunes of the shipped GPT on
the dates task (full, and LoRA rank 8), and chapter 17's shipped chat model (course_lib/weights, no
training; its card also holds its score on the frozen robustness test set (version 2),
``course_lib.chat.robustness``, with chapter 16's interval). Each model gets
`course_lib.evaluation.report_card.report_card` with --limit items per task (per-item scores kept,
for paired tests); the JSON is rewritten after each model, so a long run that is stopped keeps what
it finished; a record is only written when asked (--json FILE or --update-record), and only
continued with the same --limit (its cards are compared item for item). --models picks a subset;
each model's entry records the command that made it, when, and its loss per token and bytes per
token on the held-out text (what bits per byte are made of).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RECORD = ROOT / "course_lib" / "records" / "report_cards.json"

from bench_args import add_record_options, count, record_file, threads  # noqa: E402

from course_lib.bigram import BigramLanguageModel, bigram_probs  # noqa: E402
from course_lib.chat.engine import CHAT_MODEL_PATH, load_chat_model  # noqa: E402
from course_lib.chat.robustness import ROBUSTNESS_V2_SHA256, score_robustness  # noqa: E402
from course_lib.checkpoint import load_model, load_tokenizer  # noqa: E402
from course_lib.data import load_text, train_val_split  # noqa: E402
from course_lib.evaluation import text_nll  # noqa: E402
from course_lib.finetune import finetune_config  # noqa: E402
from course_lib.pretrained import pretrained_checkpoint  # noqa: E402
from course_lib.evaluation.report_card import heldout_text, report_card  # noqa: E402
from course_lib.runs import start_run  # noqa: E402
from course_lib.tokenizers import CharTokenizer  # noqa: E402

MODELS = ("bigram", "cpu-gpt", "bpe-gpt", "speedrun", "finetune-full", "finetune-lora8", "chat")


def bigram(work: Path):
    text = load_text()
    tok = CharTokenizer.from_text(text)
    train, _ = train_val_split(torch.tensor(tok.encode(text)))
    model = BigramLanguageModel.from_probs(bigram_probs(train, tok.vocab_size), block_size=8).eval()
    return model, tok, "chapter 2's counting bigram (add-one smoothing)"


def preset(name: str, description: str):
    def build(work: Path):
        run = start_run(name, device="cpu", progress=False, verbose=False)
        run.trainer.train()
        return run.trainer.model.eval(), run.tokenizer, description
    return build


def finetune(lora: bool):
    def build(work: Path):
        out = work / ("ft-lora8" if lora else "ft-full")
        cmd = [sys.executable, "-m", "course_lib", "finetune", "--checkpoint",
               str(pretrained_checkpoint()), "--task", "dates", "--out", str(out),
               "--device", "cpu", "--eval-examples", "50"]
        subprocess.run(cmd + (["--lora-rank", "8"] if lora else []), check=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        model, ckpt = load_model(out / "ckpt.pt")
        steps = finetune_config(lora).max_iters
        lr = finetune_config(lora).learning_rate
        return model, load_tokenizer(ckpt), (f"chapter 15's {'LoRA rank 8' if lora else 'full'} "
                                             "fine-tune on dates "
                                             f"(the finetune command's defaults: {steps} steps, lr "
                                             f"{lr:g})")
    return build


def shipped(work: Path):
    path = pretrained_checkpoint()
    model, ckpt = load_model(path)
    return model, load_tokenizer(ckpt), "the shipped CPU GPT (shakespeare-char-cpu, 2000 steps)"


def chat(work: Path):
    model, tok = load_chat_model()
    c = model.config
    return model.float().eval(), tok, (f"chapter 17's shipped chat model ({CHAT_MODEL_PATH.name}, "
                                       f"{c.n_layer} layers, C={c.n_embd}, a {c.block_size}-token "
                                       "context)")


def robustness_row(model, tok) -> dict:
    """The chat model's row of the card beyond the tasks: the frozen robustness development set
    (version 2, held out from every training message; `eval` on the chat model adds the test set,
    version 3), overall and per task (share right, standard error, 95% bootstrap interval, n)."""
    scored = score_robustness(model, tok)  # version 2 by default
    return {"sha256": ROBUSTNESS_V2_SHA256, "set": "version 2 (the development set)",
            **{k: {f: v[f] for f in ("score", "stderr", "interval", "n")}
               for k, v in scored.items() if k != "rows"}}


BUILDERS = {"bigram": bigram, "cpu-gpt": shipped,
            "bpe-gpt": preset("shakespeare-bpe-cpu",
                              "chapter 9's BPE GPT (512 tokens, 1000 steps)"),
            "speedrun": preset("shakespeare-char-speedrun",
                               "chapter 14's CPU speedrun model (1 layer, 550 steps)"),
            "finetune-full": finetune(False), "finetune-lora8": finetune(True), "chat": chat}


def model_names(text: str) -> list[str]:
    """An argparse type: comma-separated names among MODELS."""
    names = text.split(",")
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown model(s) {unknown}: choose among "
                                         f"{','.join(MODELS)}")
    return names


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    add_record_options(p, RECORD, "--json")
    p.add_argument("--models", type=model_names, default=list(MODELS),
                   help=f"comma-separated, among {','.join(MODELS)}")
    p.add_argument("--limit", type=count, default=200, help="items per task")
    p.add_argument("--work", default="runs/report_cards",
                   help="where the fine-tunes are trained (made only for them)")
    p.add_argument("--threads", type=threads, default=1)
    args = p.parse_args(argv)
    if any(folder.exists() and not folder.is_dir()
           for folder in (Path(args.work), *Path(args.work).parents)):
        p.error(f"--work {args.work}: a file stands where a folder is needed: name another folder")
    # each model's card replaces its own
    out = record_file(p, args, RECORD, "--json", continues=True)
    result = out.read({"models": {}})
    if out and result.get("models") and result.get("limit") != args.limit:
        p.error(f"{out.path} holds cards of --limit {result.get('limit')}: continue it with that "
                "--limit, or write to another --json")
    torch.set_num_threads(args.threads)
    command = "python " + " ".join(sys.argv if argv is None
                                   else ["benchmarks/report_cards.py", *argv])
    shown = (out.path.resolve().relative_to(ROOT) if out
             and out.path.resolve().is_relative_to(ROOT) else out.path)
    result.update(command=f"python benchmarks/report_cards.py --json {shown}", limit=args.limit,
                  threads=args.threads, machine=os.uname().machine)
    # made by the fine-tunes that write there, not before: a refused run leaves nothing
    work = Path(args.work)
    for name in args.models:
        torch.manual_seed(1337)
        t0 = time.time()
        model, tok, description = BUILDERS[name](work)
        built = time.time() - t0
        card = report_card(model, tok, limit=args.limit, name=name, progress=False)
        card.update(description=description, build_seconds=round(built, 1),
                    eval_seconds=round(time.time() - t0 - built, 1),
                    load_average=os.getloadavg()[0],
                    parameters=sum(p.numel() for p in model.parameters()), command=command,
                    finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), limit=args.limit)
        ids = tok.encode(heldout_text())
        nats, n_tokens = text_nll(model, ids)
        card.update(loss_per_token=nats / n_tokens, heldout_tokens=len(ids),
                    bytes_per_token=len(heldout_text().encode("utf-8")) / len(ids))
        for row in card["tasks"]:
            row.pop("outputs", None)
        if name == "chat":
            card["robustness"] = robustness_row(model, tok)
        result["models"][name] = card
        out.progress(result)
        print(f"{name}: bpb {card['bits_per_byte']}, built {built:.0f}s, evaluated "
              f"{card['eval_seconds']:.0f}s", flush=True)
    out.finish(result)


if __name__ == "__main__":
    main()
