"""Building a run, in one place: every kind of run the course trains is a :class:`RunKind`
registered by one module of this package, and built new or continued from its checkpoint (read
once) by :func:`start` and :func:`resume`, the same steps in the same order for every kind. The
command line (one body for every training command), the benchmarks, the tests and the chapters
build their runs here::

    trainer = start("train", {"n_layer": 6}, preset="shakespeare-char-cpu", out_dir="runs/mine")
    trainer.train()
    trainer = resume("train", "runs/mine/ckpt.pt", {"max_iters": 4000})  # continues bit for bit
    trainer = start("finetune", base_checkpoint="runs/mine/ckpt.pt", lora_rank=8, out_dir="runs/ft")

``settings`` are the command line's ``--set KEY=VALUE`` as a dict: model and training fields
together, values as text (parsed like ``--set`` parses them) or as Python values, checked by the
config classes' rules. The kinds, by chapter: ``train`` (7, pretraining: :mod:`.pretrain`, whose
``start_run`` the chapters call), ``train-dates`` (11), ``finetune`` (15: :mod:`.finetune`),
``chat-sft`` (17: :mod:`.chat_sft`), ``dpo`` and ``grpo`` (18: :mod:`.align`), ``induction`` (21:
:mod:`.induction`), ``qat`` (23: :mod:`.qat`, quantization-aware training). The named
builders (``start_run``, ``start_finetune_run``, ``start_dpo_run``...) are one-line wrappers.
A new kind of run is one module here that registers a :class:`RunKind` (CONTRIBUTING.md, "Add a
kind of run"); the interface test over every registered kind then covers it.
"""
from .kind import (KINDS, RESUMABLE_SETTINGS, SHAPE_KEPT, Plan, RunKind, get_kind, register_kind,
                   resume, resumed_config, start, stored_config, training_device)
from .pretrain import (DEFAULT_PRESET, Run, make_trainer, resume_dates_run, resume_run,
                       split_tokens, start_dates_run, start_run)
from .finetune import check_lora_options, resume_finetune_run, start_finetune_run
from .chat_sft import resume_chat_sft_run, start_chat_sft_run
from .align import resume_dpo_run, resume_grpo_run, start_dpo_run, start_grpo_run
from .induction import resume_induction_run, start_induction_run
from .qat import resume_qat_run, start_qat_run

__all__ = ["KINDS", "RESUMABLE_SETTINGS", "SHAPE_KEPT", "Plan", "RunKind", "get_kind",
           "register_kind", "resume", "resumed_config", "start", "stored_config", "training_device",
           "DEFAULT_PRESET", "Run", "make_trainer", "resume_dates_run", "resume_run",
           "split_tokens", "start_dates_run", "start_run", "check_lora_options",
           "resume_finetune_run", "start_finetune_run", "resume_chat_sft_run", "start_chat_sft_run",
           "resume_dpo_run", "resume_grpo_run", "start_dpo_run", "start_grpo_run",
           "resume_induction_run", "start_induction_run", "resume_qat_run", "start_qat_run"]
