"""What the TRL equality tests (tests/test_preference.py, tests/test_grpo.py) share: a tiny random
GPT2LMHeadModel seen both by TRL and, with the same weights, as our GPT; and TRL trainers built
offline around it. TRL takes about 15 s to import, so the tests that use these are marked slow."""
from __future__ import annotations

import torch

from course_lib.gpt2 import from_pretrained
from eval_helpers import char_hf_tokenizer, tiny_gpt2

VOCAB = 66  # eval_helpers' character tokenizer: end-of-text (id 0, also the pad) and 65 characters


def twin_models(seed: int, dtype=torch.float64):
    """``(hf_model, our_gpt)``: a random GPT2LMHeadModel and our GPT with its weights, both in
    eval mode (no dropout) and in ``dtype`` (float64 by default: the equality tests ask for 1e-6 on
    sums of tens of log-probabilities, below float32's rounding of such sums)."""
    hf = tiny_gpt2(VOCAB, seed=seed).to(dtype).eval()
    ours = from_pretrained(hf).to(dtype).eval()
    return hf, ours


def random_pairs(n: int, seed: int, prompt_len=(1, 6), answer_len=(1, 7)):
    """``n`` (prompt, chosen, rejected) token lists of random lengths (ids 1..65: never the pad)."""
    g = torch.Generator().manual_seed(seed)

    def ids(lo_hi):
        n_tok = int(torch.randint(lo_hi[0], lo_hi[1] + 1, (1,), generator=g))
        return torch.randint(1, VOCAB, (n_tok,), generator=g).tolist()

    return [(ids(prompt_len), ids(answer_len), ids(answer_len)) for _ in range(n)]


def trl_dpo_trainer(model, ref_model, tmp_path, **config):
    """A TRL ``DPOTrainer`` built offline (a two-row dataset it never trains on), whose
    ``compute_loss``/``compute_ref_log_probs`` the tests call on batches of their own."""
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    hf_tok, _ = char_hf_tokenizer()
    args = DPOConfig(output_dir=str(tmp_path / "trl-dpo"), report_to="none", use_cpu=True,
                     save_strategy="no", bf16=False, per_device_train_batch_size=2, **config)
    data = Dataset.from_dict({"prompt": ["ab", "cd"], "chosen": ["e", "f"], "rejected": ["g", "h"]})
    return DPOTrainer(model=model, ref_model=ref_model, args=args, train_dataset=data,
                      processing_class=hf_tok)


def trl_grpo_trainer(tmp_path, reward_funcs=None, seed: int = 0, **config):
    """A TRL ``GRPOTrainer`` built offline around :func:`twin_models`' GPT2LMHeadModel of ``seed``,
    saved to ``tmp_path`` first (with ``beta > 0`` TRL loads its reference model from that path).
    The policy is put in eval mode: no dropout, and TRL then normalises as on one process with no
    gradient accumulation. Returns ``(trainer, our_gpt)``; both hold the same float32 weights."""
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    folder = tmp_path / f"tiny-gpt2-{seed}"
    if not folder.exists():
        hf, _ = twin_models(seed, torch.float32)
        hf.save_pretrained(folder)
        char_hf_tokenizer()[0].save_pretrained(folder)
    hf_tok, _ = char_hf_tokenizer()
    args = GRPOConfig(output_dir=str(tmp_path / "trl-grpo"), report_to="none", use_cpu=True,
                      save_strategy="no", bf16=False, **config)
    rewards = reward_funcs or (lambda completions, **kw: [float(len(c)) for c in completions])
    data = Dataset.from_dict({"prompt": ["ab", "cd"]})
    trainer = GRPOTrainer(model=str(folder), reward_funcs=rewards, args=args, train_dataset=data,
                          processing_class=hf_tok)
    trainer.model.eval()
    return trainer, from_pretrained(trainer.model).float().eval()
