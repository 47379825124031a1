"""The encoder-decoder Transformer (course_lib.seq2seq): equal to torch.nn.Transformer with copied
weights, checkpoints, masks, label smoothing; decoding (course_lib.translate); the date task
(course_lib.dates); bad input."""
from __future__ import annotations

import datetime

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from course_lib import checkpoint
from course_lib.dates import (DATE_ALPHABET, DATE_FORMATS, date_batch_fn, date_split_days,
                              date_test_set, date_tokenizer, format_date, sample_dates)
from course_lib.seq2seq import (BOS_ID, EOS_ID, PAD_ID, SPECIALS, Seq2Seq, Seq2SeqConfig,
                                encode_batch, label_smoothed_cross_entropy, shift_right,
                                torch_reference_logits)
from course_lib.tokenizers import CharTokenizer, tokenizer_from_dict
from course_lib.translate import (beam_search, greedy_decode, length_penalty, translate,
                                  translations_exact_match)
from course_lib.train import TrainConfig, Trainer
from course_lib.utils import IGNORE_INDEX


def tiny(**kw) -> Seq2SeqConfig:
    return Seq2SeqConfig(**{**dict(vocab_size=23, block_size=16, n_encoder_layers=2,
                                   n_decoder_layers=2, n_head=2, n_embd=16, dropout=0.0), **kw})


def padded_batch(g: torch.Generator, B=4, S=9, T=7, V=23):
    src = torch.randint(3, V, (B, S), generator=g)
    for b, length in enumerate([S, 5, 1, 7][:B]):
        src[b, length:] = PAD_ID
    tgt_in = torch.randint(3, V, (B, T), generator=g)
    tgt_in[:, 0] = BOS_ID
    return src, tgt_in


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_equals_torch_transformer_with_copied_weights(activation):
    g = torch.Generator().manual_seed(0)
    model = Seq2Seq(tiny(activation=activation)).eval()
    reference = model.torch_transformer()
    with torch.no_grad():  # make biases and LayerNorm gains non-trivial, so a mis-copy shows
        for p in reference.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    model.load_from_torch(reference)
    src, tgt_in = padded_batch(g)
    ours, _ = model(src, tgt_in=tgt_in)
    for mode in ("train", "eval"):  # eval mode may take PyTorch's fused "fast path"
        reference.train(mode == "train")
        theirs = torch_reference_logits(model, reference, src, tgt_in)
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=0)


def test_copy_really_matters():
    g = torch.Generator().manual_seed(1)
    model = Seq2Seq(tiny()).eval()
    reference = model.torch_transformer()  # fresh weights, not copied
    src, tgt_in = padded_batch(g)
    assert (model(src, tgt_in=tgt_in)[0] - torch_reference_logits(model, reference, src,
                                                                  tgt_in)).abs().max() > 1e-2


def test_torch_transformer_needs_its_layout():
    with pytest.raises(ValueError, match="post-LN"):
        Seq2Seq(tiny(norm_position="pre")).torch_transformer()


def test_source_padding_is_invisible():
    """Extra padding on a source changes nothing: the masks hide it from the encoder and from
    cross-attention."""
    g = torch.Generator().manual_seed(2)
    model = Seq2Seq(tiny()).eval()
    src, tgt_in = padded_batch(g)
    longer = torch.cat([src, torch.full((src.shape[0], 4), PAD_ID)], dim=1)
    torch.testing.assert_close(model(src, tgt_in=tgt_in)[0], model(longer, tgt_in=tgt_in)[0],
                               atol=1e-5, rtol=0)
    # a sequence alone gives the same logits as inside a padded batch
    alone = model(src[2:3, :1], tgt_in=tgt_in[2:3])[0]
    torch.testing.assert_close(alone, model(src, tgt_in=tgt_in)[0][2:3], atol=1e-5, rtol=0)


def test_decoder_is_causal():
    g = torch.Generator().manual_seed(3)
    model = Seq2Seq(tiny(norm_position="pre")).eval()
    src, tgt_in = padded_batch(g)
    changed = tgt_in.clone()
    changed[:, 4:] = (changed[:, 4:] + 1) % 23
    a, b = model(src, tgt_in=tgt_in)[0], model(src, tgt_in=changed)[0]
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_shapes_and_shared_embeddings():
    model = Seq2Seq(tiny())
    assert model.src_embed is model.tgt_embed and model.lm_head.weight is model.tgt_embed.weight
    separate = Seq2Seq(tiny(share_embeddings=False, tie_weights=False))
    C, V = 16, 23
    assert separate.num_parameters() - model.num_parameters() == 2 * V * C
    src, tgt_in = padded_batch(torch.Generator().manual_seed(4))
    logits, loss = model(src, tgt_in=tgt_in)
    assert logits.shape == (4, 7, V) and loss is None


def test_shift_right_is_teacher_forcing():
    targets = torch.tensor([[5, 6, 7, EOS_ID], [8, EOS_ID, IGNORE_INDEX, IGNORE_INDEX]])
    assert shift_right(targets).tolist() == [[BOS_ID, 5, 6, 7], [BOS_ID, 8, EOS_ID, PAD_ID]]


@given(st.integers(1, 5), st.integers(1, 6), st.integers(2, 9), st.floats(0.0, 0.9),
       st.integers(0, 10**6))
def test_label_smoothing_equals_pytorch(B, T, V, eps, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g) * 3
    targets = torch.randint(V, (B, T), generator=g)
    targets[0, 0] = IGNORE_INDEX if T > 1 else targets[0, 0]
    ours = label_smoothed_cross_entropy(logits, targets, eps)
    theirs = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), label_smoothing=eps)
    torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


def test_label_smoothing_minimum_is_not_one_hot():
    """With epsilon > 0 the loss is smallest for the smoothed distribution, not for a one-hot
    one."""
    V, eps = 5, 0.1
    target = torch.tensor([2])
    smoothed = torch.full((1, V), eps / V)
    smoothed[0, 2] += 1 - eps
    confident = torch.full((1, V), 1e-4)
    confident[0, 2] = 1 - 4e-4
    assert label_smoothed_cross_entropy(smoothed.log(), target, eps) < label_smoothed_cross_entropy(
        confident.log(), target, eps)


def test_save_and_load_through_the_registry(tmp_path):
    config = tiny(share_embeddings=False, norm_position="pre")
    model = Seq2Seq(config).eval()
    tok = CharTokenizer("abc", specials=SPECIALS)
    path = checkpoint.save_checkpoint(tmp_path / "ckpt.pt", model, tokenizer=tok)
    loaded, ckpt = checkpoint.load_model(path)
    assert type(loaded) is Seq2Seq and loaded.config == config and ckpt["model_kind"] == "seq2seq"
    src, tgt_in = padded_batch(torch.Generator().manual_seed(5))
    torch.testing.assert_close(model(src, tgt_in=tgt_in)[0], loaded(src, tgt_in=tgt_in)[0])
    tok2 = checkpoint.load_tokenizer(ckpt)
    assert tok2.to_dict() == tok.to_dict() and tok2.encode("cab") == tok.encode("cab")
    assert "pos" not in ckpt["model"]  # the sinusoidal table is rebuilt, not stored


def test_config_round_trip_and_validation():
    c = tiny(label_smoothing=0.2)
    assert Seq2SeqConfig.from_dict(c.to_dict()) == c
    with pytest.raises(ValueError, match="unknown"):
        Seq2SeqConfig.from_dict({**c.to_dict(), "d_model": 4})
    with pytest.raises(ValueError, match="divisible"):
        tiny(n_head=3)
    with pytest.raises(ValueError, match="final_norm"):
        tiny(norm_position="pre", final_norm=False)
    with pytest.raises(ValueError, match="distinct"):
        tiny(bos_id=0)


def test_bad_input_errors():
    model = Seq2Seq(tiny()).eval()
    ok = torch.tensor([[4, 5, 6]])
    with pytest.raises(ValueError, match="longer than block_size"):
        model(torch.full((1, 17), 4), tgt_in=ok)
    with pytest.raises(ValueError, match="longer than block_size"):
        model(ok, tgt_in=torch.full((1, 17), 4))
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 22\]"):
        model(torch.tensor([[4, 23]]), tgt_in=ok)
    with pytest.raises(ValueError, match=r"ids must lie"):
        model(ok, targets=torch.tensor([[-5, 4]]))
    with pytest.raises(ValueError, match="empty"):
        model(torch.tensor([[4, 5], [PAD_ID, PAD_ID]]), tgt_in=torch.tensor([[1], [1]]))
    with pytest.raises(ValueError, match="empty"):
        model(torch.zeros(2, 0, dtype=torch.long), tgt_in=torch.tensor([[1], [1]]))
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, ok, beam_size=0)
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, ok, max_len=17)
    with pytest.raises(ValueError, match="give targets"):
        model(ok)
    with pytest.raises(ValueError, match="beam_size"):
        translate(model, CharTokenizer("abcdefg", specials=SPECIALS), ["abc"], beam_size=0)
    with pytest.raises(ValueError, match="empty text"):
        translate(model, CharTokenizer("abcdefg", specials=SPECIALS), ["abc", ""])


@pytest.mark.parametrize("seed", range(4))
def test_beam_of_one_is_greedy(seed):
    torch.manual_seed(seed)
    model = Seq2Seq(tiny(vocab_size=7)).eval()  # small vocabulary: EOS comes up often
    src, _ = padded_batch(torch.Generator().manual_seed(seed), V=7)
    assert beam_search(model, src, beam_size=1, max_len=12) == greedy_decode(model, src, max_len=12)


def brute_force_best(model, src, length, alpha):
    """Score every sequence that ends in EOS within `length` steps, and every unfinished one of
    `length` tokens, by log p / length_penalty (exhaustive search)."""
    V = model.config.vocab_size
    memory, mask = model.encode(src)
    best, frontier = (float("-inf"), None), [([], 0.0)]
    for _ in range(length):
        new = []
        for ids, s in frontier:
            tgt_in = torch.tensor([[BOS_ID] + ids])
            logits = model.decode(tgt_in, memory, mask)[0, -1].float()
            logits[[PAD_ID, BOS_ID]] = float("-inf")
            logp = F.log_softmax(logits, -1)
            best = max(best, ((s + logp[EOS_ID].item()) / length_penalty(len(ids) + 1, alpha), ids))
            new += [(ids + [t], s + logp[t].item()) for t in range(3, V)]
        frontier = new
    return max([best] + [(s / length_penalty(len(ids), alpha), ids) for ids, s in frontier])


# models where the best sequence is not greedy's for some alpha
@pytest.mark.parametrize("seed", [7, 11, 17, 28])
def test_wide_beam_finds_the_best_sequence(seed):
    torch.manual_seed(seed)
    model = Seq2Seq(tiny(vocab_size=5, n_embd=8)).eval()  # 2 real tokens + EOS
    src = torch.tensor([[3, 4, 4]])
    greedy = greedy_decode(model, src, max_len=3)[0]
    best = [brute_force_best(model, src, 3, alpha)[1] for alpha in (0.0, 0.6, 2.0)]
    assert any(ids != greedy for ids in best)
    for alpha, ids in zip((0.0, 0.6, 2.0), best):
        # 16 beams hold every hypothesis (at most 4 live x 3 tokens = 12 candidates a step):
        # exhaustive
        assert beam_search(model, src, beam_size=16, max_len=3, alpha=alpha)[0] == ids


def test_length_penalty():
    assert length_penalty(1, 0.6) == 1.0 and length_penalty(7, 0.0) == 1.0
    assert length_penalty(11, 0.6) == pytest.approx((16 / 6) ** 0.6)


def test_dates_tokenizer_ids_follow_the_documented_rule():
    """Chapter 11's numbers depend on the ids, so derive them from the rule the tokenizer has always
    documented (specials first: <pad> 0, <s> 1, </s> 2, the model's PAD_ID, BOS_ID, EOS_ID; then
    the alphabet in sorted order from 3), for every text of the chapter's held-out test set."""
    tok = date_tokenizer()
    assert list(SPECIALS) == ["<pad>", "<s>", "</s>"] and (PAD_ID, BOS_ID, EOS_ID) == (0, 1, 2)
    alphabet = sorted(DATE_ALPHABET)
    rule = {c: len(SPECIALS) + k for k, c in enumerate(alphabet)}
    for source, target in date_test_set(1000):
        assert tok.encode(source) == [rule[c] for c in source]
        assert tok.encode(target) == [rule[c] for c in target]
    assert tok.vocab_size == len(SPECIALS) + len(alphabet)
    text = "the 3rd of MARCH, 2021"
    assert tok.decode([BOS_ID] + tok.encode("12") + [EOS_ID, PAD_ID]) == "<s>12</s><pad>"
    assert tok.decode([BOS_ID] + tok.encode(text) + [EOS_ID], skip_special=True) == text
    with pytest.raises(ValueError, match="unknown character '@'"):
        tok.encode("March 3 @ noon")
    batch = encode_batch(tok, ["12", "3"], eos=True, pad=IGNORE_INDEX)
    assert batch.tolist() == [[rule["1"], rule["2"], EOS_ID], [rule["3"], EOS_ID, IGNORE_INDEX]]


def test_checkpoints_of_the_old_seq2seq_tokenizer_still_load():
    """Before the character tokenizers were merged, train-dates stored {"type": "seq2seq-char",
    "chars": ...}: it comes back as the same vocabulary (specials <pad>, <s>, </s>, then the
    chars)."""
    old = {"type": "seq2seq-char", "chars": DATE_ALPHABET}
    tok = tokenizer_from_dict(old)
    assert tok.to_dict() == date_tokenizer().to_dict()


class CopyModel(Seq2Seq):
    """A stand-in translator whose output is known without running a network: at every step it
    puts all its probability on the next source token, and on EOS once the source has ended."""

    def encode(self, src):
        return src, (src != PAD_ID)[:, None, None, :]  # the "memory" is the source ids themselves

    def decode(self, tgt_in, memory, src_mask):
        B, T = tgt_in.shape
        nxt = torch.full((B, T), EOS_ID)
        n = min(T, memory.shape[1])
        nxt[:, :n] = memory[:, :n]
        nxt = nxt.masked_fill(nxt == PAD_ID, EOS_ID)  # after its last token a padded source "ends"
        return 10.0 * F.one_hot(nxt, self.config.vocab_size).float()  # (B, T, V)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_exact_match_is_one_for_right_answers_and_zero_for_wrong_ones(beam_size):
    tok = CharTokenizer("abcd", specials=SPECIALS)
    copier = CopyModel(tiny(vocab_size=tok.vocab_size))
    sources = ["abc", "d", "cab", "abcdabcd", "bb"]
    assert translate(copier, tok, sources, beam_size=beam_size) == sources
    assert translations_exact_match(copier, tok, [(s, s) for s in sources], beam_size=beam_size,
                                    batch_size=2) == 1.0
    assert translations_exact_match(copier, tok, [(s, s + "a") for s in sources],
                                    beam_size=beam_size) == 0.0
    # two right answers of five: 2 / 5
    pairs = [(s, s if k in (1, 3) else s[::-1] + "x") for k, s in enumerate(sources)]
    assert translations_exact_match(copier, tok, pairs, beam_size=beam_size, batch_size=3) == 2 / 5


@pytest.mark.parametrize("seed", range(3))
def test_translate_follows_the_greedy_path_decoded_by_hand(seed):
    """translate(beam_size=1) of each text of a padded batch equals a hand-written loop: encode the
    text alone, then append the most likely next token (never PAD or BOS) until EOS or max_len."""
    torch.manual_seed(seed)
    tok = CharTokenizer("abcd", specials=SPECIALS)
    # V = 7: EOS is likely enough to come up
    model = Seq2Seq(tiny(vocab_size=tok.vocab_size)).eval()
    texts, max_len = ["abcd", "a", "dcbadd", "bb"], 6
    expected = []
    with torch.no_grad():
        for text in texts:
            memory, mask = model.encode(torch.tensor([tok.encode(text)]))
            ids = [BOS_ID]
            while len(ids) <= max_len:
                logits = model.decode(torch.tensor([ids]), memory, mask)[0, -1]
                logits[[PAD_ID, BOS_ID]] = float("-inf")
                if logits.argmax().item() == EOS_ID:
                    break
                ids.append(logits.argmax().item())
            expected.append(tok.decode(ids[1:]))
    assert translate(model, tok, texts, max_len=max_len) == expected


def test_date_formats():
    day = datetime.date(2021, 3, 3)
    written = [format_date(day, s) for s in range(len(DATE_FORMATS))]
    assert written == [name for name, _ in DATE_FORMATS]  # each format's name is 3 March 2021 in it
    assert format_date(datetime.date(2011, 11, 11), 3, case=2) == "NOVEMBER 11TH, 2011"
    assert format_date(datetime.date(1999, 12, 22), 6, case=1) == "the 22nd of december, 1999"


def test_date_task_is_deterministic_and_held_out():
    days = date_split_days()
    assert not set(days["train"].tolist()) & set(days["val"].tolist())
    a = sample_dates(days["train"], 20, torch.Generator().manual_seed(3))
    b = sample_dates(days["train"], 20, torch.Generator().manual_seed(3))
    assert a == b
    test = date_test_set(50)
    held = {(datetime.date(1950, 1, 1) + datetime.timedelta(days=int(d))).isoformat()
            for d in days["val"]}
    assert all(target in held for _, target in test)
    tok = date_tokenizer()
    assert max(len(s) for s, _ in date_test_set(2000)) <= 32  # fits block_size
    src, tgt = date_batch_fn(tok, 8)("train", torch.Generator().manual_seed(0))
    assert src.shape[0] == tgt.shape[0] == 8 and (tgt[:, -1] != PAD_ID).all()


def test_trainer_trains_it_and_checkpoint_round_trips(tmp_path):
    """A few steps through the Trainer with the 2017 schedule; the checkpoint (tokenizer included)
    rebuilds the same translator."""
    torch.manual_seed(0)
    tok = date_tokenizer()
    model = Seq2Seq(tiny(vocab_size=tok.vocab_size, block_size=32, n_embd=32, n_head=4))
    config = TrainConfig(max_iters=30, batch_size=16, schedule="transformer", warmup_iters=10,
                         eval_interval=15, eval_iters=2)
    trainer = Trainer(model, config=config, batch_fn=date_batch_fn(tok, 16), out_dir=tmp_path,
                      tokenizer=tok, progress=False)
    history = trainer.train()
    assert history["loss"][-1] < history["loss"][0]
    assert history["lr"][9] == pytest.approx(32**-0.5 * 10**-0.5)  # the peak of the warmup
    loaded, ckpt = checkpoint.load_model(tmp_path / checkpoint.CHECKPOINT_NAME)
    tok2 = checkpoint.load_tokenizer(ckpt)
    texts = ["3 March 2021", "12/01/99"]
    assert translate(loaded, tok2, texts) == translate(trainer.model, tok, texts)
    # exact_match against targets built to be right for 3 of 4 pairs: the model's own translations,
    # with every fourth one spoiled, so the expected share is known without trusting the model
    pairs = date_test_set(20)
    own = translate(loaded, tok2, [source for source, _ in pairs])
    targets = [t + "x" if i % 4 == 0 else t for i, t in enumerate(own)]
    assert translations_exact_match(loaded, tok2, list(zip([s for s, _ in pairs], targets)),
                                    batch_size=7) == 15 / 20


def test_train_dates_writes_a_checkpoint_the_cli_can_use(tmp_path):
    from course_lib.runs import start_dates_run

    trainer = start_dates_run(tmp_path, max_iters=2, device="cpu", progress=False)
    trainer.train()
    assert trainer.step == 2 and trainer.config.schedule == "transformer"
    model, ckpt = checkpoint.load_model(tmp_path / checkpoint.CHECKPOINT_NAME)
    tok = checkpoint.load_tokenizer(ckpt)
    assert tok.to_dict() == date_tokenizer().to_dict() and isinstance(model, Seq2Seq)
    # the checkpoint rebuilds the trained translator: the same beam search output
    texts = ["3 March 2021", "12/01/99"]
    assert translate(model, tok, texts,
                     beam_size=2) == translate(trainer.model, trainer.tokenizer, texts, beam_size=2)
