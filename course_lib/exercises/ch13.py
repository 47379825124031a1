"""Checks for chapter 13, The real GPT-2: ``from course_lib.exercises import ch13``.

No check needs ``transformers`` or the network: the first builds a state dict with GPT-2's
names and Conv1D layout from random numbers, the second compares with chapter 6's formula, the
third compares a layer with ``x @ weight + bias``, Conv1D's own computation.
"""
from __future__ import annotations

import torch
from torch import nn

from ..gpt2 import GPT2_SIZES, weight_map
from ..model import Block, GPTConfig
from ..sizing import count_parameters
from . import _NAN_HINT, as_integer, call, call_with_hints, describe, fail, passed


def _fake_gpt2_state(n_layer: int, C: int, V: int = 50, T: int = 16,
                     seed: int = 13) -> dict[str, torch.Tensor]:
    """Random tensors under Hugging Face's GPT-2 names, in its layout (Conv1D matrices (in,
    out))."""
    g = torch.Generator().manual_seed(seed)
    shapes = {"ln_1.weight": (C,), "ln_1.bias": (C,), "attn.c_attn.weight": (C, 3 * C),
              "attn.c_attn.bias": (3 * C,), "attn.c_proj.weight": (C, C), "attn.c_proj.bias": (C,),
              "ln_2.weight": (C,), "ln_2.bias": (C,), "mlp.c_fc.weight": (C, 4 * C),
              "mlp.c_fc.bias": (4 * C,), "mlp.c_proj.weight": (4 * C, C), "mlp.c_proj.bias": (C,)}
    state = {"transformer.wte.weight": torch.randn(V, C, generator=g),
             "transformer.wpe.weight": torch.randn(T, C, generator=g)}
    for i in range(n_layer):
        for name, shape in shapes.items():
            state[f"transformer.h.{i}.{name}"] = torch.randn(*shape, generator=g)
    state["transformer.ln_f.weight"] = torch.randn(C, generator=g)
    state["transformer.ln_f.bias"] = torch.randn(C, generator=g)
    state["lm_head.weight"] = state["transformer.wte.weight"]
    return state


def _expected_block(state: dict, i: int, n_layer: int) -> dict[str, torch.Tensor]:
    prefix = f"blocks.{i}."
    return {ours[len(prefix):]: (state[hf].t() if t else state[hf])
            for ours, hf, t in weight_map(n_layer) if ours.startswith(prefix)}


def _rounded_copy(have: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether ``have`` is ``want`` (or its transpose) in another floating dtype, rounded."""
    if have.dtype == want.dtype or not have.is_floating_point():
        return False
    return any(h.shape == want.shape
               and torch.allclose(h.to(want.dtype), want, rtol=1e-2, atol=1e-2)
               for h in ([have, have.t()] if have.dim() == 2 else [have]))


def check_map_block(fn) -> None:
    """``fn(hf_state, i) -> dict``: the weights of block ``i`` of a GPT-2 state dict (Hugging Face
    names such as ``transformer.h.{i}.attn.c_attn.weight``, Conv1D matrices stored (in, out)),
    under our :class:`~course_lib.model.Block`'s names (``ln_1.weight``, ``attn.c_attn.weight``,
    ...) in ``nn.Linear``'s (out, in) layout, ready for ``block.load_state_dict``."""
    # 12 layers, as GPT-2 small: then "transformer.h.1" is also the start of "transformer.h.10." and
    # "transformer.h.11.", which a prefix without its trailing dot would take for block 1
    n_layer, C = 12, 16
    state = _fake_gpt2_state(n_layer, C)
    config = GPTConfig(vocab_size=50, block_size=16, n_layer=n_layer, n_head=2, n_embd=C, bias=True,
                       activation="gelu_tanh")
    for i in (0, 1, 2, 10, 11):
        got = call(fn, dict(state), i)
        expected = _expected_block(state, i, n_layer)
        what = f"map_block(state, {i})"
        if not isinstance(got, dict):
            fail(f"{what}: expected a dict of tensors, got {describe(got)}.",
                 "return {our_name: tensor, ...}")
        prefixed = [k for k in got if k.startswith(("blocks.", "transformer."))]
        if prefixed:
            fail(f"{what}: keys such as {prefixed[0]!r} carry a prefix; Block's own names have "
                 "none.",
                 "use the names of Block().state_dict(): 'ln_1.weight', 'attn.c_attn.weight', ...")
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        longer = sorted({k.split(".")[2] for k in state
                         if k.startswith(f"transformer.h.{i}")
                         and not k.startswith(f"transformer.h.{i}.")})
        if extra and longer:
            fail(f"{what}: unexpected keys {extra[:3]}{' ...' if len(extra) > 3 else ''}: they "
                 f"come from blocks {', '.join(longer)}.",
                 f"the prefix 'transformer.h.{i}' also matches 'transformer.h.{longer[0]}.': end "
                 f"it with the dot, f'transformer.h.{{i}}.', so that it matches block {i} only "
                 "(GPT-2 small has 12 blocks).")
        if missing or extra:
            fail(
                f"{what}: {'missing ' + str(missing) if missing else ''}"
                f"{' and ' if missing and extra else ''}"
                f"{'unexpected ' + str(extra) if extra else ''}.",
                "a block has 12 tensors: ln_1, attn.c_attn, attn.c_proj, ln_2, mlp.c_fc, "
                "mlp.c_proj (a weight and a bias each).",
            )
        for name, want in expected.items():
            have = got[name]
            if not isinstance(have, torch.Tensor):
                fail(f"{what}[{name!r}]: expected a tensor, got {describe(have)}.",
                     "copy the tensor of the Hugging Face state dict (transposed for the Conv1D "
                     "matrices).")
            other = next((j for j in range(n_layer) if j != i and have.shape == want.shape
                          and torch.equal(have, _expected_block(state, j, n_layer)[name])), None)
            if other is not None:
                fail(f"{what}[{name!r}] holds the weights of block {other}.",
                     f"read transformer.h.{{i}}.{name} with the block index i you were given.")
            if have.shape != want.shape:
                hint = ("GPT-2's Conv1D stores this matrix (in, out); nn.Linear wants (out, in): "
                        "transpose it (.t())."
                        if have.dim() == 2 and have.shape == want.t().shape else
                        "biases and LayerNorm parameters are 1-D vectors: copy them as they are.")
                fail(f"{what}[{name!r}]: shape {tuple(have.shape)}, our Block expects "
                     f"{tuple(want.shape)}.", hint)
            if not torch.equal(have, want) and _rounded_copy(have, want):
                fail(f"{what}[{name!r}]: your tensor is {have.dtype}, and its values are GPT-2's "
                     f"rounded: GPT-2's tensors are {want.dtype}.",
                     "copy the tensors as they are (transposing the four Conv1D matrices), without "
                     ".to(...), .half() or .bfloat16(): load_state_dict would cast them back to "
                     "float32, but the rounding is done.")
            if not torch.equal(have, want):
                hint = ("this square matrix has the right shape either way, but GPT-2 stores it "
                        "(in, out): transpose it too." if have.dim() == 2
                        and torch.equal(have, want.t()) else
                        f"copy transformer.h.{i}.{name} (transposed if it is one of the four "
                        "Conv1D matrices).")
                fail(f"{what}[{name!r}]: the values are not those of GPT-2's tensor.", hint)
        Block(config).load_state_dict(got)  # loads strictly
    passed("your mapping loads GPT-2's block weights into our Block, transposing the four Conv1D "
           "matrices.")


def check_gpt2_parameters(fn) -> None:
    """``fn(n_layer, n_embd, vocab_size, block_size) -> int``: the parameters of a GPT-2 of that
    shape (biases everywhere, LM head tied to the token embedding), equal to
    ``course_lib.sizing.count_parameters`` for all four published sizes, GPT-2 medium first."""
    cases = [(name, *GPT2_SIZES[name]) for name in ("gpt2-medium", "gpt2", "gpt2-large", "gpt2-xl")]
    cases += [("a tiny GPT-2", 2, 2, 16), ("a one-layer GPT-2", 1, 4, 64)]
    for name, L, H, C in cases:
        V, T = (50257, 1024) if name.startswith("gpt2") else (97, 32)
        config = GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=H, n_embd=C, bias=True)
        expected = count_parameters(config)
        what = f"gpt2_parameters({L}, {C}, {V}, {T}) for {name}"
        # Exact: a count is a whole number (the old int() let the exact count + 0.7 through).
        got = as_integer(call(fn, L, C, V, T), what, "return the count as a Python int.")
        if got == expected:
            continue
        diff = got - expected
        # The per-block vectors: the Linear layers' biases are c_attn 3C + attn.c_proj C + mlp.c_fc
        # 4C
        # + mlp.c_proj C = 9C; ln_1 and ln_2 have C gains and C biases each = 4C. ln_f has 2C.
        known = {V * C: "you counted the LM head as well: in GPT-2 it is tied to the token "
                        "embedding (one shared V x C matrix).",
                 -T * C: "the position embedding (T x C) is missing.",
                 -(9 * L * C): "the biases of the Linear layers are missing: c_attn 3C, "
                               "attn.c_proj C, mlp.c_fc 4C and mlp.c_proj C, so 9C per block "
                               "(GPT-2 has bias=True everywhere).",
                 -(11 * L * C + C): "every bias is missing: 9C per block in the Linear layers, 2C "
                                    "per block in the two LayerNorms, and C in the final one.",
                 -(13 * L * C): "the vectors of every block are missing: 9C of Linear biases and "
                                "4C of LayerNorm gains and biases per block.",
                 -(13 * L * C + 2 * C): "the Linear layers' biases (9C per block) and every "
                                        "LayerNorm (4C per block, 2C for the final one) are "
                                        "missing.",
                 -(4 * L * C + 2 * C): "the LayerNorms are missing: two per block and a final one, "
                                       "each a gain and a bias.",
                 -2 * C: "the final LayerNorm (ln_f: C gains and C biases) is missing.",
                 -(4 * L * C): "the LayerNorms of the blocks (2 per block, gain and bias: 4C) are "
                               "missing."}
        fail(f"{what}: got {got:,}, expected {expected:,} (off by {diff:+,}).",
             known.get(diff, "per block: 12C² weights + 13C biases (9C in the linear layers, 4C in "
                             "two LayerNorms); then V·C + T·C embeddings and 2C for the final "
                             "LayerNorm."))
    medium = count_parameters(GPTConfig(vocab_size=50257, block_size=1024, n_layer=24, n_head=16,
                                        n_embd=1024, bias=True))
    passed(f"GPT-2 medium has {medium:,} parameters (the published '355M'), and your formula is "
           "exact for all four sizes.")


def check_conv1d_to_linear(fn) -> None:
    """``fn(weight, bias) -> nn.Linear``: given a GPT-2 ``Conv1D``'s weight, stored (n_in, n_out),
    and its bias (n_out,), an ``nn.Linear(n_in, n_out)`` that computes the same function
    ``x @ weight + bias``, without changing the tensors it was given. Shapes are tried square and
    not, since a square weight hides the classic mistake (no transpose) from every shape check."""
    g = torch.Generator().manual_seed(1313)
    for n_in, n_out in ((8, 8), (8, 24), (32, 8)):  # attn.c_proj, c_attn-like, mlp.c_proj-like
        weight = torch.randn(n_in, n_out, generator=g)  # Conv1D: (in, out)
        bias = torch.randn(n_out, generator=g)
        x = torch.randn(3, 5, n_in, generator=g)  # (B, T, n_in)
        expected = x @ weight + bias  # Conv1D's forward: (B, T, n_out)
        originals = weight.clone(), bias.clone()
        what = f"conv1d_to_linear(weight {tuple(weight.shape)}, bias {tuple(bias.shape)})"
        got = call_with_hints(fn, {"size mismatch": _TRANSPOSE_HINT,
                                   "must match the size": _TRANSPOSE_HINT,
                                   "shape": _TRANSPOSE_HINT}, weight, bias, context=f"{what}: ")
        if not isinstance(got, nn.Linear):
            fail(f"{what}: expected an nn.Linear, got {type(got).__name__}.",
                 "build nn.Linear(n_in, n_out) and copy the weight (transposed) and the bias into "
                 "it.")
        if not (torch.equal(weight, originals[0]) and torch.equal(bias, originals[1])):
            fail(f"{what} changed the tensors it was given.",
                 "copy into the new layer (with torch.no_grad(): linear.weight.copy_(weight.t())); "
                 "do not modify GPT-2's tensors in place.")
        if (got.in_features, got.out_features) != (n_in, n_out):
            fail(f"{what}: your layer is nn.Linear({got.in_features}, {got.out_features}), "
                 f"the Conv1D maps {n_in} inputs to {n_out} outputs.",
                 "nn.Linear(in_features, out_features): a Conv1D weight (n_in, n_out) gives "
                 "nn.Linear(n_in, n_out).")
        if got.bias is None:
            fail(f"{what}: your layer has no bias; GPT-2's Conv1D adds one.",
                 "create the layer with bias=True (the default) and copy the Conv1D's bias into "
                 "it.")
        if got.weight.shape != (n_out, n_in):
            fail(f"{what}: weight of shape {tuple(got.weight.shape)}, nn.Linear({n_in}, {n_out}) "
                 f"stores ({n_out}, {n_in}).", _TRANSPOSE_HINT)
        if got.weight.dtype != weight.dtype or got.bias.dtype != bias.dtype:
            fail(f"{what}: your layer's parameters are {got.weight.dtype}; GPT-2's tensors (and "
                 f"the inputs the model will give the layer) are {weight.dtype}.",
                 "create nn.Linear(n_in, n_out) without a dtype= argument and without .double() or "
                 ".half(): a layer of another dtype fails on float32 inputs.")
        shared = [name for name, ours,
                  theirs in (("weight", got.weight, weight), ("bias", got.bias, bias))
                  if ours.untyped_storage().data_ptr() == theirs.untyped_storage().data_ptr()]
        if shared:
            fail(f"{what}: your layer's {' and '.join(shared)} share memory with GPT-2's tensors: "
                 "training the layer, or any in-place change to it, would change GPT-2's weights "
                 "too.",
                 "nn.Parameter(weight.t()) wraps a view of the same memory: copy instead, "
                 "nn.Parameter(weight.t().clone()), or linear.weight.copy_(weight.t()) inside "
                 "torch.no_grad().")
        with torch.no_grad():
            out = got(x)
        if torch.allclose(out, expected, atol=1e-5, rtol=1e-5):
            continue
        if torch.isnan(out).any():
            fail(f"{what}: your layer outputs NaN.", _NAN_HINT)
        if torch.equal(got.weight.detach(), weight):
            fail(f"{what}: the weight was copied without transposing it.", _TRANSPOSE_HINT)
        if torch.allclose(out - got.bias.detach(), expected - bias, atol=1e-5, rtol=1e-5):
            fail(f"{what}: the weight is right but the bias is not the Conv1D's.",
                 "copy the Conv1D's bias as it is (a vector of n_out numbers needs no transpose).")
        fail(f"{what}: your layer computes another function than x @ weight + bias.",
             _TRANSPOSE_HINT)
    passed("your nn.Linear computes exactly what GPT-2's Conv1D computes, square weights included.")


_TRANSPOSE_HINT = ("Conv1D stores its weight (n_in, n_out) and computes x @ W + b; nn.Linear "
                   "stores (n_out, n_in) and computes x @ W.T + b: copy weight.t(). A square "
                   "weight (attn.c_proj) has the right shape either way, so only the values show "
                   "the missing transpose.")


__all__ = ["check_map_block", "check_gpt2_parameters", "check_conv1d_to_linear"]
