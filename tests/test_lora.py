"""course_lib.lora: LoRA adapters start as the base model, merge exactly, freeze the base, count
their parameters by formula, and compute what the peft library's LoRA computes."""
import copy

import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings, strategies as st

from course_lib import GPT, GPTConfig
from course_lib.lora import (DEFAULT_TARGETS, LoRALinear, add_lora, lora_layers,
                             lora_parameter_count, lora_state_dict, merge_lora,
                             trainable_parameters)

TINY = GPTConfig(vocab_size=37, block_size=16, n_layer=2, n_head=2, n_embd=24, bias=True)


def tiny_gpt(seed=0, **overrides):
    torch.manual_seed(seed)
    return GPT(GPTConfig(**{**TINY.to_dict(), **overrides})).eval()


def tokens(B=3, T=16, V=37, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


def randomize_b(model, seed=2, scale=0.5):
    """Give every adapter a non-zero B (at B = 0 they add nothing, and nothing would be tested)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in lora_layers(model).values():
            layer.lora_B.copy_(scale * torch.randn(layer.lora_B.shape, generator=g))


def test_start_state_is_the_base_model_exactly():
    model = tiny_gpt()
    x = tokens()
    before = model(x)[0]
    add_lora(model, rank=4, alpha=8)
    assert torch.equal(model(x)[0], before)  # B = 0: the update is exactly zero, not just small
    layers = lora_layers(model)
    assert sorted(layers) == [f"blocks.{i}.attn.{n}" for i in range(2)
                              for n in ("c_attn", "c_proj")]
    for layer in layers.values():
        assert torch.count_nonzero(layer.lora_B) == 0 and torch.count_nonzero(layer.lora_A) > 0
        assert layer.scaling == 8 / 4


def test_the_mlp_c_proj_is_not_a_default_target():
    model = add_lora(tiny_gpt())
    assert (isinstance(model.blocks[0].mlp.c_proj, nn.Linear)
            and not isinstance(model.blocks[0].mlp.c_proj, LoRALinear))


def test_merge_gives_the_same_logits_and_plain_linear_layers():
    model = add_lora(tiny_gpt(), rank=4, alpha=8)
    randomize_b(model)
    x = tokens()
    adapted = model(x)[0]
    base_logits = tiny_gpt()(x)[0]
    assert (adapted - base_logits).abs().max() > 1e-2  # the adapters change the model ...
    merge_lora(model)
    assert not lora_layers(model)
    assert isinstance(model.blocks[0].attn.c_attn, nn.Linear)
    # ... and merging keeps that change
    torch.testing.assert_close(model(x)[0], adapted, atol=1e-5, rtol=0)
    # the merged weight is W + (alpha / r) B A, computed here independently of LoRALinear.merged
    fresh = add_lora(tiny_gpt(), rank=4, alpha=8)
    randomize_b(fresh)
    layer = fresh.blocks[1].attn.c_proj
    expected = layer.base.weight + 2.0 * layer.lora_B @ layer.lora_A
    torch.testing.assert_close(model.blocks[1].attn.c_proj.weight, expected, atol=1e-6, rtol=0)


def test_frozen_base_gets_no_gradient_and_adapters_do():
    model = add_lora(tiny_gpt(), rank=2)
    randomize_b(model)  # with B = 0, A's gradient is zero too (it flows through B)
    x = tokens()
    _, loss = model(x, x)
    loss.backward()
    for name, p in model.named_parameters():
        if name.endswith(("lora_A", "lora_B")):
            assert p.requires_grad and p.grad is not None and p.grad.abs().sum() > 0, name
        else:
            assert not p.requires_grad and p.grad is None, name


def test_b_zero_means_a_gets_no_gradient_at_the_first_step():
    model = add_lora(tiny_gpt(), rank=2)
    x = tokens()
    model(x, x)[1].backward()
    layer = model.blocks[0].attn.c_attn
    assert (torch.count_nonzero(layer.lora_A.grad) == 0
            and torch.count_nonzero(layer.lora_B.grad) > 0)


# Ranks up to the narrowest width (C = 8): a larger one is refused (check_rank_fits).
@settings(max_examples=15, deadline=None)
@given(
    rank=st.integers(1, 8),
    n_layer=st.integers(1, 3),
    heads_and_c=st.sampled_from([(1, 8), (2, 16), (4, 32)]),
    targets=st.sampled_from(
        [DEFAULT_TARGETS, ("c_attn",), ("c_fc", "c_proj"), ("attn.c_proj", "mlp.c_fc")]
    ),
)
def test_trainable_parameters_follow_the_formula(rank, n_layer, heads_and_c, targets):
    n_head, C = heads_and_c
    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=n_layer, n_head=n_head, n_embd=C))
    predicted = lora_parameter_count(model, rank, targets)
    add_lora(model, rank=rank, targets=targets)
    assert trainable_parameters(model) == predicted
    assert sum(v.numel() for v in lora_state_dict(model).values()) == predicted
    if targets == DEFAULT_TARGETS:  # c_attn: r (C + 3C), c_proj: r (C + C) per block
        assert predicted == 6 * rank * C * n_layer


def test_bad_input_is_one_clear_error():
    with pytest.raises(ValueError, match="match no layer.*c_attn"):
        add_lora(tiny_gpt(), targets=("q_proj",))
    with pytest.raises(ValueError, match="must name nn.Linear"):
        add_lora(tiny_gpt(), targets=("ln_1",))
    with pytest.raises(ValueError, match="positive integer"):
        add_lora(tiny_gpt(), rank=0)
    with pytest.raises(ValueError, match="already has a LoRA adapter"):
        add_lora(add_lora(tiny_gpt()))
    with pytest.raises(ValueError, match="no LoRA adapters"):
        merge_lora(tiny_gpt())


def test_a_is_initialised_like_peft_and_nn_linear():
    """Kaiming-uniform with a = sqrt(5): U(-1/sqrt(in), 1/sqrt(in)), nn.Linear's default."""
    layer = LoRALinear(nn.Linear(400, 30), rank=64, alpha=16)
    bound = 1 / 400 ** 0.5
    assert layer.lora_A.abs().max() <= bound
    assert layer.lora_A.abs().max() > 0.95 * bound  # 25,600 uniform draws come close to the bound


# --- the reference: peft's LoRA on a Hugging Face GPT-2 -------------------------------------------

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


def tiny_hf(seed=0):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=97, n_positions=32, n_embd=48, n_layer=3, n_head=4,
                                     initializer_range=0.1, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config).eval()


@pytest.mark.parametrize("targets", [("c_attn",), ("attn.c_attn", "attn.c_proj")])
def test_equal_to_peft_lora_on_gpt2(targets):
    hf = tiny_hf()
    ours = add_lora(GPT.from_pretrained(hf), rank=4, alpha=12, targets=targets)
    config = peft.LoraConfig(r=4, lora_alpha=12, target_modules=list(targets), lora_dropout=0.0,
                             fan_in_fan_out=True)  # GPT-2's Conv1D stores its weights (in, out)
    theirs = peft.get_peft_model(copy.deepcopy(hf), config).eval()
    randomize_b(ours)
    # copy our A and B into peft's adapters; the names differ only by prefix and ".default.weight"
    theirs_params = dict(theirs.named_parameters())
    copied = 0
    with torch.no_grad():
        for name, layer in lora_layers(ours).items():
            hf_name = "base_model.model.transformer.h." + name.removeprefix("blocks.")
            theirs_params[f"{hf_name}.lora_A.default.weight"].copy_(layer.lora_A)
            theirs_params[f"{hf_name}.lora_B.default.weight"].copy_(layer.lora_B)
            copied += 2
    n_peft = sum(1 for n in theirs_params if ".lora_" in n)
    assert copied == n_peft == 2 * 3 * len(targets)  # every peft adapter received ours
    assert trainable_parameters(ours) == sum(p.numel() for p in theirs.parameters()
                                             if p.requires_grad)
    x = torch.randint(0, 97, (2, 32), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        our_logits = ours(x)[0]
        their_logits = theirs(input_ids=x).logits
        base_logits = hf(input_ids=x).logits
    assert (our_logits - base_logits).abs().max() > 1e-2  # the adapters matter ...
    torch.testing.assert_close(our_logits, their_logits, atol=1e-5, rtol=0)  # ... equally in both
    # merging: ours into nn.Linear, peft's into Conv1D (merge_and_unload), still equal
    merged_ours = merge_lora(ours)(x)[0]
    merged_theirs = theirs.merge_and_unload()(input_ids=x).logits
    torch.testing.assert_close(merged_ours, merged_theirs, atol=1e-5, rtol=0)
