"""course_lib.optim: the default AdamW and cosine schedule unchanged by the move out of train.py,
Muon equal to torch.optim.Muon, which parameter goes to which optimizer, the warm-up/stable/decay
schedule's shape, and runs with Muon resuming bit for bit."""
import math

import pytest
import torch
import torch.nn as nn

from course_lib.data import load_text, train_val_split
from course_lib.optim import (Muon, MuonWithAdamW, configure_optimizer, cosine_lr, lr_at,
                              muon_lr_ratio, muon_param_groups, newton_schulz, set_lr, wsd_lr)
from course_lib.tokenizers import CharTokenizer
from course_lib.train import TrainConfig, Trainer

TEXT = load_text()[:20_000]
TOK = CharTokenizer.from_text(TEXT)
TRAIN, VAL = train_val_split(torch.tensor(TOK.encode(TEXT)))
LLAMA_STYLE = dict(norm="rmsnorm", rope_theta=10000.0, mlp="swiglu", n_kv_head=1)


@pytest.fixture
def model(tiny_model):
    return lambda seed=0, **changes: tiny_model(seed, **{"vocab_size": TOK.vocab_size, "n_embd": 32,
                                                         **changes})


def tiny_config(**kw):
    defaults = dict(max_iters=24, batch_size=8, learning_rate=3e-3, warmup_iters=4, eval_interval=8,
                    eval_iters=2)
    return TrainConfig(**{**defaults, **kw})


# --- the default is what train.py did before the move --------------------------------------------


def test_the_default_optimizer_and_schedule_train_exactly_as_before(model):
    """The Trainer with the default config against the loop train.py ran before course_lib.optim
    existed, written out here: AdamW with decayed matrices and undecayed vectors, every group's
    lr set from the warm-up + cosine formula, clipping at 1.0. Bitwise equal weights."""
    config = tiny_config(max_iters=6, weight_decay=0.1)
    assert (config.optimizer, config.schedule) == ("adamw", "cosine")  # the defaults
    trainer = Trainer(model(), TRAIN, VAL, config, progress=False, verbose=False)
    trainer._eval_due = lambda: False  # no evaluations: they draw no training batches anyway
    trainer.train()

    by_hand = model()
    params = list(by_hand.parameters())
    adamw = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                               {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                              lr=config.learning_rate, betas=(config.beta1, config.beta2))
    generator = torch.Generator().manual_seed(config.seed)
    from course_lib.data import get_batch
    for step in range(config.max_iters):
        w, S = config.warmup_iters, config.max_iters
        lr = (config.learning_rate * (step + 1) / (w + 1) if step < w else
              config.min_lr + 0.5 * (1 + math.cos(math.pi * (step - w) / (S - w)))
              * (config.learning_rate - config.min_lr))
        for group in adamw.param_groups:
            group["lr"] = lr
        adamw.zero_grad(set_to_none=True)
        by_hand(*get_batch(TRAIN, by_hand.config.block_size, config.batch_size,
                           generator))[1].backward()
        torch.nn.utils.clip_grad_norm_(by_hand.parameters(), config.grad_clip)
        adamw.step()
    for (name, a), b in zip(trainer.model.state_dict().items(), by_hand.state_dict().values()):
        assert torch.equal(a, b), name


def test_set_lr_writes_the_rate_and_scales_only_groups_that_ask():
    w = nn.Parameter(torch.zeros(2, 2))
    opt = torch.optim.SGD([{"params": [w]},
                           {"params": [nn.Parameter(torch.zeros(2))], "lr_scale": 20.0}], lr=1.0)
    set_lr(opt, 1e-3)
    assert [g["lr"] for g in opt.param_groups] == [1e-3, 1e-3 * 20.0]


# --- Muon ---------------------------------------------------------------------------------------


def test_our_muon_in_bfloat16_equals_torch_muon_bitwise():
    """Our Muon only lets the Newton-Schulz dtype be chosen; in torch's own (bfloat16) it must be
    torch.optim.Muon exactly: three steps on a tall, a wide and a square matrix, both lr rules."""
    for adjust in ("original", "match_rms_adamw"):
        torch.manual_seed(0)
        ours = [nn.Parameter(torch.randn(*shape)) for shape in [(48, 16), (16, 40), (24, 24)]]
        theirs = [nn.Parameter(p.detach().clone()) for p in ours]
        a = Muon(ours, lr=0.02, weight_decay=0.1, adjust_lr_fn=adjust, ns_dtype=torch.bfloat16)
        b = torch.optim.Muon(theirs, lr=0.02, weight_decay=0.1, adjust_lr_fn=adjust)
        for _ in range(3):
            for p, q in zip(ours, theirs):
                p.grad = torch.randn_like(p)
                q.grad = p.grad.clone()
            a.step()
            b.step()
        assert all(torch.equal(p, q) for p, q in zip(ours, theirs)), adjust
        for p, q in zip(ours, theirs):
            assert torch.equal(a.state[p]["momentum_buffer"], b.state[q]["momentum_buffer"])


def test_newton_schulz_in_float32_agrees_with_bfloat16_and_flattens_the_spectrum():
    torch.manual_seed(0)
    # singular values spread over 1e3
    g = torch.randn(64, 16) @ torch.diag(torch.logspace(-2, 1, 16))
    coefficients = (3.4445, -4.775, 2.0315)
    o32 = newton_schulz(g, coefficients, 5, 1e-7, torch.float32)
    o16 = newton_schulz(g, coefficients, 5, 1e-7, torch.bfloat16)
    assert o32.dtype == torch.float32 and o32.shape == g.shape
    assert (o32 - o16.float()).abs().max() < 0.05  # bfloat16 keeps 8 bits: about 2 decimal digits
    # The quintic pushes every singular value towards 1 (into a band around it, not onto it): the
    # spectrum spanned a factor 1000 (the condition number of g); after 5 iterations, less than 5.
    assert torch.linalg.cond(g) > 999
    s = torch.linalg.svdvals(o32)
    assert s.max() < 1.3 and s.max() / s.min() < 5


def test_muon_lr_ratio_follows_torch():
    assert muon_lr_ratio(torch.Size([512, 128]), "original") == 2.0  # sqrt(512 / 128)
    assert muon_lr_ratio(torch.Size([128, 512]), "original") == 1.0  # wide: max(1, 1/4) = 1
    assert muon_lr_ratio(torch.Size([128, 512]),
                         "match_rms_adamw") == pytest.approx(0.2 * math.sqrt(512))


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.parametrize("changes", [{}, LLAMA_STYLE, {"bias": True}])
def test_muon_takes_the_hidden_matrices_and_adamw_the_rest(model, tie, changes):
    """Derived from the parameter names: every Linear weight inside the blocks is a hidden
    matrix; the embeddings and the head are other matrices; gains and biases are vectors."""
    m = model(tie_weights=tie, **changes)
    hidden, other, vectors = muon_param_groups(m)
    names = {id(p): n for n, p in m.named_parameters()}  # a tied matrix once, as wte.weight
    expect_hidden = {n for n,
                     p in m.named_parameters() if n.startswith("blocks.") and n.endswith(".weight")
                     and p.dim() == 2}
    assert {names[id(p)] for p in hidden} == expect_hidden
    assert {names[id(p)]
            for p in other} == ({"wte.weight"} | ({"wpe.weight"} if m.wpe is not None else set())
                                             | (set() if tie else {"lm_head.weight"}))
    assert {names[id(p)] for p in vectors} == {n for n, p in m.named_parameters() if p.dim() == 1}
    if changes.get("mlp") == "swiglu":
        assert any(n.endswith("mlp.c_gate.weight") for n in expect_hidden)
    assert len(hidden) + len(other) + len(vectors) == len(list(m.parameters()))

    opt = configure_optimizer(m, tiny_config(optimizer="muon", muon_lr=0.05, weight_decay=0.1))
    assert isinstance(opt, MuonWithAdamW)
    muon_group, decay, no_decay = opt.param_groups
    assert muon_group["params"] == hidden and muon_group["lr_scale"] == 0.05 / 3e-3
    assert decay["params"] == other and decay["weight_decay"] == 0.1
    assert no_decay["params"] == vectors and no_decay["weight_decay"] == 0.0
    set_lr(opt, 1e-3)
    assert muon_group["lr"] == pytest.approx(0.05 / 3e-3 * 1e-3) and decay["lr"] == 1e-3


def test_muon_needs_hidden_matrices():
    with pytest.raises(ValueError, match="no hidden weight matrices.*use optimizer 'adamw'"):
        configure_optimizer(nn.Embedding(5, 4), tiny_config(optimizer="muon"))


def test_a_muon_run_trains_and_uses_muon_for_the_blocks(model):
    m = model(**LLAMA_STYLE)
    trainer = Trainer(m, TRAIN, VAL, tiny_config(optimizer="muon", muon_lr=0.02, schedule="wsd"),
                      progress=False, verbose=False)
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    history = trainer.train()
    assert history["val_loss"][-1] < history["val_loss"][0] - 0.3
    state = trainer.optimizer.state_dict()
    # one momentum buffer per matrix
    assert len(state["muon"]["state"]) == len(muon_param_groups(m)[0])
    assert all(not torch.equal(before[n], p) for n, p in m.named_parameters())


def test_resume_with_muon_is_bitwise(model, tmp_path):
    """Muon's momentum buffers and AdamW's moments travel in the checkpoint: stopping at step 11
    and resuming gives exactly the uninterrupted run's weights, history and optimizer state."""
    config = tiny_config(optimizer="muon", schedule="wsd", muon_lr=0.02)
    straight = Trainer(model(**LLAMA_STYLE), TRAIN, VAL, config, progress=False, verbose=False)
    straight.train()

    stopped = Trainer(model(**LLAMA_STYLE), TRAIN, VAL, config, out_dir=tmp_path, progress=False,
                      verbose=False)
    stopped.train(until=11)
    stopped.save()
    torch.manual_seed(999)  # disturb the global RNG before resuming
    resumed = Trainer.resume(tmp_path / "ckpt.pt", train_data=TRAIN, val_data=VAL, progress=False,
                             verbose=False)
    assert isinstance(resumed.optimizer, MuonWithAdamW) and resumed.step == 11
    resumed.train()
    for (name, a), b in zip(straight.model.state_dict().items(),
                            resumed.model.state_dict().values()):
        assert torch.equal(a, b), name
    assert straight.history == resumed.history
    a, b = straight.optimizer.state_dict(), resumed.optimizer.state_dict()
    for part in ("muon", "adamw"):
        for i, s in a[part]["state"].items():
            assert all(torch.equal(s[k], b[part]["state"][i][k]) for k in s), (part, i)


def test_an_adamw_checkpoint_does_not_resume_as_muon(model, tmp_path):
    trainer = Trainer(model(), TRAIN, VAL, tiny_config(max_iters=2), out_dir=tmp_path,
                      progress=False, verbose=False)
    trainer.train()
    with pytest.raises(ValueError, match="cannot resume this run.*another optimizer"):
        Trainer.resume(tmp_path / "ckpt.pt", train_data=TRAIN, val_data=VAL, progress=False,
                       config=tiny_config(max_iters=4, optimizer="muon"))


# --- schedules ----------------------------------------------------------------------------------


def test_wsd_warms_up_holds_then_decays_linearly():
    lr, low, warmup, S = 2e-3, 2e-4, 10, 100
    f = lambda s, frac=0.3: wsd_lr(s, lr, low, warmup, S, frac)
    # the warm-up is the cosine schedule's
    assert all(f(s) == cosine_lr(s, lr, low, warmup, S) for s in range(warmup))
    # stable until the last 30% (30 steps): steps 10 .. 69 at the peak
    assert all(f(s) == lr for s in range(warmup, 70))
    # then a straight line from the peak at step 70 to min_lr at step 100: halfway at step 85
    assert f(85) == pytest.approx((lr + low) / 2)
    assert f(76) - f(77) == pytest.approx((lr - low) / 30)
    assert f(100) == f(150) == low
    # cooldown_fraction 0: never decays before the end; 1: decays from the end of the warm-up
    assert f(99, 0.0) == lr
    assert f(warmup, 1.0) == lr and f(55, 1.0) == pytest.approx(lr + (55 - 10) / 90 * (low - lr))
    # what the Trainer uses
    config = TrainConfig(schedule="wsd", learning_rate=lr, min_lr=low, warmup_iters=warmup,
                         max_iters=S, cooldown_fraction=0.3)
    assert [lr_at(s, config) for s in range(120)] == [f(s) for s in range(120)]


# The new TrainConfig fields' bad values are rows of tests/test_bad_input_api.py.
