"""course_lib.forgetting: the renormalised loss and the new-token mass separate a prior shift from
lost knowledge; replay batches mix pretraining text into a task's batches."""
import math

import pytest
import torch
import torch.nn as nn

from course_lib.lora_gpt import extend_vocabulary
from course_lib.forgetting import replay_batch_fn, replay_token_share, vocab_split_loss
from course_lib.model import GPT, GPTConfig
from course_lib.utils import IGNORE_INDEX


def tiny_gpt(V=12, seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=2, n_embd=16)).eval()


DATA = torch.randint(0, 10, (500,), generator=torch.Generator().manual_seed(1))


def test_without_new_tokens_the_two_losses_agree():
    m = tiny_gpt(V=10)
    r = vocab_split_loss(m, DATA, V0=10, batches=3, batch_size=4)
    assert (r["loss"] == pytest.approx(r["old_vocab_loss"])
            and r["new_mass"] == pytest.approx(0.0, abs=1e-7))
    assert r["uniform"] == pytest.approx(math.log(10))


def test_a_pure_prior_shift_leaves_the_old_vocabulary_loss_unchanged():
    """Raising only the new tokens' logits (their LM-head bias, here their rows' output) moves mass
    onto them and raises the plain loss, but the loss renormalised over the old tokens does not
    move."""
    base = extend_vocabulary(tiny_gpt(V=10), 2)
    before = vocab_split_loss(base, DATA, V0=10, batches=3, batch_size=4)
    shifted = extend_vocabulary(tiny_gpt(V=10), 2)

    class Shift(nn.Module):
        def __init__(self, head):
            super().__init__()
            self.head = head

        def forward(self, h):
            out = self.head(h)
            # +5 on every new token's logit
            return torch.cat([out[..., :10], out[..., 10:] + 5.0], -1)

    shifted.lm_head = Shift(shifted.lm_head)
    after = vocab_split_loss(shifted, DATA, V0=10, batches=3, batch_size=4)
    assert after["loss"] > before["loss"] + 0.5 and after["new_mass"] > 0.5 > before["new_mass"]
    assert after["old_vocab_loss"] == pytest.approx(before["old_vocab_loss"], abs=1e-5)


def test_new_ids_in_the_data_are_refused():
    with pytest.raises(ValueError, match="not below V0"):
        vocab_split_loss(tiny_gpt(), torch.tensor([0, 11] * 20), V0=10)


def task_batches(split, g):
    x = torch.randint(0, 10, (8, 6), generator=g)
    y = torch.full((8, 6), IGNORE_INDEX)
    y[:, -2:] = 1  # two counted targets per row
    return x, y


def test_replay_replaces_a_share_of_the_rows_with_text():
    text = torch.arange(100) % 10
    fn = replay_batch_fn(task_batches, text, 0.25)
    x, y = fn("train", torch.Generator().manual_seed(0))
    assert x.shape == (8, 6) and y.shape == (8, 6)
    # text windows, shifted
    assert (y[:2] != IGNORE_INDEX).all() and torch.equal(y[:2], (x[:2] + 1) % 10)
    assert (y[2:, :4] == IGNORE_INDEX).all()
    assert replay_token_share((x, y), 2) == pytest.approx(12 / (12 + 12))
    vx, vy = fn("val", torch.Generator().manual_seed(0))  # the task's validation stays the task's
    assert torch.equal((vx, vy)[1], task_batches("val", torch.Generator().manual_seed(0))[1])
    assert replay_batch_fn(task_batches, text,
                           0.0)("train", torch.Generator().manual_seed(0))[1].eq(1).sum() == 16


@pytest.mark.parametrize("share", [-0.1, 1.0, 2])
def test_bad_share(share):
    with pytest.raises(ValueError, match="replay share"):
        replay_batch_fn(task_batches, torch.arange(100), share)
