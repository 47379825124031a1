"""course_lib.classify: speeches and their speakers, a GPT with a classification head read at
the last real token whatever the padding, and the naive Bayes baseline."""
import math

import torch

from course_lib import GPT, GPTConfig, Trainer, TrainConfig
from course_lib.classify import (PAD, SPEAKERS, GPTClassifier, NaiveBayes, accuracy,
                                 classify_batch_fn, encode_left, majority_accuracy, speaker_splits,
                                 speeches, words)
from course_lib.data import load_text
from course_lib.tokenizers import CharTokenizer

TOK = CharTokenizer.from_text(load_text("tinyshakespeare"))


def test_speeches_are_paragraphs_opened_by_a_speaker_line():
    text = "ROMEO:\nBut soft!\nWhat light?\n\nJULIET:\nAy me!\n\nMENENIUS:\nNay.\n\nROMEO:\n"
    assert speeches(text, ("ROMEO", "MENENIUS")) == [("But soft!\nWhat light?", 0), ("Nay.", 1)]


def test_speaker_splits_are_disjoint_and_cover_every_speech():
    splits = speaker_splits()
    everything = speeches(load_text("tinyshakespeare"))
    assert sorted(splits["train"] + splits["val"]) == sorted(everything)
    assert len(splits["val"]) == round(0.2 * len(everything))
    assert {y for _, y in splits["val"]} == set(range(len(SPEAKERS)))


def test_left_padding_puts_the_last_token_last():
    x = encode_left(TOK, ["Nay.", "But soft! What light"], 8)
    assert x.shape == (2, 8)
    assert (x[0, :4] == PAD).all() and TOK.decode(x[0, 4:]) == "Nay."
    assert TOK.decode(x[1]) == "But soft"  # a long text keeps its first 8 characters


def tiny_classifier(seed=0, **kw):
    torch.manual_seed(seed)
    gpt = GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=32))
    return GPTClassifier(gpt, 4, **kw).eval()


def test_padding_does_not_change_a_row():
    """A left-padded row gets the logits it gets alone (the pads are masked, positions count
    from its first real token)."""
    model = tiny_classifier()
    alone = model(torch.tensor([TOK.encode("Nay, sir.")]))[0]  # (1, K), no pads at all
    padded = model(encode_left(TOK, ["Nay, sir.", "But soft! What light"], 16))[0]
    torch.testing.assert_close(padded[0], alone[0], atol=1e-5, rtol=0)


def test_head_only_trains_the_head_and_the_loss_is_cross_entropy():
    model = tiny_classifier(train_head_only=True)
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {"gpt.lm_head.weight", "gpt.lm_head.bias"}
    assert model.gpt.wte.weight.shape == (TOK.vocab_size, 32)  # the tied embedding kept its matrix
    x = encode_left(TOK, ["Nay.", "But soft!"], 16)
    logits, loss = model(x, torch.tensor([1, 3]))
    manual = -(torch.log_softmax(logits, -1)[[0, 1], [1, 3]]).mean()
    torch.testing.assert_close(loss, manual)


def test_a_few_steps_fit_a_tiny_training_set():
    """Eight speeches, 60 steps: the classifier learns them (accuracy on its training set 1.0),
    which a model that ignored its input (or read a pad) could not do beyond 2/8."""
    data = speaker_splits()["train"][:8]
    assert max(sum(y == k for _, y in data) for k in range(4)) <= 3  # no label is a trivial answer
    model = tiny_classifier()
    splits = {"train": data, "val": data}
    config = TrainConfig(max_iters=60, batch_size=8, learning_rate=3e-3, warmup_iters=5,
                         eval_interval=60, eval_iters=1)
    Trainer(model, config=config, batch_fn=classify_batch_fn(splits, TOK, 8, 16), progress=False,
            verbose=False).train()
    assert accuracy(model, TOK, data) == 1.0


def test_naive_bayes_by_hand():
    train = [("good good day", 0), ("bad day", 1), ("good night", 0)]
    nb = NaiveBayes(train)
    # P(k=0) = 2/3; class 0 words: good x3, day, night (5); vocabulary {good, day, night, bad} + 1
    # unseen slot
    expected = math.log(2 / 3) + math.log((3 + 1) / (5 + 5)) + math.log((0 + 1) / (5 + 5))
    assert math.isclose(nb.score("good bad", 0), expected)
    assert nb.predict("good") == 0 and nb.predict("bad") == 1
    assert nb.accuracy([("good", 0), ("bad", 0)]) == 0.5
    assert words("O Romeo, Romeo! wherefore art thou") == ["o", "romeo", "romeo", "wherefore",
                                                           "art", "thou"]


def test_majority_baseline():
    assert majority_accuracy([("a", 1), ("b", 1), ("c", 0)],
                             [("x", 1), ("y", 0), ("z", 2), ("w", 1)]) == 0.5


def test_pool_last_and_mean_ignore_the_pads():
    h = torch.arange(2 * 3 * 2, dtype=torch.float).view(2, 3, 2)
    mask = torch.tensor([[False, True, True], [True, True, True]])
    from course_lib.classify import pool
    assert torch.equal(pool(h, mask, "last"), h[:, -1])
    assert torch.allclose(pool(h, mask, "mean"), torch.stack([h[0, 1:].mean(0), h[1].mean(0)]))


def test_mean_pooled_classifier_is_the_head_of_the_mean_hidden_state():
    from course_lib.classify import text_features
    clf = tiny_classifier(pooling="mean")
    texts = ["Nay.", "But soft! What light"]
    x = encode_left(TOK, texts, 16)
    logits, _ = clf(x)
    feats = text_features(clf.gpt, TOK, texts, pooling="mean")
    assert torch.allclose(logits, clf.gpt.lm_head(feats), atol=1e-5)
    assert isinstance(clf.gpt.lm_head, torch.nn.Linear)  # text_features put the head back


def test_bad_pooling():
    import pytest
    with pytest.raises(ValueError, match="pooling"):
        tiny_classifier(pooling="max")


def test_probe_separates_separable_features_and_folds_the_scaling():
    from course_lib.classify import fit_probe
    g = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 3, (90,), generator=g)
    # a large offset: the standardisation handles it
    feats = torch.randn(90, 5, generator=g) * 0.1 + 100.0
    feats[torch.arange(90), labels] += 1.0
    head = fit_probe(feats, labels, 3)
    assert (head(feats).argmax(-1) == labels).float().mean() > 0.95
    again = fit_probe(feats, labels, 3)
    assert torch.equal(head.weight, again.weight)  # seeded: deterministic


def test_confusion_matrix_rows_are_true_labels():
    from course_lib.classify import confusion_matrix
    m = confusion_matrix([0, 1, 1, 2], [0, 0, 1, 2], 3)
    assert m.tolist() == [[1, 1, 0], [0, 1, 0], [0, 0, 1]] and m.sum() == 4
