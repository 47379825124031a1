"""course_lib.bigram: the bigram model and the count-based baselines (chapters 1-2)."""
import math

import pytest
import torch
import torch.nn.functional as F

from course_lib.bigram import (BigramConfig, BigramLanguageModel, bigram_counts, bigram_probs,
                               unigram_entropy)
from course_lib.generate import generate, generate_text
from course_lib.tokenizers import CharTokenizer
from course_lib.train import Trainer, TrainConfig


def test_unigram_entropy_known_values():
    assert unigram_entropy("aaaa") == 0.0
    assert unigram_entropy("ab") == pytest.approx(math.log(2))
    assert unigram_entropy("abcd" * 5) == pytest.approx(math.log(4))
    # Ids (tensor or list) give the same as the characters they stand for.
    assert unigram_entropy(torch.tensor([0, 0, 1, 2])) == pytest.approx(unigram_entropy("aabc"))
    assert unigram_entropy([3, 3, 1]) == pytest.approx(unigram_entropy("bba"))


def test_unigram_entropy_bounded_by_log_vocab():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(10, (500,), generator=g)
    assert 0 < unigram_entropy(ids) <= math.log(10)


def test_unigram_entropy_empty_is_an_error():
    with pytest.raises(ValueError, match="empty"):
        unigram_entropy("")


def test_bigram_counts_small_example():
    data = torch.tensor([0, 1, 1, 2, 0, 1])
    counts = bigram_counts(data, 3)
    expected = torch.tensor([[0, 2, 0], [0, 1, 1], [1, 0, 0]])
    assert torch.equal(counts, expected)
    assert counts.sum() == len(data) - 1


def test_bigram_counts_rejects_bad_input():
    with pytest.raises(ValueError, match="lie in"):
        bigram_counts(torch.tensor([0, 5]), 3)
    with pytest.raises(ValueError, match="1-D"):
        bigram_counts(torch.zeros(2, 2, dtype=torch.long), 3)
    with pytest.raises(ValueError, match="at least 2"):
        bigram_counts(torch.tensor([1]), 3)


def test_bigram_probs_rows_sum_to_one_and_smoothing():
    g = torch.Generator().manual_seed(1)
    data = torch.randint(6, (400,), generator=g)
    for smoothing in (0.0, 0.5, 1.0):
        P = bigram_probs(data, 6, smoothing)
        assert P.shape == (6, 6) and P.dtype == torch.float32
        assert torch.allclose(P.sum(1), torch.ones(6))
    assert (bigram_probs(torch.tensor([0, 1, 0, 1]), 3, 1.0) > 0).all()
    unsmoothed = bigram_probs(torch.tensor([0, 1, 0, 1]), 3, 0.0)
    # token 2 never occurs: an all-zero row, not NaN
    assert torch.equal(unsmoothed[2], torch.zeros(3))
    with pytest.raises(ValueError, match="smoothing"):
        bigram_probs(data, 6, -1.0)


def test_counting_model_is_the_best_bigram_on_its_own_data():
    """The unsmoothed counts minimise the training cross-entropy: no other table does better."""
    g = torch.Generator().manual_seed(2)
    data = torch.randint(5, (2000,), generator=g)
    best = BigramLanguageModel.from_probs(bigram_probs(data, 5, 0.0))
    x, y = data[:-1][None], data[1:][None]
    _, best_loss = best(x, y)
    for smoothing in (0.1, 1.0, 10.0):
        _, loss = BigramLanguageModel.from_probs(bigram_probs(data, 5, smoothing))(x, y)
        assert loss > best_loss
    for seed in range(3):
        torch.manual_seed(seed)
        _, loss = BigramLanguageModel(5, init_std=1.0)(x, y)
        assert loss > best_loss


def test_from_probs_softmax_gives_back_the_table():
    data = torch.randint(7, (300,), generator=torch.Generator().manual_seed(3))
    P = bigram_probs(data, 7, 1.0)
    model = BigramLanguageModel.from_probs(P, block_size=4)
    logits, _ = model(torch.arange(7)[None])
    assert torch.allclose(F.softmax(logits[0], dim=-1), P, atol=1e-6)
    assert model.config.block_size == 4
    with pytest.raises(ValueError, match=r"\(V, V\)"):
        BigramLanguageModel.from_probs(torch.ones(3, 4))


def test_forward_shapes_loss_and_lookup():
    torch.manual_seed(0)
    model = BigramLanguageModel(11, block_size=5)
    idx = torch.randint(11, (3, 5))
    logits, loss = model(idx)
    assert logits.shape == (3, 5, 11) and loss is None
    # an embedding is a row lookup
    assert torch.equal(logits, model.token_embedding_table.weight[idx])
    targets = torch.randint(11, (3, 5))
    _, loss = model(idx, targets)
    assert torch.allclose(loss, F.cross_entropy(logits.view(15, 11), targets.view(15)))
    # Each position depends on its own token only, never on the context.
    other = idx.clone()
    other[:, :-1] = (other[:, :-1] + 1) % 11
    assert torch.equal(model(other)[0][:, -1], logits[:, -1])
    assert model.num_parameters() == 11 * 11


def test_forward_ignore_index():
    model = BigramLanguageModel(4)
    idx = torch.tensor([[0, 1, 2]])
    targets = torch.tensor([[1, -100, 3]])
    _, loss = model(idx, targets)
    logits, _ = model(idx)
    expected = F.cross_entropy(logits[0, [0, 2]], torch.tensor([1, 3]))
    assert torch.allclose(loss, expected)


def test_untrained_loss_is_close_to_log_vocab():
    torch.manual_seed(0)
    model = BigramLanguageModel(65)
    idx = torch.randint(65, (8, 32))
    _, loss = model(idx, torch.randint(65, (8, 32)))
    assert abs(loss.item() - math.log(65)) < 0.01


def test_bad_ids_and_shapes_are_clear_errors():
    model = BigramLanguageModel(5)
    with pytest.raises(ValueError, match="lie in"):
        model(torch.tensor([[0, 5]]))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model(torch.tensor([0, 1]))


def test_config_validation_and_round_trip():
    config = BigramConfig(vocab_size=10, block_size=3)
    assert BigramConfig.from_dict(config.to_dict()) == config
    assert BigramLanguageModel(config).config is config
    with pytest.raises(ValueError, match="BigramConfig.vocab_size must be an integer >= 1, got 0"):
        BigramConfig(vocab_size=0)
    with pytest.raises(ValueError, match="unknown"):
        BigramConfig.from_dict({"vocab_size": 3, "n_layer": 2})


def test_trainer_trains_the_bigram_model_towards_the_counting_optimum():
    g = torch.Generator().manual_seed(4)
    # A text with a strong bigram structure: token t is mostly followed by (t + 1) % 6.
    steps = torch.where(torch.rand(3000, generator=g) < 0.8, 1,
                        torch.randint(6, (3000,), generator=g))
    data = torch.cumsum(steps, 0) % 6
    train, val = data[:2700], data[2700:]
    torch.manual_seed(0)
    model = BigramLanguageModel(6, block_size=8)
    config = TrainConfig(max_iters=300, batch_size=16, learning_rate=5e-2, warmup_iters=0,
                         weight_decay=0.0, eval_interval=100, eval_iters=5)
    history = Trainer(model, train, val, config, progress=False).train()
    assert len(history["loss"]) == 300
    best = BigramLanguageModel.from_probs(bigram_probs(train, 6, 0.0))
    _, best_loss = best(train[:-1][None], train[1:][None])
    _, loss = model(train[:-1][None], train[1:][None])
    assert history["train_loss"][0] > 1.7  # about ln 6 = 1.79 at the start
    assert loss.item() < best_loss.item() + 0.02


def test_trainer_checkpoint_round_trip(tmp_path):
    data = torch.randint(5, (500,), generator=torch.Generator().manual_seed(5))
    config = TrainConfig(max_iters=20, batch_size=4, eval_interval=10, eval_iters=2, warmup_iters=0)
    torch.manual_seed(0)
    trainer = Trainer(BigramLanguageModel(5, block_size=4), data, data, config, out_dir=tmp_path,
                      progress=False)
    trainer.train(until=10)
    trainer.save()
    resumed = Trainer.resume(tmp_path / "ckpt.pt", BigramLanguageModel(5, block_size=4), data, data,
                             progress=False)
    assert resumed.step == 10
    resumed.train()
    trainer.train()
    assert torch.equal(resumed.model.token_embedding_table.weight,
                       trainer.model.token_embedding_table.weight)


def test_generate_works_with_the_bigram_model():
    tok = CharTokenizer.from_text("abc\n")
    torch.manual_seed(0)
    model = BigramLanguageModel(tok.vocab_size, block_size=4)
    text = generate_text(model, tok, "a", max_new_tokens=20, seed=1)
    assert len(text) == 21 and text.startswith("a") and set(text) <= set("abc\n")
    assert generate_text(model, tok, "a", 20, seed=1) == text  # a seeded generator reproduces
    # A table that makes token i always followed by (i + 1) % 3: greedy sampling follows it.
    with torch.no_grad():
        model.token_embedding_table.weight.copy_(torch.roll(torch.eye(4), 1, dims=1) * 10)
    out = generate(model, torch.tensor([[0]]), 6, temperature=0.0)
    assert out.tolist() == [[0, 1, 2, 3, 0, 1, 2]]
