"""A whole GPT quantized, weighed and scored (course_lib/quantize/apply.py), and quantization-aware
training (course_lib/quantize/qat.py), on a tiny random GPT."""
import math

import pytest
import torch
import torch.nn as nn

from course_lib import GPT, GPTConfig
from course_lib.quantize.apply import (bits_per_char, bootstrap_interval,
                                       layer_errors, quantize_gptq, quantize_rtn,
                                       stored_bytes, window_losses, windows)
from course_lib.quantize.qat import (FakeQuantize, add_fake_quantize,
                                     qat_trainer, remove_fake_quantize)
from course_lib.quantize.rtn import QuantConfig, fake_quantize

CONFIG = QuantConfig(bits=4, granularity="group", group_size=16)


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    # tied: wte = lm_head
    model = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2, n_head=2, n_embd=32)).eval()
    data = torch.randint(0, 20, (2000,), generator=torch.Generator().manual_seed(1))
    return model, data


def test_every_matrix_is_quantized_and_the_bytes_add_up(tiny):
    model, _ = tiny
    qmodel, stored = quantize_rtn(model, CONFIG, embeddings="same")  # the embeddings at 4 bits too
    matrices = {n for n, p in model.named_parameters() if p.dim() == 2}
    assert {f"{name}.weight" for name in stored} == matrices
    for name, q in stored.items():
        torch.testing.assert_close(qmodel.get_submodule(name).weight,
                                   q.dequantize(), rtol=0, atol=0)
    others = sum(p.numel() * 2 for n, p in model.named_parameters() if p.dim() < 2)
    expected = others + sum(p.numel() // 2 + p.numel() // 16 * 2
                            for n, p in model.named_parameters()
                            if p.dim() == 2)  # 4 bits per weight, one float16 scale per 16
    assert stored_bytes(model, stored) == expected
    assert stored_bytes(model) == sum(p.numel() * 2 for p in model.parameters())
    assert all(0 < e < 0.2 for e in layer_errors(model, stored).values())


@pytest.mark.parametrize("embeddings", ["int8", "fp16"])
def test_the_embeddings_are_stored_wider_and_counted(tiny, embeddings):
    model, data = tiny
    V, C = model.wte.weight.shape
    P = model.wpe.weight.shape[0]
    same = stored_bytes(model, quantize_rtn(model, CONFIG, embeddings="same")[1])
    # the two tables at 4 bits per group of 16 (tied: wte once)
    four_bit = (V + P) * C // 2 + (V + P) * C // 16 * 2
    calibration = data[:16 * 8].view(8, 16)
    for qmodel, stored in (quantize_rtn(model, CONFIG, embeddings),
                           quantize_gptq(model, CONFIG, calibration, embeddings=embeddings)):
        # one byte a weight and one float16 scale a row (a token's, a position's)
        if embeddings == "int8":
            assert stored["wte"].config == QuantConfig(bits=8, granularity="row")
            assert stored["wpe"].shape == (P, C)
            assert stored_bytes(model, stored) == same - four_bit + (V + P) * C + (V + P) * 2
            for name in ("wte", "wpe"):
                assert torch.equal(qmodel.get_submodule(name).weight, stored[name].dequantize())
        else:  # float16: not in the dict, counted with the other float weights
            assert "wte" not in stored and "wpe" not in stored
            assert stored_bytes(model, stored) == same - four_bit + (V + P) * C * 2
            assert torch.equal(qmodel.wte.weight, model.wte.weight.half().float())
        # tied: the head is the table, stored once
        assert qmodel.lm_head.weight is qmodel.wte.weight
        assert {"blocks.0.attn.c_attn", "blocks.1.mlp.c_proj"} <= set(stored)


def test_a_bad_embeddings_setting_is_refused_in_one_line_before_any_work(tiny):
    model, data = tiny
    for call in (lambda: quantize_rtn(model, CONFIG, "int4"),
                 lambda: quantize_gptq(model, CONFIG, data[:32].view(2, 16), embeddings="int4"),
                 lambda: qat_trainer(model, data, CONFIG, 1, 0, embeddings="int4")):
        with pytest.raises(ValueError,
                           match=r"embeddings must be one of int8, fp16, same .*got 'int4'"):
            call()


def test_gptq_quantizes_the_same_grid_and_loses_less(tiny):
    model, data = tiny
    calibration = data[:16 * 32].view(32, 16)
    x, y = windows(data[1000:], 16)
    base = window_losses(model, x, y)
    rtn_model, rtn_stored = quantize_rtn(model, QuantConfig(bits=3))
    gptq_model, gptq_stored = quantize_gptq(model, QuantConfig(bits=3), calibration)
    assert stored_bytes(model, rtn_stored) == stored_bytes(model, gptq_stored)
    rtn_kl = (window_losses(rtn_model, x, y) - base).mean()
    gptq_kl = (window_losses(gptq_model, x, y) - base).mean()
    assert gptq_kl < rtn_kl
    # the model itself is untouched
    assert torch.equal(model.lm_head.weight, tiny[0].lm_head.weight)


def test_windows_scores_and_intervals():
    data = torch.arange(100)
    x, y = windows(data, 16)
    assert x.shape == y.shape == (6, 16) and torch.equal(y, x + 1)
    assert windows(data, 16, limit=2)[0].shape == (2, 16)
    losses = torch.full((50,), math.log(2) * 3)
    assert bits_per_char(losses) == pytest.approx(3.0)
    lo, hi = bootstrap_interval(losses + torch.linspace(-0.1, 0.1, 50))
    assert lo < 3.0 < hi


def test_fake_quantize_is_the_rounded_value_forward_and_the_identity_backward():
    w = torch.randn(8, 32, requires_grad=True)
    out = FakeQuantize(CONFIG)(w)
    assert torch.equal(out.detach(), fake_quantize(w.detach(), CONFIG))
    (out * torch.arange(32.0)).sum().backward()
    assert torch.equal(w.grad, torch.arange(32.0).expand(8, 32))


def test_qat_trains_through_the_rounding_and_leaves_plain_weights(tiny):
    model, data = tiny
    trainer = qat_trainer(model, data, CONFIG, steps=3, seed=0)
    fq = trainer.model
    assert isinstance(fq.wte.parametrizations.weight[0], FakeQuantize)
    trainer.train()
    with torch.no_grad():
        used = fq.wte.weight.clone()  # the rounded matrix the forward pass used
    trained = remove_fake_quantize(fq)
    assert isinstance(trained.wte.weight, nn.Parameter)
    assert not torch.equal(trained.wte.weight, model.wte.weight)  # it learned
    qmodel, _ = quantize_rtn(trained, CONFIG)
    assert torch.equal(qmodel.wte.weight, used)  # rounding afterwards gives what training used
    again = qat_trainer(model, data, CONFIG, steps=3, seed=0)
    again.train()
    assert torch.equal(remove_fake_quantize(again.model).wte.weight, trained.wte.weight)


def test_the_control_run_has_no_fake_quantizer(tiny):
    model, data = tiny
    trainer = qat_trainer(model, data, CONFIG, steps=1, seed=0, fake=False)
    assert not hasattr(trainer.model.wte, "parametrizations")
    add_fake_quantize(trainer.model, CONFIG)
    assert hasattr(trainer.model.wte, "parametrizations")
