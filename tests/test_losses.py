"""course_lib.losses: the masked loss and accuracy of padded batches (chapter 10), equal to
PyTorch's ignore_index, and the loss estimate of every evaluation (chapter 7)."""
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from course_lib.data import get_batch
from course_lib.losses import estimate_loss, masked_accuracy, masked_cross_entropy, sequence_loss
from course_lib.utils import IGNORE_INDEX


def test_masked_loss_and_accuracy_on_a_hand_checked_batch():
    logits = torch.tensor([[[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]]])  # (1, 3, 2)
    targets = torch.tensor([[0, 0, IGNORE_INDEX]])
    # the first position predicts 0 (right), the second 1 (wrong), the third is a pad: 1 of 2
    assert masked_accuracy(logits, targets) == 0.5
    mask = targets != IGNORE_INDEX
    loss = masked_cross_entropy(logits, targets.clamp(min=0), mask)
    # the mean of the two real positions' losses: -log softmax(5, 0)[0] and -log softmax(0, 5)[0]
    expected = (
        F.cross_entropy(logits[0, :1], targets[0, :1])
        + F.cross_entropy(logits[0, 1:2], targets[0, 1:2])
    ) / 2
    assert torch.allclose(loss, expected)


@given(st.integers(1, 4), st.integers(1, 6), st.integers(2, 7), st.integers(0, 10_000))
def test_masking_equals_pytorchs_ignore_index(B, T, V, seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    mask = torch.rand(B, T, generator=g) < 0.6
    mask[0, 0] = True  # at least one real token
    ignored = targets.masked_fill(~mask, IGNORE_INDEX)
    reference = F.cross_entropy(logits.flatten(0, 1), ignored.flatten(), ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(masked_cross_entropy(logits, targets, mask), reference)
    right = ((logits.argmax(-1) == targets) & mask).sum().item()
    assert masked_accuracy(logits, ignored) == right / mask.sum().item()


def test_an_all_pad_batch_has_zero_loss_and_accuracy_not_nan():
    logits, targets = torch.randn(2, 3, 5), torch.full((2, 3), IGNORE_INDEX)
    assert masked_accuracy(logits, targets) == 0.0
    assert masked_cross_entropy(logits, targets.clamp(min=0), targets != IGNORE_INDEX).item() == 0.0


def test_estimate_loss_is_the_eval_mode_mean_over_fixed_batches(tiny_model):
    model = tiny_model(dropout=0.5)
    model.train()
    data = torch.randint(0, 11, (500,), generator=torch.Generator().manual_seed(3))
    batch_fn = lambda split, g: get_batch(data, 16, 4, g)
    a = estimate_loss(model, batch_fn, 3, seed=1)
    assert model.training  # the mode is restored
    assert a == estimate_loss(model, batch_fn, 3, seed=1)  # no dropout noise, the same batches
    # by hand: split i's batches come from a generator seeded with seed + i, in eval mode
    model.eval()
    for i, split in enumerate(("train", "val")):
        g = torch.Generator().manual_seed(1 + i)
        with torch.no_grad():
            by_hand = sum(model(*batch_fn(split, g))[1].item() for _ in range(3)) / 3
        assert a[split] == pytest.approx(by_hand, rel=1e-6)
    assert list(estimate_loss(model, batch_fn, 1, splits=("val",))) == ["val"]


# a tail, exact windows, tail only
@pytest.mark.parametrize("n, batch_size", [(41, 3), (33, 64), (9, 1)])
def test_sequence_loss_scores_every_token_but_the_first_once(n, batch_size):
    """Derived by hand: every target data[1:] predicted once, from the window of T = 8 tokens it
    falls in (windows start at 0, 8, 16, ...), each window a separate forward pass."""
    from course_lib.model import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=16))
    data = torch.randint(0, 11, (n,), generator=torch.Generator().manual_seed(1))
    per_token = []
    with torch.no_grad():
        for start in range(0, n - 1, 8):
            y = data[start + 1:start + 9]
            logits, _ = model(data[start:start + len(y)][None])
            per_token.append(F.cross_entropy(logits[0], y, reduction="none"))
    expected = torch.cat(per_token)
    assert len(expected) == n - 1
    assert sequence_loss(model, data, batch_size) == pytest.approx(expected.mean().item(), rel=1e-5)
    assert model.training  # left as it was
