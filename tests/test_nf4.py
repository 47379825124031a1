"""NF4 quantisation (course_lib.nf4): the code book against Dettmers et al. 2023's published
values, the round trip, the memory, the layer, and (where it installs) bitsandbytes itself."""
import pytest
import torch
import torch.nn as nn
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib.lora import add_lora
from course_lib.nf4 import (NF4Linear, dequantize_nf4, linear_bytes, nf4_code_book,
                            quantize_linears, quantize_nf4)

# The NF4 data type as printed in the QLoRA paper's appendix (Dettmers et al. 2023, appendix E).
PAPER_NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
             -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
             0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
             0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def test_code_book_is_the_papers():
    book = nf4_code_book()
    assert book.shape == (16,) and book.dtype == torch.float32
    assert torch.allclose(book, torch.tensor(PAPER_NF4), atol=1e-6)
    assert (book == 0).sum() == 1 and (book > 0).sum() == 8 and (book < 0).sum() == 7


def test_code_book_values_round_trip_exactly():
    """A block made of code book values (times a scale) comes back bit for bit."""
    book = nf4_code_book()
    # 64 numbers, absmax 0.37
    w = torch.cat([book, book.flip(0), book.roll(5), book.roll(11)]) * 0.37
    codes, absmax = quantize_nf4(w)
    assert torch.equal(absmax, torch.tensor([0.37]))
    assert torch.allclose(dequantize_nf4(codes, absmax, w.shape), w, atol=0, rtol=1e-6)


def test_packing_and_sizes():
    w = torch.randn(24, 16)
    codes, absmax = quantize_nf4(w, block_size=64)
    assert codes.dtype == torch.uint8 and codes.shape == (24 * 16 // 2,) and absmax.shape == (6,)
    assert torch.equal(absmax, w.flatten().view(6, 64).abs().amax(1))


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 300), st.sampled_from([2, 16, 64]), st.integers(0, 2 ** 16))
def test_round_trip_error_is_at_most_half_a_gap(n, block, seed):
    """Every number comes back as the nearest code book value times its block's absmax: the error
    is at most half the widest gap of the book (0.1519) times that absmax; the absmax itself is
    exact."""
    w = torch.randn(n, generator=torch.Generator().manual_seed(seed))
    codes, absmax = quantize_nf4(w, block)
    back = dequantize_nf4(codes, absmax, w.shape, block)
    scale = (
        torch.nn.functional.pad(w, (0, (-n) % block))
        .view(-1, block)
        .abs()
        .amax(1)
        .repeat_interleave(block)[:n]
    )
    half_gap = (nf4_code_book().diff().max() / 2).item()
    assert ((back - w).abs() <= half_gap * scale + 1e-6).all()
    assert torch.isclose(back.abs().max(), w.abs().max())  # the largest number is kept exactly


def test_bad_block_size():
    with pytest.raises(ValueError, match="even number"):
        quantize_nf4(torch.randn(10), block_size=3)


def test_linear_layer_memory_and_forward():
    torch.manual_seed(0)
    lin = nn.Linear(128, 384)
    q = NF4Linear(lin)
    assert isinstance(q, nn.Linear) and not any(p.requires_grad for p in q.parameters())
    # codes, absmaxes, float bias
    assert q.nbytes() == 128 * 384 // 2 + 128 * 384 // 64 * 4 + 384 * 4
    x = torch.randn(2, 5, 128)
    assert torch.allclose(q(x), torch.nn.functional.linear(x, q.weight, lin.bias))
    rel = (q.weight - lin.weight).norm() / lin.weight.norm()
    assert 0 < rel < 0.15  # about 4 bits of precision


def test_qlora_trains_only_the_adapters():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    float_bytes = linear_bytes(model)
    quantize_linears(model, ("0", "2"))
    assert linear_bytes(model) < float_bytes / 4
    before = model(torch.randn(3, 16))
    add_lora(model, 2, 2.0, targets=("0", "2"))
    x = torch.randn(3, 16)
    model(x).pow(2).sum().backward()
    trained = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trained == {"0.lora_A", "0.lora_B", "2.lora_A", "2.lora_B"}
    assert model[0].lora_A.grad is not None or model[0].lora_B.grad is not None
    assert before.shape == (3, 8)
    with pytest.raises(ValueError, match="already quantised"):
        quantize_linears(nn.Sequential(NF4Linear(nn.Linear(4, 4))), ("0",))


def test_equals_bitsandbytes():
    bnb = pytest.importorskip("bitsandbytes.functional")
    torch.manual_seed(0)
    w = torch.randn(64, 128) * 0.02
    try:
        q, state = bnb.quantize_4bit(w, blocksize=64, quant_type="nf4")
    except (RuntimeError, NotImplementedError) as error:  # a build without a CPU backend
        pytest.skip(f"bitsandbytes cannot quantise on this CPU: {error}")
    assert torch.allclose(bnb.get_4bit_type("nf4", device="cpu"), nf4_code_book())
    codes, absmax = quantize_nf4(w)
    assert torch.allclose(state.absmax.float(), absmax)
    ours, theirs = dequantize_nf4(codes, absmax,
                                  w.shape), bnb.dequantize_4bit(q, state, quant_type="nf4")
    assert torch.equal(codes, q.flatten())  # the same bytes, the high half first
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-7)  # and the same numbers back
