"""4-bit weights multiplied by PyTorch's packed CPU kernel (course_lib/quantize/int4.py) and the
model kinds built on them (course_lib/quantize/models.py: gpt-int4, gpt-qat).

The kernel is compared with the dequantized reference, ``x @ dequantize(W)^T`` in float32. Its
dequantized weights are the reference's exactly (a float16 scale times an integer below 16 is
exact in float32), so the only difference is the order of the float32 sums: the bound is a
relative 1e-5 of the largest |output| (float32 has 24 bits; sums of K = 512 products in another
order differ by a few units of 1e-7 of their size, measured at most 2.4e-6 / 4.3 = 6e-7)."""
import pytest
import torch

from course_lib import GPT, GPTConfig
from course_lib.checkpoint import load_model, save_checkpoint
from course_lib.quantize.apply import quantize_rtn
from course_lib.quantize.int4 import (KERNEL_GROUP_SIZES, KERNEL_MAX_ROWS,
                                      Int4Embedding, Int4Linear, _Int4MatMul,
                                      dequantize_int4, kernel_available, unpack_nibbles)
from course_lib.quantize.embeddings import WideEmbedding
from course_lib.quantize.models import QATGPT, QuantizedGPT, QuantizedGPTConfig, QATGPTConfig
from course_lib.quantize.rtn import QuantConfig, quantize

TOL = 1e-5  # relative to the largest |output|: the order of float32 sums, nothing else

needs_kernel = pytest.mark.skipif(not kernel_available(),
                                  reason="this torch build has no 4-bit CPU kernel")


def group4(g=32, symmetric=True):
    return QuantConfig(bits=4, granularity="group", group_size=g, symmetric=symmetric)


def close(out, ref):
    return (out - ref).abs().max().item() <= TOL * ref.abs().max().item()


def test_nibbles_are_the_course_bit_stream_and_dequantize_to_its_values():
    w = torch.randn(24, 64, generator=torch.Generator().manual_seed(0))
    for symmetric in (True, False):
        qt = quantize(w, group4(symmetric=symmetric))
        lin = Int4Linear.from_quantized(qt)
        assert torch.equal(lin.weight, qt.dequantize())  # bit for bit
        low_first = unpack_nibbles(torch.tensor([0x4F], dtype=torch.uint8)).tolist()
        assert low_first == [15, 4]  # low bits first
    # codes, float16 scales, zero points one a byte
    assert lin.nbytes() == 24 * 32 + 24 * 2 * 2 + 24 * 2


@needs_kernel
@pytest.mark.parametrize("shape", [(65, 128), (512, 128), (128, 512), (48, 256)])
@pytest.mark.parametrize("symmetric", [True, False])
@pytest.mark.parametrize("group", [32, 64])
def test_the_packed_kernel_equals_the_dequantized_product(shape, symmetric, group):
    g = torch.Generator().manual_seed(1)
    w = torch.randn(*shape, generator=g) * 0.05
    qt = quantize(w, group4(group, symmetric))
    lin = Int4Linear.from_quantized(qt)
    assert lin.packed is not None  # the kernel is used (65 rows: padded to 80)
    for rows in (1, 7):  # one row: the layer calls the kernel; more: the kernel called directly
        x = torch.randn(rows, shape[1], generator=g)
        out = lin(x) if rows <= KERNEL_MAX_ROWS else _Int4MatMul.apply(x, lin)
        assert close(out, x @ qt.dequantize().T)
    x = torch.randn(3, 5, shape[1], generator=g)  # many rows: dequantized, then multiplied
    assert close(lin(x), x @ qt.dequantize().T)


@needs_kernel
def test_backward_is_the_dequantized_products_and_other_dtypes_dequantize():
    qt = quantize(torch.randn(32, 64), group4())
    lin = Int4Linear.from_quantized(qt)
    x = torch.randn(5, 64, requires_grad=True)
    _Int4MatMul.apply(x, lin).square().sum().backward()
    x2 = x.detach().clone().requires_grad_(True)
    (x2 @ qt.dequantize().T).square().sum().backward()
    assert close(x.grad, x2.grad)
    # not the kernel's: dequantized, then multiplied
    assert lin(x.detach().double()).dtype == torch.float64


def test_bad_settings_are_one_line():
    with pytest.raises(ValueError, match="group_size 32 must divide the 48 inputs"):
        Int4Linear(48, 16, 32)
    with pytest.raises(ValueError, match="Int4Linear holds 4-bit weights per group, not int3"):
        Int4Linear.from_quantized(quantize(torch.randn(4, 32),
                                           QuantConfig(bits=3, granularity="group", group_size=32)))
    with pytest.raises(ValueError, match=r"group_size must be one of \(32, 64, 128, 256\)"):
        QuantizedGPTConfig(n_embd=128, group_size=16)
    with pytest.raises(ValueError, match="group_size 64 must divide every matrix's row"):
        QuantizedGPTConfig(n_embd=96, n_head=3, group_size=64)
    with pytest.raises(ValueError, match="dense GPTs"):
        QATGPTConfig(moe_experts=4)
    for make in (QuantizedGPTConfig, QATGPTConfig):
        with pytest.raises(ValueError, match="embeddings"):
            make(n_embd=128, embeddings="int4")
    with pytest.raises(ValueError, match="loads an int8 per-row QuantizedTensor"):
        WideEmbedding(10, 32).load(torch.randn(10, 32), quantize(torch.randn(10, 32), group4()))
    assert KERNEL_GROUP_SIZES == (32, 64, 128, 256)


@pytest.fixture(scope="module")
def gpts():
    torch.manual_seed(0)
    untied = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=2,
                           n_head=2, n_embd=64, tie_weights=False)).eval()
    tied = GPT(GPTConfig(vocab_size=20, block_size=16, n_layer=1, n_head=2, n_embd=32,
                         bias=True)).eval()
    return untied, tied


@pytest.mark.parametrize("which", [0, 1])
@pytest.mark.parametrize("symmetric,embeddings", [(True, "int8"), (False, "int8"), (True, "fp16"),
                                                  (False, "same"), (True, "same")])
def test_the_int4_model_computes_what_the_dequantized_model_computes(gpts, which, symmetric,
                                                                     embeddings, tmp_path):
    model = gpts[which]
    reference, stored = quantize_rtn(model, group4(symmetric=symmetric), embeddings)
    qmodel = QuantizedGPT.from_quantized(model, stored, 32, symmetric, embeddings).eval()
    x = torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ref, out = reference(x)[0], qmodel(x)[0]
    assert close(out, ref)
    loaded, ckpt = load_model(save_checkpoint(tmp_path / "q.pt", qmodel))
    assert ckpt["model_kind"] == "gpt-int4" and loaded.config.embeddings == embeddings
    with torch.no_grad():
        assert torch.equal(loaded(x)[0], out)  # the kernel's layout is rebuilt on load
    if model.config.tie_weights:  # one matrix, stored once
        assert qmodel.wte.codes is qmodel.lm_head.codes and loaded.wte.codes is loaded.lm_head.codes
    matrices = {id(m.codes): m.nbytes() for m in qmodel.modules()
                if isinstance(m, (Int4Linear, Int4Embedding, WideEmbedding))}
    floats = sum(p.numel() * 4 for p in qmodel.parameters())  # the norms' gains and biases, float32
    assert qmodel.stored_bytes() == sum(matrices.values()) + floats  # a tied matrix once
    # the tables' bytes as the library counts them are the ones the checkpoint writes
    if embeddings != "same":
        tables = {name: stored[name].nbytes() if name in stored
                  else model.get_submodule(name).weight.numel() * 2
                  for name in ("wte", "wpe")}
        assert all(qmodel.get_submodule(name).nbytes() == n for name, n in tables.items())


@pytest.mark.parametrize("embeddings", ["int8", "same"])
def test_the_qat_model_computes_the_rounded_model_and_gives_its_float_weights_back(gpts,
                                                                                   embeddings):
    for model in gpts:
        qat = QATGPT.from_gpt(model, bits=3, group_size=16, embeddings=embeddings)
        rounded, _ = quantize_rtn(model, QuantConfig(bits=3, granularity="group", group_size=16),
                                  embeddings)
        x = torch.randint(0, 20, (2, 16))
        with torch.no_grad():
            # the tied head too reads rounded weights
            assert torch.equal(qat.eval()(x)[0], rounded(x)[0])
        back = qat.float_gpt()
        assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(),
                                                     model.state_dict().values()))


def test_the_embedding_dequantizes_only_the_rows_it_reads():
    qt = quantize(torch.randn(10, 32), group4())
    emb = Int4Embedding(10, 32)
    emb.load_quantized(qt)
    idx = torch.tensor([[3, 3, 9]])
    assert torch.equal(emb(idx), qt.dequantize()[idx])
    assert torch.equal(dequantize_int4(emb.codes, emb.scales, None), qt.dequantize())
