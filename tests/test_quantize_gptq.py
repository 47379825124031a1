"""GPTQ (course_lib/quantize/gptq.py) against the exact optimal-brain-quantization update written
independently (a linear solve per column, float64), against torchao's published GPTQ where it is
installed, and the properties that make it worth doing."""
import inspect

import pytest
import torch

from course_lib.quantize.gptq import Hessian, damped, gptq_quantize, obq_reference, output_error
from course_lib.quantize.rtn import QuantConfig, quantize, unpack_bits


def problem(seed, out=12, n=24, samples=300, dtype=torch.float64):
    """A weight matrix and the Hessian of correlated inputs (real activations are correlated)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(out, n, generator=g, dtype=dtype)
    X = torch.randn(samples, n, generator=g, dtype=dtype)
    X = X @ torch.randn(n, n, generator=g, dtype=dtype)  # the draws in the same order
    h = Hessian(n)
    h.add(X)
    return w, h.matrix.to(dtype), X


def test_the_hessian_is_2_x_xt_over_n_whatever_the_batches():
    w, H, X = problem(0)
    h = Hessian(X.shape[1])
    h.add(X[:100].reshape(10, 10, -1))  # (B, T, in) batches are flattened
    h.add(X[100:])
    torch.testing.assert_close(h.matrix, 2 * X.T @ X / len(X), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("bits, granularity, symmetric",
                         [(3, "row", True), (4, "row", False),
                          (2, "tensor", True), (3, "tensor", False)])
@pytest.mark.parametrize("block_size", [1, 5, 128])
def test_gptq_equals_the_exact_obq_update(seed, bits, granularity, symmetric, block_size):
    """The Cholesky rows and the lazy blocks compute exactly the column-by-column optimum: the
    same codes (so the same dequantized matrix) as re-solving the quadratic after every column."""
    w, H, _ = problem(seed)
    config = QuantConfig(bits=bits, granularity=granularity, symmetric=symmetric)
    ours = gptq_quantize(w, H, config, block_size=block_size, dtype=torch.float64).dequantize()
    assert torch.equal(ours.double(), obq_reference(w, H, config).float().double())


@pytest.mark.parametrize("block_size", [4, 8, 24])
def test_with_groups_the_result_does_not_depend_on_the_block_size(block_size):
    w, H, _ = problem(3)
    config = QuantConfig(bits=3, granularity="group", group_size=4)
    ref = gptq_quantize(w, H, config, block_size=4, dtype=torch.float64)
    other = gptq_quantize(w, H, config, block_size=block_size, dtype=torch.float64)
    assert torch.equal(ref.codes, other.codes) and torch.equal(ref.scales, other.scales)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("config", [QuantConfig(bits=3),
                                    QuantConfig(bits=4, granularity="group", group_size=8)])
def test_gptq_beats_round_to_nearest_on_the_output_error(seed, config):
    w, H, _ = problem(seed)
    gptq = gptq_quantize(w, H, config, block_size=8).dequantize()
    rtn = quantize(w, config).dequantize()
    assert output_error(w, gptq, H) < 0.8 * output_error(w, rtn, H)


def test_dead_inputs_are_zeroed_and_damping_keeps_h_invertible():
    w, H, _ = problem(4)
    H[5, :], H[:, 5] = 0, 0  # an input that is always 0
    Hd, wd = damped(H, w, 0.01)
    assert (wd[:, 5] == 0).all() and torch.linalg.eigvalsh(Hd).min() > 0
    q = gptq_quantize(w, H, QuantConfig(bits=4)).dequantize()
    assert (q[:, 5] == 0).all() and torch.isfinite(q).all()


@pytest.mark.parametrize("call, phrase", [
    (lambda w, H: gptq_quantize(w, H[:3, :3], QuantConfig()), "H must be"),
    (lambda w, H: gptq_quantize(w, H, QuantConfig(granularity="group", group_size=8),
                                block_size=12),
     "multiple of group_size"),
    (lambda w, H: gptq_quantize(w, H, QuantConfig(), damp=-1), "damp must be"),
    (lambda w, H: obq_reference(w, H, QuantConfig(granularity="group", group_size=8)),
     "granularity"),
    (lambda w, H: Hessian(4).matrix, "no calibration inputs"),
])
def test_bad_input_is_refused_in_one_line(call, phrase):
    w, H, _ = problem(0)
    with pytest.raises(ValueError, match=phrase):
        call(w, H)


def torchao_gptq():
    """torchao's published GPTQ (torchao.prototype.gptq.api.gptq_quantize), run on the CPU: its
    source with the two CUDA-only lines (an assert, a synchronize) removed, nothing else."""
    api = pytest.importorskip("torchao.prototype.gptq.api")
    source = inspect.getsource(api.gptq_quantize)
    guard = 'assert device.type == "cuda", "GPTQ only supports CUDA currently"'
    assert guard in source and "torch.cuda.synchronize()" in source, (
        "torchao's GPTQ changed: read it again")
    namespace = dict(vars(api))
    exec(source.replace(guard, "").replace("torch.cuda.synchronize()", ""), namespace)
    return api, namespace["gptq_quantize"]


@pytest.mark.slow  # importing torchao takes 10-30 s on the reference host
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gptq_agrees_with_torchao_on_int8_per_row(seed):
    """torchao's GPTQ on the CPU takes int8 per row only (its int4 path needs the mslk kernels):
    symmetric codes in [-128, 127] with scale absmax / 127.5, which we pass as our grid. Both in
    float32, the codes agree except where a weight lands within float32 rounding of a half-way
    point: the two programs order their float32 operations differently, a flipped code then
    moves the rest of its row, so a few rows may differ. The tolerance is measured, not guessed:
    our own float32 and float64 runs differ as much (at most 2 rows of 48 here); the output
    errors agree within 1%."""
    api, their_gptq = torchao_gptq()
    from torchao.quantization import Int8WeightOnlyConfig
    from torchao.quantization.granularity import PerRow

    w, H, _ = problem(seed, out=48, n=64, samples=400, dtype=torch.float32)
    config = api.GPTQConfig(step="convert", base_config=Int8WeightOnlyConfig(granularity=PerRow()),
                            gptq_quantize_block_size=16)
    theirs = their_gptq(H.clone(), w.clone(), config)
    ours = gptq_quantize(w, H, QuantConfig(bits=8), block_size=16,
                         grid=(theirs.scale, torch.zeros_like(theirs.scale)))
    codes = unpack_bits(ours.codes, 8, w.numel()).view(48, 64) - 128
    rows_differing = (codes != theirs.qdata.long()).any(1).sum().item()
    assert rows_differing <= 2
    ours_w = codes.float() * theirs.scale.float()
    theirs_w = theirs.qdata.float() * theirs.scale.float()
    assert output_error(w, ours_w, H) == pytest.approx(output_error(w, theirs_w, H), rel=0.01)
