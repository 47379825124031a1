"""The checks of chapter 13's exercises: right answers pass, plausible wrong ones fail with a
hint."""
import pytest
import torch

from course_lib.exercises import ExerciseError, ch13

CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
NAMES = ("ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
         "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
         "mlp.c_proj.weight", "mlp.c_proj.bias")


def not_done(*args):
    raise NotImplementedError()


# --- mapping one block ---


def map_block(hf_state, i):
    out = {}
    for name in NAMES:
        w = hf_state[f"transformer.h.{i}.{name}"]
        out[name] = w.t() if name in CONV1D else w
    return out


def test_map_block_correct(capsys):
    ch13.check_map_block(map_block)
    assert "Correct!" in capsys.readouterr().out


def test_map_block_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch13.check_map_block(not_done)


def no_transpose(hf_state, i):
    return {name: hf_state[f"transformer.h.{i}.{name}"] for name in NAMES}


def transposes_only_non_square(hf_state, i):
    out = {}
    for name in NAMES:
        w = hf_state[f"transformer.h.{i}.{name}"]
        out[name] = w.t() if w.dim() == 2 and w.shape[0] != w.shape[1] else w
    return out


def always_block_zero(hf_state, i):
    return map_block(hf_state, 0)


def keeps_prefix(hf_state, i):
    return {f"blocks.{i}.{k}": v for k, v in map_block(hf_state, i).items()}


def forgets_biases(hf_state, i):
    return {k: v for k, v in map_block(hf_state, i).items() if not k.endswith("bias")}


@pytest.mark.parametrize("wrong, message", [
    (no_transpose, "Conv1D stores this matrix"),
    (transposes_only_non_square, "square matrix"),
    (always_block_zero, "weights of block 0"),
    (keeps_prefix, "prefix"),
    (forgets_biases, "missing"),
])
def test_map_block_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch13.check_map_block(wrong)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_map_block_in_lower_precision_gets_a_dtype_hint(dtype):
    # 13-n1 (review 2026-11-28): bf16 tensors got "the values are not those of GPT-2's tensor"
    def lower_precision(hf_state, i):
        return {k: v.to(dtype) for k, v in map_block(hf_state, i).items()}
    with pytest.raises(ExerciseError,
                       match=f"(?s)your tensor is {dtype}.*Hint: copy the tensors as they are"):
        ch13.check_map_block(lower_precision)


# --- counting GPT-2's parameters ---


def gpt2_parameters(n_layer, n_embd, vocab_size, block_size):
    C = n_embd
    return n_layer * (12 * C * C + 13 * C) + vocab_size * C + block_size * C + 2 * C


def test_count_correct(capsys):
    ch13.check_gpt2_parameters(gpt2_parameters)
    out = capsys.readouterr().out
    assert "Correct!" in out and "354,823,168" in out


def test_count_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch13.check_gpt2_parameters(not_done)


@pytest.mark.parametrize("wrong, message", [
    (lambda L, C, V, T: gpt2_parameters(L, C, V, T) + V * C, "tied"),
    (lambda L, C, V, T: gpt2_parameters(L, C, V, T) - T * C, "position embedding"),
    (lambda L, C, V, T: 12 * L * C * C + V * C + T * C, "biases"),
    (lambda L, C, V, T: gpt2_parameters(L, C, V, T) - 2 * C, "final LayerNorm"),
    (lambda L, C, V, T: 12 * L * C * C, "off by"),
    (lambda L, C, V, T: "355M", "expected an int"),
    # Issue 22: int() used to truncate, so the exact count + 0.7 passed.
    (lambda L, C, V, T: gpt2_parameters(L, C, V, T) + 0.7,
     "(?s)not a whole number.*Hint: a count is an integer"),
    # Issue 22: forgetting the Linear layers' biases (c_attn 3C + attn.c_proj C + c_fc 4C +
    # mlp.c_proj C = 9C per block) got only the generic hint.
    (lambda L, C, V, T: gpt2_parameters(L, C, V, T) - 9 * L * C,
     # the check's first case is GPT-2 medium, L = 24, C = 1024: short by 9 * 24 * 1024 = 221,184
     f"(?s)off by -{9 * 24 * 1024:,}\\).*Hint: the biases of the Linear layers are missing: .* 9C "
     "per block"),
])
def test_count_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch13.check_gpt2_parameters(wrong)


# --- a Conv1D as an nn.Linear ---


def conv1d_to_linear(weight, bias):
    # written differently from the chapter: assign new Parameters instead of copy_
    n_in, n_out = weight.shape
    linear = torch.nn.Linear(n_in, n_out)
    linear.weight = torch.nn.Parameter(weight.T.contiguous())
    linear.bias = torch.nn.Parameter(bias.clone())
    return linear


def test_conv1d_to_linear_correct(capsys):
    ch13.check_conv1d_to_linear(conv1d_to_linear)
    assert "Correct!" in capsys.readouterr().out


def test_conv1d_to_linear_not_done():
    with pytest.raises(ExerciseError, match="Not done yet"):
        ch13.check_conv1d_to_linear(not_done)


def copies_without_transpose(weight, bias):
    """The classic mistake: on the square weight it raises no error, on the others copy_ does."""
    linear = torch.nn.Linear(*weight.shape)
    with torch.no_grad():
        linear.weight.copy_(weight)
        linear.bias.copy_(bias)
    return linear


def swaps_the_features(weight, bias):
    """nn.Linear's arguments in the wrong order, weights assigned: right on the square case only."""
    n_in, n_out = weight.shape
    linear = torch.nn.Linear(n_out, n_in)
    linear.weight = torch.nn.Parameter(weight.t().clone())
    linear.bias = torch.nn.Parameter(bias.clone())
    return linear


def no_bias(weight, bias):
    linear = torch.nn.Linear(*weight.shape, bias=False)
    with torch.no_grad():
        linear.weight.copy_(weight.t())
    return linear


def keeps_the_default_bias(weight, bias):
    linear = torch.nn.Linear(*weight.shape)
    with torch.no_grad():
        linear.weight.copy_(weight.t())
    return linear


def transposes_in_place(weight, bias):
    return conv1d_to_linear(weight.t_().t(), bias)  # .t_() rewrites GPT-2's tensor


def returns_the_weight(weight, bias):
    return weight.t()


@pytest.mark.parametrize("wrong, message", [
    (copies_without_transpose, "without transposing"),
    (swaps_the_features, r"nn.Linear\(in_features, out_features\)"),
    (no_bias, "no bias"),
    (keeps_the_default_bias, "the bias is not the Conv1D's"),
    (transposes_in_place, "changed the tensors"),
    (returns_the_weight, "expected an nn.Linear"),
])
def test_conv1d_to_linear_wrong_answers_fail(wrong, message):
    with pytest.raises(ExerciseError, match=message):
        ch13.check_conv1d_to_linear(wrong)


def test_conv1d_to_linear_a_shape_error_from_copy_gets_the_transpose_hint():
    """On a non-square weight, copying without the transpose makes copy_ raise: the check turns that
    error into the transpose hint (the square case, tried first, is caught by its values)."""
    def square_right_others_untransposed(weight, bias):
        if weight.shape[0] == weight.shape[1]:
            return conv1d_to_linear(weight, bias)
        return copies_without_transpose(weight, bias)

    with pytest.raises(ExerciseError, match=r"RuntimeError(.|\n)*copy weight\.t\(\)"):
        ch13.check_conv1d_to_linear(square_right_others_untransposed)


# --- review of issue 32: holes and tracebacks closed ---


def map_block_prefix_without_dot(hf_state, i):
    prefix = f"transformer.h.{i}"  # no trailing dot: block 1 also takes blocks 10 and 11
    out = {}
    for k, w in hf_state.items():
        if k.startswith(prefix):
            name = k[len(prefix) + 1:]
            out[name] = w.t() if name in CONV1D else w
    return out


def test_map_block_prefix_without_the_dot_fails_at_gpt2_smalls_12_blocks():
    with pytest.raises(ExerciseError, match="they come from blocks 10, 11") as error:
        ch13.check_map_block(map_block_prefix_without_dot)
    assert "end it with the dot" in str(error.value)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_conv1d_to_linear_in_another_dtype_fails_with_a_dtype_hint(dtype):
    def linear_in_dtype(weight, bias):
        return conv1d_to_linear(weight, bias).to(dtype)
    with pytest.raises(ExerciseError, match=f"parameters are {dtype}") as error:
        ch13.check_conv1d_to_linear(linear_in_dtype)
    assert "without a dtype= argument" in str(error.value)


def test_conv1d_to_linear_sharing_gpt2s_storage_fails():
    def shares(weight, bias):
        n_in, n_out = weight.shape
        linear = torch.nn.Linear(n_in, n_out)
        linear.weight = torch.nn.Parameter(weight.t())  # a view of GPT-2's tensor
        linear.bias = torch.nn.Parameter(bias.clone())
        return linear
    with pytest.raises(ExerciseError, match="weight share memory") as error:
        ch13.check_conv1d_to_linear(shares)
    assert "weight.t().clone()" in str(error.value)


def test_conv1d_to_linear_full_of_nan_gets_the_nan_hint():
    def nan_layer(weight, bias):
        linear = conv1d_to_linear(weight, bias)
        with torch.no_grad():
            linear.weight.fill_(float("nan"))
        return linear
    with pytest.raises(ExerciseError, match="outputs NaN"):
        ch13.check_conv1d_to_linear(nan_layer)


def test_gpt2_parameters_infinite_gets_the_overflow_hint():
    with pytest.raises(ExerciseError, match="not a count") as error:
        ch13.check_gpt2_parameters(lambda L, C, V, T: float("inf"))
    assert "//" not in str(error.value)
