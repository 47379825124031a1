"""What the lm-eval equality tests (tests/test_evaluation.py) and benchmarks/eval_speed.py share:
a character tokenizer built offline with the `tokenizers` library, seen by transformers and by
course_lib, and a tiny random GPT2LMHeadModel."""
from __future__ import annotations

import torch

from course_lib.data import load_text

EOT = "<|endoftext|>"


class HFTokenizerAdapter:
    """A transformers tokenizer with course_lib's interface (encode -> ids, decode -> text)."""

    def __init__(self, hf_tokenizer):
        self.hf = hf_tokenizer

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text, add_special_tokens=False)

    def decode(self, ids) -> str:
        return self.hf.decode(list(ids))


def char_hf_tokenizer():
    """``(PreTrainedTokenizerFast, course_lib adapter)``: a character-level WordLevel model over
    tiny Shakespeare's 65 characters (id 0 is the end-of-text token lm-eval asks for)."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    chars = sorted(set(load_text()))
    vocab = {EOT: 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tk = Tokenizer(models.WordLevel(vocab, unk_token=EOT))
    tk.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tk.decoder = decoders.Fuse()
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=EOT)
    return hf, HFTokenizerAdapter(hf)


def tiny_gpt2(vocab_size: int, n_positions: int = 64, n_embd: int = 32, n_layer: int = 2,
              n_head: int = 2, seed: int = 0):
    """A random GPT2LMHeadModel in eval mode (no network)."""
    import transformers

    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=vocab_size, n_positions=n_positions, n_embd=n_embd,
                                     n_layer=n_layer, n_head=n_head, eos_token_id=0, bos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


def bpe_hf_tokenizer(text: str, vocab_size: int = 320):
    """``(PreTrainedTokenizerFast, course_lib BPETokenizer)``: a byte-level BPE trained by the
    course (:meth:`BPETokenizer.train`, GPT-2's pre-token pattern) on ``text``, and the same
    vocabulary and merges in the `tokenizers` library (GPT-2's ByteLevel pre-tokenizer and decoder),
    for lm-eval."""
    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from course_lib.bpe import ENDOFTEXT, BPETokenizer
    from course_lib.bpe_files import bytes_to_unicode

    ours = BPETokenizer.train(text, vocab_size=vocab_size)
    show = bytes_to_unicode()
    as_text = lambda b: "".join(show[x] for x in b)  # noqa: E731
    vocab = {as_text(b): i for i, b in ours.vocab.items() if i not in ours.special_tokens.values()}
    vocab.update(ours.special_tokens)
    tk = Tokenizer(models.BPE(vocab, [(as_text(a), as_text(b)) for a, b in ours.merges]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=ENDOFTEXT)
    return hf, ours
