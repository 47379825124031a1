"""Chapter 21's head scores equal TransformerLens's (the reference of ARENA's induction-head
exercises) on the same weights: our AttnOnlyTransformer's weights loaded into a
``HookedTransformer`` (TransformerLens 3.x; 4.0 removed the class), the same attention patterns
and logits, and TransformerLens's own head-detector patterns and score applied to its patterns
equal to course_lib.induction.scores applied to ours, to 1e-6."""
import pytest
import torch

from course_lib.induction.model import AttnOnlyConfig, AttnOnlyTransformer
from course_lib.induction.scores import all_scores, attention_patterns, stripe_scores
from course_lib.induction.task import RepeatTask, repeat_rows

transformer_lens = pytest.importorskip("transformer_lens",
                                       reason="pip install 'transformer_lens>=3.9,<4'")
from transformer_lens import HookedTransformer, HookedTransformerConfig  # noqa: E402
from transformer_lens import head_detector  # noqa: E402


def to_hooked_transformer(model: AttnOnlyTransformer) -> HookedTransformer:
    """The same network as a HookedTransformer: TransformerLens keeps per-head W_Q, W_K, W_V as
    (nh, C, hs) and W_O as (nh, hs, C), for row vectors; our c_attn holds q, k, v as rows of one
    (3C, C) matrix."""
    c = model.config
    C, nh, hs = c.n_embd, c.n_head, c.head_size
    cfg = HookedTransformerConfig(n_layers=c.n_layer, d_model=C, n_ctx=c.block_size, d_head=hs,
                                  n_heads=nh, d_vocab=c.vocab_size, attn_only=True, act_fn="relu",
                                  normalization_type="LN" if c.layer_norm else None,
                                  positional_embedding_type="standard", default_prepend_bos=False,
                                  device="cpu", seed=0)
    tl = HookedTransformer(cfg)
    state = {"embed.W_E": model.tok_emb.weight, "pos_embed.W_pos": model.pos_emb.weight,
             "unembed.W_U": model.unembed.weight.T, "unembed.b_U": torch.zeros(c.vocab_size)}
    for i, attn in enumerate(model.attn):
        W, b = attn.c_attn.weight, attn.c_attn.bias
        for j, name in enumerate("QKV"):
            state[f"blocks.{i}.attn.W_{name}"] = W[j * C:(j + 1) * C].T.reshape(C, nh,
                                                                                hs).permute(1, 0, 2)
            state[f"blocks.{i}.attn.b_{name}"] = b[j * C:(j + 1) * C].reshape(nh, hs)
        state[f"blocks.{i}.attn.W_O"] = attn.c_proj.weight.T.reshape(nh, hs, C)
        state[f"blocks.{i}.attn.b_O"] = attn.c_proj.bias
        if c.layer_norm:
            state[f"blocks.{i}.ln1.w"], state[f"blocks.{i}.ln1.b"] = (
                model.ln[i].weight,
                model.ln[i].bias,
            )
    if c.layer_norm:
        state["ln_final.w"], state["ln_final.b"] = model.ln_final.weight, model.ln_final.bias
    missing = set(tl.state_dict()) - set(state)
    assert all(k.endswith(("IGNORE", "mask")) for k in missing), sorted(missing)
    tl.load_state_dict({k: v.detach() for k, v in state.items()}, strict=False)
    return tl.eval()


def trained_a_little(layer_norm: bool) -> AttnOnlyTransformer:
    """Random weights with every parameter moved off its initial value (biases included), so
    that no part of the mapping is checked against zeros only."""
    torch.manual_seed(21)
    model = AttnOnlyTransformer(AttnOnlyConfig(vocab_size=32, block_size=48, layer_norm=layer_norm))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


@pytest.mark.parametrize("layer_norm", [True, False])
def test_patterns_logits_and_head_scores_equal_transformer_lens(layer_norm):
    model = trained_a_little(layer_norm)
    tl = to_hooked_transformer(model)
    task = RepeatTask(vocab_size=32, seq_len=48)
    rows, _ = repeat_rows(task, 6, torch.Generator().manual_seed(0))
    ours = attention_patterns(model, rows)  # (B, L, nh, T, T)
    with torch.no_grad():
        tl_logits, cache = tl.run_with_cache(rows)
        our_logits, _ = model(rows)
    assert (tl_logits - our_logits).abs().max() < 1e-6 * max(
        1.0, our_logits.abs().max().item()
    ) * 10, (tl_logits - our_logits).abs().max()
    theirs = torch.stack([cache["pattern", layer] for layer in range(2)], dim=1)  # (B, L, nh, T, T)
    assert (ours - theirs).abs().max() < 1e-6

    scores = all_scores(ours, rows)
    detectors = {"previous_token": head_detector.get_previous_token_head_detection_pattern,
                 "duplicate_token": head_detector.get_duplicate_token_head_detection_pattern,
                 "induction": head_detector.get_induction_head_detection_pattern}
    for name, detection_pattern in detectors.items():
        # detect_head's own loop, row by row: score each head of each row, then the mean over rows
        per_row = torch.tensor([[[head_detector.compute_head_attention_similarity_score(
            theirs[b, layer, head], detection_pattern(rows[b:b + 1]), exclude_bos=False,
            exclude_current_token=False, error_measure="mul") for head in range(4)]
                                 for layer in range(2)]
            for b in range(len(rows))])
        assert (scores[name] - per_row.mean(0)).abs().max() < 1e-6, name
        assert scores[name].max() > 0.01  # a non-trivial comparison


def test_stripe_scores_equal_arenas_formula_on_transformer_lens_patterns():
    """ARENA's induction_score_hook: the diagonal at offset 1 - n of every row's pattern,
    averaged over rows and positions, on a segment of n tokens repeated (no BOS here)."""
    model = trained_a_little(True)
    tl = to_hooked_transformer(model)
    n = 24
    rows, _ = repeat_rows(RepeatTask(vocab_size=32, seq_len=48, min_repeat=n, max_repeat=n), 5,
                          torch.Generator().manual_seed(1))
    with torch.no_grad():
        _, cache = tl.run_with_cache(rows)
    ours = attention_patterns(model, rows)
    for layer in range(2):
        pattern = cache["pattern", layer]  # (B, nh, T, T)
        for offset in (-1, 1 - n, -n):
            arena = pattern.diagonal(offset=offset, dim1=-2, dim2=-1).mean(dim=(0, -1))  # (nh,)
            assert (stripe_scores(ours, offset)[layer] - arena).abs().max() < 1e-6
