"""Byte-level BPE: training (course_lib.bpe_train) against a naive reference and hand-counted pairs,
pre-tokens (course_lib.pretokenize), encoding, special tokens, streaming (course_lib.bpe), GPT-2 and
tiktoken files (course_lib.bpe_files), the HTML view (course_lib.plots), errors."""
import gzip
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from course_lib.bpe import ENDOFTEXT, BPETokenizer
from course_lib.bpe_files import bytes_to_unicode, read_tiktoken_ranks
from course_lib.bpe_train import merge, train_bpe
from course_lib.pretokenize import pretoken_counts
from course_lib.data import load_text
from course_lib.tokenizers import tokenizer_from_dict, train_tokenizer

SHAKESPEARE = load_text("tinyshakespeare")
SLICE = SHAKESPEARE[:50_000]
FIXTURES = Path(__file__).parent / "fixtures"


def naive_train(text, vocab_size, special_tokens=(), pattern="gpt2"):
    """The straightforward algorithm: recount every pair after every merge."""
    words = Counter()
    for w, f in pretoken_counts(text, special_tokens, pattern).items():
        words[tuple(bytes([b]) for b in w.encode("utf-8"))] += f
    merges = []
    for _ in range(vocab_size - 256 - len(special_tokens)):
        pairs = Counter()
        for w, f in words.items():
            for p in zip(w, w[1:]):
                pairs[p] += f
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))  # most frequent, then the greatest pair
        merges.append(best)
        new_words = Counter()
        for w, f in words.items():
            out, i = [], 0
            while i < len(w):
                if i < len(w) - 1 and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] += f
        words = new_words
    return merges


@pytest.fixture(scope="module")
def shakespeare_tok():
    return BPETokenizer.train(SHAKESPEARE, vocab_size=512)


# --- training --------------------------------------------------------------------------------


def test_training_equals_the_naive_algorithm_on_shakespeare():
    vocab, merges = train_bpe(text=SLICE, vocab_size=400)
    assert merges == naive_train(SLICE, 400)
    assert len(vocab) == 400
    assert all(vocab[i] == bytes([i]) for i in range(256))
    assert all(vocab[256 + k] == a + b for k, (a, b) in enumerate(merges))


@given(st.text(alphabet="ab c\né", max_size=60), st.integers(256, 290))
def test_training_equals_the_naive_algorithm_on_any_text(text, vocab_size):
    if not text:
        return
    assert train_bpe(text=text, vocab_size=vocab_size)[1] == naive_train(text, vocab_size)


def test_ties_go_to_the_lexicographically_greatest_pair():
    # "abcd" holds ab, bc, cd once each: (c, d) is the greatest
    assert train_bpe(text="abcd", vocab_size=257)[1] == [(b"c", b"d")]
    # (b"a", b"z") vs (b"b", b"a"): compare the left byte strings first
    assert train_bpe(text="az ba", vocab_size=257)[1] == [(b"b", b"a")]


def test_merges_counted_by_hand():
    """"aaabdaaabac" (Wikipedia's BPE example) is one pre-token; its adjacent pairs, counted by
    hand: aa aa ab bd da aa aa ab ba ac, so (a, a) is the most frequent (4) and is merged first,
    left to right: aa a b d aa a b a c. Now (aa, a) and (a, b) occur twice each, a tie that goes to
    the greater pair: b"aa" > b"a" in the left place, so (aa, a) -> aaa b d aaa b a c. (aaa, b) is
    the only pair seen twice -> aaab d aaab a c. The four pairs left occur once each; the greatest
    left part is b"d": (d, aaab)."""
    vocab, merges = train_bpe(text="aaabdaaabac", vocab_size=260)
    assert merges == [(b"a", b"a"), (b"aa", b"a"), (b"aaa", b"b"), (b"d", b"aaab")]
    assert [vocab[i] for i in range(256, 260)] == [b"aa", b"aaa", b"aaab", b"daaab"]


def test_first_merges_on_shakespeare(shakespeare_tok):
    """The first merge is the most frequent adjacent byte pair inside GPT-2's pre-tokens of the
    whole text, counted here directly; the next ones must be what the straightforward algorithm
    (recount every pair after every merge) picks. 512 = 256 bytes + 255 merges + <|endoftext|>, id
    511."""
    pairs = Counter()
    for piece, n in pretoken_counts(SHAKESPEARE).items():
        b = piece.encode("utf-8")
        for pair in zip(b, b[1:]):
            pairs[bytes([pair[0]]), bytes([pair[1]])] += n
    (first, count), (_, runner_up) = pairs.most_common(2)
    assert count > runner_up  # no tie: the most frequent pair alone decides the first merge
    assert shakespeare_tok.merges[0] == first
    assert shakespeare_tok.merges[:4] == naive_train(SHAKESPEARE, 256 + 4)
    assert shakespeare_tok.vocab_size == 512 and len(shakespeare_tok.merges) == 512 - 256 - 1
    assert shakespeare_tok.special_tokens == {ENDOFTEXT: 256 + 255}


def test_training_from_a_path_or_pathlike(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text(SLICE[:5000], encoding="utf-8")
    expected = train_bpe(text=SLICE[:5000], vocab_size=300)
    assert train_bpe(path, 300) == expected
    assert train_bpe(str(path), 300) == expected


def test_special_tokens_are_split_out_and_never_merged():
    text = ("hello<|endoftext|>" * 50) + "<|endoftext|><|endoftext|>"
    vocab, merges = train_bpe(text=text, vocab_size=300, special_tokens=[ENDOFTEXT])
    assert vocab[max(vocab)] == ENDOFTEXT.encode()
    assert not any(b"<" in a + b or b"|" in a + b for a, b in merges)
    assert merges[-1][0] + merges[-1][1] == b"hello"  # then it runs out of pairs
    assert len(merges) == 4 and len(vocab) == 256 + 4 + 1


def test_cl100k_pattern_changes_the_pre_tokens():
    assert list(pretoken_counts("12345 HELLO'S", pattern="gpt2")) == ["12345", " HELLO", "'", "S"]
    assert list(pretoken_counts("12345 HELLO'S", pattern="cl100k")) == ["123", "45", " HELLO", "'S"]


def test_vocab_size_below_the_minimum_names_it():
    with pytest.raises(ValueError, match="at least 256"):
        train_bpe(text="abc", vocab_size=255)
    with pytest.raises(ValueError, match="at least 258"):
        train_bpe(text="abc", vocab_size=257, special_tokens=["<a>", "<b>"])


def test_empty_text_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        train_bpe(text="", vocab_size=300)
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="empty"):
        train_bpe(tmp_path / "empty.txt", 300)
    with pytest.raises(ValueError, match="nothing but special tokens"):
        train_bpe(text=ENDOFTEXT * 3, vocab_size=300, special_tokens=[ENDOFTEXT])
    with pytest.raises(TypeError, match="either"):
        train_bpe(vocab_size=300)


# --- encoding and decoding -------------------------------------------------------------------


def naive_encode(text, merges, pattern="gpt2"):
    """Encode each pre-token by applying every merge, in the order learned (ids 256, 257, ...)."""
    import regex

    from course_lib.pretokenize import resolve_pattern
    ids = []
    for piece in regex.findall(resolve_pattern(pattern), text):
        parts, piece_ids = [bytes([b]) for b in piece.encode("utf-8")], list(piece.encode("utf-8"))
        for k, (a, b) in enumerate(merges):
            i = 0
            while i < len(parts) - 1:
                if parts[i] == a and parts[i + 1] == b:
                    parts[i:i + 2], piece_ids[i:i + 2] = [a + b], [256 + k]
                i += 1
        ids += piece_ids
    return ids


def test_encode_applies_merges_in_priority_order(shakespeare_tok):
    text = SHAKESPEARE[-3000:]
    assert shakespeare_tok.encode(text) == naive_encode(text, shakespeare_tok.merges)


def test_encode_is_deterministic_and_uses_the_cache(shakespeare_tok):
    ids = shakespeare_tok.encode(SLICE)
    assert shakespeare_tok.encode(SLICE) == ids
    assert shakespeare_tok.decode(ids) == SLICE
    assert len(ids) < len(SLICE) / 1.8  # about two characters per token at 512


@given(st.text())
def test_round_trip_on_any_string(shakespeare_tok, text):
    assert shakespeare_tok.decode(shakespeare_tok.encode(text)) == text


@given(st.lists(st.text(max_size=12), max_size=12))
def test_encode_iterable_equals_encoding_the_whole(shakespeare_tok, chunks):
    text = "".join(chunks)
    assert list(shakespeare_tok.encode_iterable(chunks)) == shakespeare_tok.encode(text)


@given(st.lists(st.sampled_from(["a", " ", "  ", "\n", "\n\n", "b ", "<|", "endoftext", "|>",
                                 ENDOFTEXT, "1", "'s", "é", "  \n "]), max_size=20))
def test_encode_iterable_at_awkward_boundaries(shakespeare_tok, chunks):
    assert list(shakespeare_tok.encode_iterable(chunks)) == shakespeare_tok.encode("".join(chunks))


def test_encode_iterable_is_lazy_over_a_file(shakespeare_tok, tmp_path):
    path = tmp_path / "big.txt"
    path.write_text(SLICE, encoding="utf-8")
    read = []

    def lines():
        with open(path, encoding="utf-8") as f:
            for line in f:
                read.append(line)
                yield line

    stream = shakespeare_tok.encode_iterable(lines())
    first = next(stream)
    assert len(read) < 5  # only the first lines were read
    assert [first, *stream] == shakespeare_tok.encode(SLICE)


def test_overlapping_special_tokens_take_the_longest_match():
    vocab, merges = train_bpe(text="abab", vocab_size=258)
    tok = BPETokenizer(vocab, merges, special_tokens=["<|a|>", "<|a|><|a|>"])
    double, single = tok.special_tokens["<|a|><|a|>"], tok.special_tokens["<|a|>"]
    assert tok.encode("<|a|><|a|><|a|>") == [double, single]
    assert tok.encode("x<|a|><|a|>") == [ord("x"), double]
    assert tok.decode(tok.encode("<|a|><|a|><|a|>ab")) == "<|a|><|a|><|a|>ab"
    tok2 = BPETokenizer(vocab, merges, special_tokens=[ENDOFTEXT])
    eot = tok2.special_tokens[ENDOFTEXT]
    assert tok2.encode(ENDOFTEXT * 2) == [eot, eot]  # the same one twice in a row


def test_decode_arbitrary_ids_never_raises_on_broken_utf8(shakespeare_tok):
    e_acute = list("é".encode())  # two bytes
    assert shakespeare_tok.decode(e_acute) == "é"
    assert shakespeare_tok.decode(e_acute[:1]) == "\ufffd"
    assert shakespeare_tok.decode([0xFF, ord("a")]) == "\ufffda"
    assert shakespeare_tok.decode(range(512))  # every id decodes to something


def test_decode_unknown_id_names_it(shakespeare_tok):
    with pytest.raises(ValueError, match="unknown token id 512.*0 to 511"):
        shakespeare_tok.decode([1, 512])
    with pytest.raises(ValueError, match="unknown token id -1"):
        shakespeare_tok.decode([-1])


def test_decoding_tokens_separately_breaks_multibyte_characters(shakespeare_tok):
    ids = shakespeare_tok.encode("naïve")
    assert "".join(shakespeare_tok.decode([i]) for i in ids) != "naïve"
    assert shakespeare_tok.decode(ids) == "naïve"


def test_merge_helper():
    assert merge([1, 2, 3, 1, 2], (1, 2), 9) == [9, 3, 9]
    assert merge([1, 1, 1], (1, 1), 9) == [9, 1]


# --- storing: registry, checkpoints, GPT-2 and tiktoken files --------------------------------


def test_registry_dict_round_trip(shakespeare_tok):
    d = json.loads(json.dumps(shakespeare_tok.to_dict()))
    assert d["type"] == "bpe"
    tok = tokenizer_from_dict(d)
    assert isinstance(tok, BPETokenizer)
    assert tok.encode(SLICE[:2000] + ENDOFTEXT) == shakespeare_tok.encode(SLICE[:2000] + ENDOFTEXT)
    assert tok.vocab == shakespeare_tok.vocab
    with pytest.raises(ValueError, match="not a BPETokenizer"):
        BPETokenizer.from_dict({"type": "char", "chars": "ab"})


def test_train_tokenizer_spec():
    tok = train_tokenizer({"type": "bpe", "vocab_size": 300}, SLICE)
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == 300
    with pytest.raises(ValueError, match="at least 257"):
        train_tokenizer({"type": "bpe", "vocab_size": 256}, SLICE)


def test_checkpoint_stores_the_tokenizer(tmp_path, shakespeare_tok):
    from course_lib.checkpoint import load_checkpoint, load_tokenizer, save_checkpoint
    from course_lib.model import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=shakespeare_tok.vocab_size, block_size=8, n_layer=1, n_head=1,
                          n_embd=8))
    path = save_checkpoint(tmp_path / "ckpt.pt", model, tokenizer=shakespeare_tok)
    tok = load_tokenizer(load_checkpoint(path))
    assert isinstance(tok, BPETokenizer)
    assert tok.encode(SLICE[:3000]) == shakespeare_tok.encode(SLICE[:3000])


def write_gpt2_files(tok, folder):
    """Our tokenizer in GPT-2's file format (bytes shown as GPT-2's printable characters)."""
    enc = bytes_to_unicode()
    show = lambda b: "".join(enc[x] for x in b)  # noqa: E731
    vocab = {show(b): i for i, b in tok.vocab.items() if i not in tok.special_tokens.values()}
    vocab.update(tok.special_tokens)
    (folder / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    lines = ["#version: 0.2"] + [f"{show(a)} {show(b)}" for a, b in tok.merges]
    (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder / "vocab.json", folder / "merges.txt"


def test_gpt2_files_round_trip_and_match_hugging_face(tmp_path, shakespeare_tok):
    tokenizers = pytest.importorskip("tokenizers")
    vocab_json, merges_txt = write_gpt2_files(shakespeare_tok, tmp_path)
    tok = BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
    text = SHAKESPEARE[:20_000]
    assert tok.encode(text) == shakespeare_tok.encode(text)
    hf = tokenizers.Tokenizer(tokenizers.models.BPE.from_file(str(vocab_json), str(merges_txt)))
    hf.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert hf.encode(text).ids == tok.encode(text)


def test_bad_gpt2_files_name_the_line(tmp_path, shakespeare_tok):
    vocab_json, merges_txt = write_gpt2_files(shakespeare_tok, tmp_path)
    merges_txt.write_text("#version: 0.2\nĠ t\nbroken\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 3"):
        BPETokenizer.from_gpt2_files(vocab_json, merges_txt)
    vocab_json.write_text('{"a": 0,\n "b": }', encoding="utf-8")
    with pytest.raises(ValueError, match="line 2"):
        BPETokenizer.from_gpt2_files(vocab_json, merges_txt)


def test_bad_rank_file_names_the_line(tmp_path):
    good = "IQ== 0\nIg== 1\n"
    (tmp_path / "a.tiktoken").write_text(good + "not-base64! 2\n")
    with pytest.raises(ValueError, match="line 3"):
        read_tiktoken_ranks(tmp_path / "a.tiktoken")
    (tmp_path / "b.tiktoken.gz").write_bytes(gzip.compress((good + "Iw==\n").encode()))
    with pytest.raises(ValueError, match="line 3"):
        read_tiktoken_ranks(tmp_path / "b.tiktoken.gz")
    (tmp_path / "c.tiktoken").write_text(good + "Iw== three\n")
    with pytest.raises(ValueError, match="line 3"):
        read_tiktoken_ranks(tmp_path / "c.tiktoken")
    (tmp_path / "d.tiktoken").write_text(good)
    assert read_tiktoken_ranks(tmp_path / "d.tiktoken") == {b"!": 0, b'"': 1}


def test_vocabulary_without_all_bytes_is_refused():
    with pytest.raises(ValueError, match="256 single bytes"):
        BPETokenizer({0: b"a"}, [])
    vocab = {i: bytes([i]) for i in range(256)}
    with pytest.raises(ValueError, match="merge 0"):
        BPETokenizer(vocab, [(b"a", b"b")])


def test_library_naive_trainer_agrees():
    from course_lib.bpe_train import train_bpe_naive

    text = SLICE[:8000] + ENDOFTEXT + SLICE[8000:12000]
    assert train_bpe_naive(text, 300, [ENDOFTEXT]) == train_bpe(text=text, vocab_size=300,
                                                                special_tokens=[ENDOFTEXT])


@given(st.text(alphabet=st.characters(max_codepoint=127)), st.sampled_from(["gpt2", "cl100k"]))
def test_ascii_fast_patterns_cut_like_the_unicode_ones(text, name):
    import re
    import sys

    import regex

    from course_lib.pretokenize import ASCII_PATTERNS, PATTERNS
    pattern = PATTERNS[name]
    if pattern not in ASCII_PATTERNS:
        assert name == "cl100k" and sys.version_info < (3, 11)
        return
    assert re.findall(ASCII_PATTERNS[pattern], text, re.ASCII) == regex.findall(pattern, text)


def test_ascii_fast_pattern_on_edge_cases():
    import re

    import regex

    from course_lib.pretokenize import ASCII_PATTERNS
    # \x1c-\x1f: str.isspace(), not \s
    text = "a\x0b\x0c\x1c\x1d\x1e\x1f b  \n\n x'S'll 12345 \t\r\n  \x0b\n  y  "
    for pattern, fast in ASCII_PATTERNS.items():
        assert re.findall(fast, text, re.ASCII) == regex.findall(pattern, text)


# --- the shakespeare-bpe-cpu preset: tokenizer, training, checkpoint, sampling ---------------


def test_bpe_preset_trains_saves_and_samples(tmp_path):
    from course_lib.checkpoint import CHECKPOINT_NAME, load_model, load_tokenizer
    from course_lib.generate import generate_text
    from course_lib.presets import get_preset
    from course_lib.runs import start_run

    preset = get_preset("shakespeare-bpe-cpu")
    assert preset.tokenizer == {"type": "bpe", "vocab_size": 512} and preset.model.vocab_size == 512
    assert get_preset("shakespeare-char-cpu").tokenizer == "char"
    settings = {"n_layer": 1, "max_iters": 6, "eval_interval": 3, "eval_iters": 2}
    run = start_run("shakespeare-bpe-cpu", settings=settings, device="cpu", out_dir=tmp_path,
                    progress=False)
    tok, model = run.tokenizer, run.trainer.model  # what the command line builds
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == preset.model.vocab_size
    history = run.trainer.train()
    assert history["val_loss"][-1] < history["val_loss"][0]
    loaded, ckpt = load_model(tmp_path / CHECKPOINT_NAME)
    loaded_tok = load_tokenizer(ckpt)
    assert isinstance(loaded_tok, BPETokenizer) and loaded_tok.merges == tok.merges
    a = generate_text(model.eval(), tok, "ROMEO:", 20, seed=1)
    b = generate_text(loaded, loaded_tok, "ROMEO:", 20, seed=1)
    assert a == b and a.startswith("ROMEO:")


def test_tokens_html_has_one_span_per_token(shakespeare_tok):
    from course_lib.plots import tokens_html

    text = "To be, or not to be <&>\n"
    page = tokens_html(shakespeare_tok, text)
    assert page.count("<span") == len(shakespeare_tok.encode(text))
    assert "&lt;" in page and "&amp;" in page and "<&>" not in page
