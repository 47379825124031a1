"""Chapter 24's FLOP count (course_lib.linear_attention.flops): against a count by hand on a tiny
config, and its matrix products against what torch's own FLOP counter sees in a forward pass."""

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from course_lib.linear_attention.hybrid import HybridConfig, HybridGPT

TINY = dict(vocab_size=3, block_size=2, n_layer=1, n_embd=2, n_head=1, layers="L", chunk_size=2)


def test_deltanet_count_equals_a_count_by_hand():
    # One DeltaNet layer: 1 head, dk = dv = 2, chunks of C = 2, T = 2 (one chunk, so per token =
    # half
    # of the chunk's work), conv_dim = 2 + 2 + 2 = 6, SwiGLU hidden 6, V = 3.
    mixer = (
        4 * 6  # SiLU after the convolution, 6 channels
        + 3
        + 5  # beta = sigmoid(b); g: add, softplus (3), multiply
        + 10
        + 8  # L2 norm of q (3*2 + 2) and its scale (2); of k (8)
        + 32 / 2  # k k^T and q k^T: 2 x (2 C^2 dk) = 2 x 16 per chunk
        + 34 / 2  # D: 2 C^2 subtract and exp; beta*D*kk, +I, D*qk: 4 C^2; cumsums and decays 5 C
        + 4 / 2  # unit triangular solve: C (C - 1) dv
        + 16 / 2  # reads of the writes: 2 C^2 dv
        + 48 / 2  # K S0, Q S0, k^T U: 3 x 2 C dk dv
        + 12 / 2  # gamma_C S0 and + (2 dk dv), to_end * k (C dk)
        + 20 / 2  # 5 C dv: the right-hand side's and the output's scalings
        + 20
    )  # output RMSNorm (8), its weight (2), SiLU(z) (8), multiply (2)
    block = 2 * (8 + 4) + 4 + 30  # two zero-centred RMSNorms, two residual adds, SwiGLU 5 x 6
    head = 12 + 5 * 3  # final norm, log-softmax over 3 tokens
    weights = (
        12 + 4 + 2 + 2 + 24 + 4 + 36 + 6
    )  # qkv, z, b, a, conv 6 x 4, out, SwiGLU 3 x 2 x 6, head 3 x 2
    model = HybridGPT(HybridConfig(**TINY))
    assert model.flops_per_token() == 6 * weights + 3 * (mixer + block + head) == 1254


def test_padding_is_counted_per_real_token():
    # T = 3 with chunks of 2: two chunks are computed (one padded), i.e. 2/3 of a chunk per token
    a = HybridGPT(HybridConfig(**TINY)).flops_terms(3)
    b = HybridGPT(HybridConfig(**TINY)).flops_terms(2)
    assert a["DeltaNet: chunk: k k^T, q k^T"] == pytest.approx(32 * 2 / 3)
    assert b["DeltaNet: chunk: k k^T, q k^T"] == pytest.approx(32 / 2)


@pytest.mark.parametrize("layers", ["L", "A", "LLLA"])
def test_matrix_products_equal_torchs_flop_counter(layers):
    """torch counts mm and bmm (2 per multiply-add), not the triangular solve: our count's
    products must equal its total exactly, for a shape with chunks that do not divide T, more value
    than key heads and a context long enough for several chunks."""
    config = HybridConfig(
        vocab_size=11,
        block_size=12,
        n_layer=4,
        n_embd=8,
        n_head=2,
        layers=layers,
        chunk_size=5,
        linear_k_heads=2,
        linear_v_heads=4,
        linear_k_dim=3,
        linear_v_dim=5,
    )
    model, T = HybridGPT(config), 12
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, 11, (1, T)))
    terms = model.flops_terms(T)
    weights = terms["6 x weights"] / 6 - sum(
        p.numel() for n, p in model.named_parameters() if p.dim() == 3
    )
    products = [
        k for k in terms if k.endswith(("k k^T, q k^T", "(C x C x dv)", "predict, read, write"))
    ]
    ours = 2 * weights * T + T * sum(terms[k] for k in products)
    # attention's scores and values: torch's counter does not see the CPU's fused attention kernel,
    # so they are checked against their formula (the causal half: T / 2 keys a token on average)
    half = sum(terms[k] for k in terms if k.endswith(("scores q k^T", "weighted values")))
    assert (
        half == config.layer_kinds.count("A") * 2 * 2 * (T // 2) * config.n_head * config.head_size
    )
    assert counter.get_total_flops() == pytest.approx(ours)


def test_the_count_covers_more_than_the_weights_and_the_state():
    """What the former count left out (the within-chunk products, the solve, the norms) is there."""
    terms = HybridGPT(
        HybridConfig(
            vocab_size=65, block_size=64, n_layer=4, n_embd=64, n_head=4, layers="L", chunk_size=32
        )
    ).flops_terms()
    inside = sum(v for k, v in terms.items() if k.startswith("DeltaNet: chunk"))
    assert inside > terms["DeltaNet: state: predict, read, write"]
