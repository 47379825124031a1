"""Chapter 17's chat fine-tune (``python -m course_lib chat-sft``) as a kind of run
(:mod:`course_lib.runs.kind`): the GPT in a base checkpoint (by default the one course_lib ships)
fine-tuned on the shipped conversations, every weight trained on the assistant's tokens only.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ..chat.anywhere import ANYWHERE_SEED, ANYWHERE_SIZE, build_anywhere_conversations
from ..chat.counting import (COUNT_SEED, COUNT_SIZE, build_count_conversations, count_sha256,
                             worked_everywhere)
from ..chat.identity import WIDE_SEED, WIDE_SIZE, build_identity_conversations
from ..chat.data import (CHAT_SHA256, EXTRA_CHARS, chat_batch_fn, chat_sft_config,
                         load_conversations)
from ..chat.template import chat_tokenizer
from ..chat.variety import MORE_SEED, MORE_SIZE, build_more_conversations, more_sha256
from ..checkpoint import build_model, load_tokenizer
from ..config import apply_overrides, parse_value
from ..lora_gpt import extend_positions, extend_vocabulary
from ..model import GPT
from ..pretrained import pretrained_checkpoint
from ..train import Trainer
from ..utils import seed_everything
from .kind import (SHAPE_KEPT, Plan, RunKind, base_record, load_base_gpt, register_kind, resume,
                   resumed_config, same_base, start)


# A chat fine-tune may lengthen its base's context: --set block_size=N (N at least the base's) when
# it starts; a learned position table gets its new rows by extend_positions (copies of the base's
# rows).
CONTEXT_SETTABLE = {k: v for k, v in SHAPE_KEPT.items() if k != "block_size"}


def _context(settings: dict) -> tuple[dict, int | None]:
    """``(settings without block_size, block_size or
    None)``: the one model setting a chat run takes."""
    settings = dict(settings or {})
    value = settings.pop("block_size", None)
    if isinstance(value, str):
        value = parse_value(value, int, "block_size")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ValueError(f"--set block_size={value}: the context must be a whole number of tokens, "
                         "at least 1 (e.g. --set block_size=256)")
    return settings, value


def _plan(settings: dict, options: dict, path=None, ckpt=None) -> Plan:
    settings, block_size = _context(settings)
    if ckpt is not None:
        stored = (ckpt.get("model_config") or {}).get("block_size")
        if block_size is not None and block_size != stored:
            raise ValueError(f"--set block_size={block_size}: {path} has a context of {stored} "
                             f"tokens, and a resumed run keeps its model; give block_size={stored} "
                             "or leave it out")
        trained_on = ckpt["trained_on"] or {}
        if trained_on.get("data_sha256") != CHAT_SHA256:
            raise ValueError(f"{path} was fine-tuned on other conversations than this course_lib "
                             "ships (SHA-256 "
                             f"{str(trained_on.get('data_sha256'))[:12]}...): start a new run in "
                             "another --out")
        _check_same_start(path, trained_on, options.get("base_checkpoint"),
                          options.get("from_scratch"))
        for option, key in (("--more-phrasings", "more_phrasings"),
                            ("--count-first", "count_first"),
                            ("--wide-identity", "wide_identity"),
                            ("--word-anywhere", "word_anywhere")):
            given = options.get(key)
            if given is not None and bool(given) != bool(trained_on.get(key)):
                raise ValueError(f"{option}: {path} was "
                                 f"{'' if trained_on.get(key) else 'not '}trained on the "
                                 f"added conversations, and a resumed run keeps how it started; "
                                 f"leave {option} out to continue it")
        counted, given = trained_on.get("count_first"), options.get("count_first")
        if counted and isinstance(given, str) and given != counted.get("reply", "bare"):
            raise ValueError(f"--count-first {given}: {path} was trained on "
                             f"{counted.get('reply', 'bare')} replies, and a resumed run keeps how "
                             "it started; leave --count-first out to continue it")
        if (options.get("pack") is not None
                and bool(options["pack"]) != bool(trained_on.get("pack"))):
            raise ValueError(f"--pack: {path} was "
                             f"{'' if trained_on.get('pack') else 'not '}trained on packed rows, "
                             "and a resumed run keeps how it started; leave --pack out to continue "
                             "it")
        return Plan(resumed_config(path, ckpt, settings, SHAPE_KEPT))
    return Plan(apply_overrides(chat_sft_config(), settings, CONTEXT_SETTABLE),
                {"block_size": block_size})


def _added(option: str, record: dict, built: list[dict], sha256: str) -> list[dict]:
    """Added conversations, refused if they are not the ones the run recorded."""
    if sha256 != record["sha256"]:
        raise ValueError(f"{option}: this course_lib's added conversations (SHA-256 "
                         f"{sha256[:12]}...) are not the ones the run started on "
                         f"({record['sha256'][:12]}...): start a new run in another --out")
    return built


def _data(more: dict | None = None, count: dict | None = None,
          wide: dict | None = None, anywhere: dict | None = None) -> dict | None:
    """The conversations a run trains on: the shipped ones, and with ``more`` (a run's record of
    ``--more-phrasings``) chat.variety's, with ``count`` (of ``--count-first``) chat.counting's,
    with ``wide`` (of ``--wide-identity``) chat.identity's, with ``anywhere`` (of
    ``--word-anywhere``) chat.anywhere's added to the training split, refused if they are not the
    ones the run recorded."""
    if not more and not count and not wide and not anywhere:
        return None
    added = []
    if more:
        built = build_more_conversations(more["n"], more["seed"])
        added += _added("--more-phrasings", more, built, more_sha256(built))
    if count:
        built = build_count_conversations(count["n"], count["seed"],
                                          worked=count.get("reply", "bare") != "bare")
        added += _added("--count-first", count, built, count_sha256(built))
    if wide:
        built = build_identity_conversations(wide["n"], wide["seed"])
        added += _added("--wide-identity", wide, built, more_sha256(built))
    if anywhere:
        built = build_anywhere_conversations(anywhere["n"], anywhere["seed"])
        added += _added("--word-anywhere", anywhere, built, more_sha256(built))
    data = load_conversations()
    train = data["train"] + added
    if count and count.get("reply") == "worked-all":
        # each letters conversation's last reply worked; the split's SHA-256 recorded at the
        # start (count is the run's record) and checked on resuming, like the added ones'
        train, left_out = worked_everywhere(train)
        sha256 = count_sha256(train)
        if count.setdefault("train_sha256", sha256) != sha256:
            raise ValueError("--count-first worked-all: this course_lib rewrites the training "
                             "replies otherwise than when the run started: start a new run in "
                             "another --out")
        count.setdefault("left_out", left_out)
    return {**data, "train": train}


def _trainer(model, tokenizer, plan: Plan, device, trained_on: dict, **options) -> Trainer:
    batch_fn = chat_batch_fn(tokenizer, plan.train.batch_size, model.config.block_size, device,
                             data=_data(trained_on.get("more_phrasings"),
                                       trained_on.get("count_first"),
                                       trained_on.get("wide_identity"),
                                       trained_on.get("word_anywhere")),
                             pack=bool(trained_on.get("pack")))
    return Trainer(model, config=plan.train, batch_fn=batch_fn, device=device, tokenizer=tokenizer,
                   trained_on=trained_on, **options)


def _build(plan: Plan, *, device, out_dir, progress, verbose, base_checkpoint=None,
           from_scratch=None, pack=None, more_phrasings=None, count_first=None,
           wide_identity=None, word_anywhere=None) -> Trainer:
    """The base's tokenizer gets the conversations' characters and the chat template's special
    tokens, its model as many new rows (``extend_vocabulary``). ``from_scratch``: the control, a
    fresh GPT of the same shape and vocabulary. ``pack``: rows of block_size tokens packed with
    conversations (``chat_batch_fn``), no padding. ``plan.extra["block_size"]``: a longer context
    than the base's (``extend_positions``, the new
    rows copies of the base's), refused if shorter. ``more_phrasings``: chat.variety's conversations
    added to the training split (recorded by their number, seed and SHA-256); ``count_first``:
    chat.counting's letters conversations drawn count first ("bare" numbers or "worked" replies),
    added and recorded the same way ("worked-all": and the last reply of every letters
    conversation of the training split worked, chat.counting's ``worked_everywhere``);
    ``wide_identity``: chat.identity's identity conversations, ``word_anywhere``: chat.anywhere's
    spelling and letters conversations (worked replies: with ``count_first="worked-all"`` only),
    each added and recorded the same way."""
    if word_anywhere and count_first != "worked-all":
        raise ValueError("--word-anywhere: its letters replies are worked, as --count-first "
                         "worked-all writes every letters reply; give --count-first worked-all too")
    base, base_tokenizer, path, sha = load_base_gpt(base_checkpoint or pretrained_checkpoint(),
                                                    "chat fine-tuning")
    block_size, base_context = plan.extra.get("block_size"), base.config.block_size
    if block_size is not None and block_size < base_context:
        raise ValueError(f"--set block_size={block_size}: the base {path.name} has a context of "
                         f"{base_context} tokens, and a chat fine-tune can only lengthen it; set "
                         f"block_size to {base_context} or more")
    tokenizer = chat_tokenizer(base_tokenizer, EXTRA_CHARS)
    # a fresh model's weights (the control): the run's first random numbers
    seed_everything(plan.train.seed)
    n_new = tokenizer.vocab_size - base.config.vocab_size
    longer = block_size is not None and block_size > base_context
    if longer:
        base = extend_positions(base, block_size, "copy")
    model = (GPT(replace(base.config, vocab_size=tokenizer.vocab_size)) if from_scratch
             else extend_vocabulary(base, n_new))
    trained_on = {"command": "chat-sft", **base_record(path, sha),
                  "from_scratch": bool(from_scratch), "data_sha256": CHAT_SHA256,
                  **({"pack": True} if pack else {}),
                  **({"more_phrasings": {"n": MORE_SIZE, "seed": MORE_SEED,
                                         "sha256": more_sha256(build_more_conversations())}}
                     if more_phrasings else {}),
                  **({"count_first": _count_record(count_first)} if count_first else {}),
                  **({"wide_identity": {"n": WIDE_SIZE, "seed": WIDE_SEED,
                                        "sha256": more_sha256(build_identity_conversations())}}
                     if wide_identity else {}),
                  **({"word_anywhere": {"n": ANYWHERE_SIZE, "seed": ANYWHERE_SEED, "sha256":
                                        more_sha256(build_anywhere_conversations())}}
                     if word_anywhere else {}),
                  **({"context_from": base_context, "positions": "copy"} if longer else {})}
    return _trainer(model, tokenizer, plan, device, trained_on,
                    out_dir=out_dir, progress=progress, verbose=verbose)


def _count_record(reply) -> dict:
    """What ``--count-first [bare|worked]`` adds, as a run records it."""
    reply = reply if isinstance(reply, str) else "bare"
    built = build_count_conversations(worked=reply != "bare")
    return {"n": COUNT_SIZE, "seed": COUNT_SEED, "sha256": count_sha256(built), "reply": reply}


def _check_same_start(path: Path, trained_on: dict, base_checkpoint, from_scratch) -> None:
    """A resumed chat fine-tune keeps how it started: ``base_checkpoint`` and ``from_scratch``,
    when given, must be the recorded ones (the base by its SHA-256: a moved copy is the same
    base). The model is in the checkpoint; a differing option would be silently ignored."""
    if from_scratch is not None and bool(from_scratch) != bool(trained_on.get("from_scratch")):
        option, started = (("--from-scratch", "from the pretrained model") if from_scratch else
                           ("from_scratch=False", "from scratch (the control)"))
        raise ValueError(f"{option}: {path} is a chat fine-tune {started}, and a resumed run keeps "
                         f"how it started; leave {option} out to continue it, or start a new run "
                         "in another --out")
    if base_checkpoint is not None and "base_sha256" in trained_on:
        same_base(path, trained_on, base_checkpoint)


def _rebuild(plan: Plan, path: Path, ckpt: dict, *, device, progress, verbose, base_checkpoint=None,
             from_scratch=None, pack=None, more_phrasings=None, count_first=None,
             wide_identity=None, word_anywhere=None) -> Trainer:
    model, tokenizer = build_model(ckpt, path), load_tokenizer(ckpt, path)
    return _trainer(model, tokenizer, plan, device, ckpt["trained_on"], out_dir=path.parent,
                    progress=progress, verbose=verbose)


def _describe(trainer: Trainer) -> str:
    what = ("from scratch (the control)" if trainer.trained_on["from_scratch"]
            else "from the pretrained model")
    return (f"chat fine-tune {what}: {trainer.model.num_parameters():,} parameters on "
            f"{trainer.device}; {trainer.config.max_iters} iterations, checkpoints in "
            f"{trainer.out_dir}")


def _report(trainer: Trainer):
    yield (f"val loss {trainer.history['val_loss'][-1]:.4f}; saved {trainer.checkpoint_path}; chat "
            f"with `python -m course_lib chat --checkpoint {trainer.checkpoint_path}`")


CHAT_SFT = register_kind(RunKind(
    command="chat-sft", plan=_plan, build=_build, rebuild=_rebuild, describe=_describe,
    report=_report,
    example=lambda folder: ({"max_iters": 3, "eval_interval": 2, "eval_iters": 1, "batch_size": 2},
                            {"base_checkpoint": str(pretrained_checkpoint())}),
    options=("base_checkpoint", "from_scratch", "pack", "more_phrasings", "count_first",
             "wide_identity", "word_anywhere"),
    default_out=lambda options: "runs/chat"))


def start_chat_sft_run(base_checkpoint: str | Path | None = None, settings: dict | None = None, *,
                       from_scratch: bool = False, device: str | None = None, out_dir=None,
                       progress: bool = True) -> Trainer:
    """A new chat fine-tune of the GPT in ``base_checkpoint`` (default: the shipped model)."""
    return start(CHAT_SFT, settings, base_checkpoint=base_checkpoint, from_scratch=from_scratch,
                 device=device, out_dir=out_dir, progress=progress)


def resume_chat_sft_run(path: str | Path, settings: dict | None = None, *, base_checkpoint=None,
                        from_scratch: bool | None = None, device: str | None = None,
                        progress: bool = True, checkpoint: dict | None = None) -> Trainer:
    """The chat fine-tune saved in ``path``, continued on the same conversations;
    ``base_checkpoint`` and ``from_scratch``, if given, must be how it started."""
    return resume(CHAT_SFT, path, settings, base_checkpoint=base_checkpoint,
                  from_scratch=from_scratch, device=device,
                  progress=progress, checkpoint=checkpoint)
