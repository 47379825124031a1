"""Chapter 22: multi-token prediction heads (course_lib.mtp, GPTConfig.mtp_heads)."""

import pytest
import torch
import torch.nn.functional as F

from course_lib.checkpoint import load_model, save_checkpoint
from course_lib.model import GPT, GPTConfig
from course_lib.mtp import MTPHeads
from course_lib.sizing import count_parameters, flops_per_token


def _config(**kw):
    return GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=2, n_embd=8, **kw)


def test_shapes_and_parameter_count():
    torch.manual_seed(0)
    model = GPT(_config(mtp_heads=3))
    idx = torch.randint(0, 7, (2, 5))
    logits, _ = model(idx)
    z = model.hidden(idx)
    assert logits.shape == (2, 5, 7) and z.shape == (2, 5, 8)
    assert model.mtp.logits(z, model.lm_head).shape == (3, 2, 5, 7)
    assert (
        model.num_parameters()
        == count_parameters(model.config)
        == count_parameters(_config()) + 3 * 8 * 8
    )
    assert model.flops_per_token() == flops_per_token(model.config)


def test_the_loss_equals_a_hand_computation():
    """Position t's head j is scored on the token j + 1 places ahead; the heads' mean, weighted."""
    torch.manual_seed(1)
    model = GPT(_config(mtp_heads=2, mtp_weight=0.5)).train()
    idx = torch.randint(0, 7, (2, 6))
    targets = torch.randint(0, 7, (2, 6))
    targets[1, 3] = -100  # an ignored target: left out of the head that reads it
    _, loss = model(idx, targets)
    z = model.hidden(idx)
    main = F.cross_entropy(model.lm_head(z).reshape(-1, 7), targets.reshape(-1), ignore_index=-100)
    heads = []
    for j in (1, 2):
        terms = []
        for b in range(2):
            for t in range(6 - j):
                y = int(targets[b, t + j])  # the target of position t + j: the token j + 1 after t
                if y == -100:
                    continue
                u = z[b, t] + F.silu(model.mtp.heads[j - 1].proj(z[b, t]))
                terms.append(-F.log_softmax(model.lm_head(u), -1)[y])
        heads.append(torch.stack(terms).mean())
    assert torch.allclose(loss, main + 0.5 * (heads[0] + heads[1]) / 2, atol=1e-6)
    model.eval()  # evaluation reports the next-token loss alone, as a plain GPT does
    assert torch.allclose(model(idx, targets)[1], main, atol=1e-6)


def test_a_window_too_short_for_a_head_gives_it_no_term():
    heads = MTPHeads(4, 3)
    lm_head = torch.nn.Linear(4, 5, bias=False)
    z, y = torch.randn(1, 2, 4), torch.randint(0, 5, (1, 2))
    only = F.cross_entropy(lm_head(heads.heads[0](z[:, :1]))[0], y[0, 1:])  # T = 2: head 1 alone
    assert torch.allclose(heads.loss(z, lm_head, y), only)


def test_main_head_unchanged_by_the_option_at_weight_0():
    """Same seed: the same trunk at step 0 (the heads are built last), and, at mtp_weight 0, the
    same next-token logits, bit for bit, after training steps on the same batches."""
    models = []
    for extra in ({}, {"mtp_heads": 2, "mtp_weight": 0.0}):
        torch.manual_seed(3)
        models.append(GPT(_config(**extra)).train())
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 7, (4, 9), generator=g) for _ in range(3)]
    opts = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in models]
    for batch in batches:
        for model, opt in zip(models, opts):
            opt.zero_grad()
            model(batch[:, :-1], batch[:, 1:])[1].backward()
            opt.step()
    probe = torch.randint(0, 7, (2, 8), generator=g)
    plain, with_heads = (m.eval()(probe)[0] for m in models)
    assert torch.equal(plain, with_heads)


def test_the_weight_moves_the_trunk():
    """The check above can fail: at weight 0.3 the heads' gradient reaches the trunk."""
    models = []
    for extra in ({}, {"mtp_heads": 2}):
        torch.manual_seed(3)
        models.append(GPT(_config(**extra)).train())
    batch = torch.randint(0, 7, (4, 9), generator=torch.Generator().manual_seed(0))
    for model in models:
        model(batch[:, :-1], batch[:, 1:])[1].backward()
    assert not torch.equal(models[0].wte.weight.grad, models[1].wte.weight.grad)


def test_checkpoint_round_trip(tmp_path):
    torch.manual_seed(4)
    model = GPT(_config(mtp_heads=2, mtp_weight=0.1)).eval()
    save_checkpoint(tmp_path / "ckpt.pt", model)
    back, ckpt = load_model(tmp_path / "ckpt.pt")
    assert back.config == model.config and ckpt["model_config"]["mtp_heads"] == 2
    idx = torch.randint(0, 7, (1, 6))
    assert torch.equal(
        back.mtp.logits(back.hidden(idx), back.lm_head),
        model.mtp.logits(model.hidden(idx), model.lm_head),
    )


@pytest.mark.parametrize(
    "bad, phrase",
    [
        ({"mtp_heads": 0}, "mtp_heads must be an integer in [1, 16]"),
        ({"mtp_heads": 2, "mtp_weight": -1.0}, "mtp_weight"),
        ({"mtp_weight": 0.5}, "takes effect only with mtp_heads"),
    ],
)
def test_bad_settings_are_refused_in_one_line(bad, phrase):
    with pytest.raises(ValueError, match=phrase.replace("[", r"\[").replace("]", r"\]")):
        _config(**bad)
