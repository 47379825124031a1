"""Chapter 22, drafter 3: self-speculative decoding with the model's own MTP heads is exact."""

import itertools

import pytest
import torch
from scipy import stats

from course_lib.generate import generate
from course_lib.model import GPT, GPTConfig
from course_lib.speculative.self_draft import SelfDrafter, self_speculative_generate


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def _mtp(vocab=5, block=16, heads=3, seed=0):
    torch.manual_seed(seed)
    return GPT(
        GPTConfig(
            vocab_size=vocab, block_size=block, n_layer=2, n_head=2, n_embd=16, mtp_heads=heads
        )
    ).eval()


@pytest.mark.parametrize("k", [1, 2, 3])
def test_greedy_equals_plain_greedy(k):
    model = _mtp()
    for prompt in ([0], [1, 2, 3], [4, 4, 0, 1, 2]):
        idx = torch.tensor([prompt])
        want = generate(model, idx, 16 - len(prompt), temperature=0, use_cache=True)
        got, st = self_speculative_generate(model, idx, 16 - len(prompt), k=k, return_stats=True)
        assert torch.equal(got, want)
        assert st.new_tokens == 16 - len(prompt) and st.target_calls == 1 + len(st.kept) + (
            st.new_tokens - 1 - sum(st.kept) - len(st.kept) > 0
        )
        assert all(0 <= kept <= n <= k for kept, n in zip(st.kept, st.drafted))


def test_drafts_that_are_always_right_are_always_kept():
    """ln_f's gains at 0 make every hidden state 0, so every logit of every head is 0 and greedy
    always picks token 0: each draft is right, each round keeps all k and adds one token."""
    model = _mtp(heads=2)
    with torch.no_grad():
        model.ln_f.weight.zero_()
    out, st = self_speculative_generate(model, torch.tensor([[1]]), 12, k=2, return_stats=True)
    assert out[0, 1:].tolist() == [0] * 12
    assert (
        st.kept == st.drafted and st.target_calls == 5
    )  # the prompt's call, then 11 tokens in rounds of 3, 3, 3, 2


def test_sampled_output_is_the_models_distribution_chi_square():
    """The first 3 new tokens after a 2-token prompt, against the model's exact distribution."""
    model = _mtp(vocab=3, block=8, heads=2, seed=5)
    prompt = [1, 2]
    seqs = [list(s) for s in itertools.product(range(3), repeat=3)]
    with torch.no_grad():
        exact = []
        for s in seqs:
            prob = 1.0
            for j in range(3):
                prob *= float(
                    torch.softmax(model(torch.tensor([prompt + s[:j]]))[0][0, -1], -1)[s[j]]
                )
            exact.append(prob)
    n, g = 3000, torch.Generator().manual_seed(0)
    counts = {tuple(s): 0 for s in seqs}
    for _ in range(n):
        out = self_speculative_generate(
            model, torch.tensor([prompt]), 3, k=2, temperature=1.0, generator=g
        )
        counts[tuple(out[0, 2:].tolist())] += 1
    obs = [counts[tuple(s)] for s in seqs]
    exp = [e * n / sum(exact) for e in exact]
    assert stats.chisquare(obs, exp).pvalue > 0.01


def test_a_wrong_rule_would_be_caught():
    """The check above can fail: accepting every draft (no min(1, p/q)) skews the distribution."""
    import course_lib.speculative.self_draft as sd

    model = _mtp(vocab=3, block=8, heads=2, seed=5)
    with torch.no_grad():
        model.mtp.heads[0].proj.weight.mul_(
            300
        )  # a head far from the model: its drafts are often wrong
    real = sd.speculative_round
    try:
        sd.speculative_round = lambda p, q, draft, g: (
            list(draft) + [int(torch.multinomial(p[len(draft)], 1, generator=g))],
            len(draft),
        )
        g, counts = torch.Generator().manual_seed(0), torch.zeros(3)
        for _ in range(3000):
            counts[
                sd.self_speculative_generate(
                    model, torch.tensor([[1, 2]]), 3, k=1, temperature=1.0, generator=g
                )[0, 3]
            ] += 1  # the drafted position
    finally:
        sd.speculative_round = real
    with torch.no_grad():
        first = torch.softmax(model(torch.tensor([[1, 2]]))[0][0, -1], -1)
        exact = sum(
            first[a] * torch.softmax(model(torch.tensor([[1, 2, a]]))[0][0, -1], -1)
            for a in range(3)
        )
    assert stats.chisquare(counts.numpy(), (exact * 3000).numpy()).pvalue < 0.01


def test_refusals():
    model = _mtp(heads=2)
    with pytest.raises(ValueError, match=r"k must be an integer in \[1, 2\]"):
        self_speculative_generate(model, torch.tensor([[1]]), 4, k=3)
    with pytest.raises(ValueError, match="exceed block_size"):
        self_speculative_generate(model, torch.tensor([[1, 2]]), 15)
    torch.manual_seed(0)
    plain = GPT(GPTConfig(vocab_size=5, block_size=8, n_layer=1, n_head=2, n_embd=8))
    with pytest.raises(ValueError, match="--set mtp_heads=3"):
        SelfDrafter(plain)
    assert self_speculative_generate(model, torch.tensor([[1]]), 0).tolist() == [[1]]
