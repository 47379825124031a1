"""Chapter 22: speculative decoding is exact. Greedy: token for token the target's greedy text.
Sampled: the output distribution is the target's, proved by enumeration on a tiny vocabulary and
checked by chi-square tests; equal to transformers' assisted generation (greedy)."""
import itertools
import math

import pytest
import torch
from scipy import stats

from course_lib.generate import generate
from course_lib.model import GPT, GPTConfig
from course_lib.speculative.exact import exact_output_distribution
from course_lib.speculative import (ModelDrafter, NGramDrafter, acceptance_probability,
                                    alpha_from_rounds, expected_tokens_per_call, greedy_round,
                                    residual_distribution, speculative_generate, speculative_round)


pytestmark = pytest.mark.usefixtures("one_thread")  # conftest.py


def _tiny(vocab=5, block=8, layers=1, seed=0, n_embd=16):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=vocab, block_size=block,
                         n_layer=layers, n_head=2, n_embd=n_embd)).eval()


# --- greedy: the target's own greedy text, whatever the draft ---

PROMPTS = ["ROMEO:\n", "First Citizen:\n", "\n", "KING RICHARD III:\nNow is the", "To be, or not",
           "O", "JULIET:\nWhat", "Thou art"]


@pytest.fixture(scope="module")
def shipped():
    from course_lib.data import load_text, train_val_split
    from course_lib.pretrained import load_pretrained
    model, tok = load_pretrained()
    train, _ = train_val_split(torch.tensor(tok.encode(load_text())))
    return model, tok, train


@pytest.mark.parametrize("k", [1, 4])
def test_greedy_equals_plain_greedy_on_the_prompt_set(shipped, k):
    model, tok, train = shipped
    drafter = NGramDrafter(train, 65, n=3)
    for prompt in PROMPTS:
        idx = torch.tensor([tok.encode(prompt)])
        # 70 new tokens: past block_size 64, so the rewound cache and the cropped windows both run
        ref = generate(model, idx, 70, temperature=0, use_cache=True)
        out, st = speculative_generate(model, drafter, idx, 70, k=k, return_stats=True)
        assert torch.equal(out, ref), prompt
        assert st.new_tokens == 70 and st.target_calls < 70  # the draft saved target calls


def test_greedy_with_a_model_drafter_and_a_useless_drafter():
    target = _tiny(vocab=11, block=12, layers=2, seed=1)
    drafters = [ModelDrafter(_tiny(vocab=11, block=12, seed=2)),
                NGramDrafter(torch.arange(11), 11, n=2)]
    for seed in range(4):
        idx = torch.randint(11, (1, 3), generator=torch.Generator().manual_seed(seed))
        ref = generate(target, idx, 20, temperature=0)
        for d in drafters:
            for k in (1, 2, 5):
                assert torch.equal(speculative_generate(target, d, idx, 20, k=k), ref)


def test_greedy_round():
    logits = torch.tensor([[0.0, 5.0, 0.0], [4.0, 0.0, 0.0], [0.0, 0.0, 3.0]])  # argmax 1, 0, 2
    assert greedy_round(logits, [1, 0]) == ([1, 0, 2], 2)
    assert greedy_round(logits, [1, 2]) == ([1, 0], 1)
    assert greedy_round(logits, [2, 0]) == ([1], 0)


# --- sampled: exact by enumeration ---

def _tables(V=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    # bigram: last token -> p
    P = torch.softmax(torch.randn(V, V, generator=g, dtype=torch.float64) * 2, -1)
    Q = torch.softmax(torch.randn(V, V, generator=g, dtype=torch.float64) * 2, -1)
    return (lambda s: P[s[-1]]), (lambda s: Q[s[-1]]), P


@pytest.mark.parametrize("k", [1, 2, 3])
def test_output_distribution_is_the_targets_by_enumeration(k):
    p_of, q_of, P = _tables()
    prompt, n = [0], 3
    dist = exact_output_distribution(p_of, q_of, prompt, n, k)
    # written out here, independently of the library
    for seq in itertools.product(range(3), repeat=n):
        want, last = 1.0, prompt[-1]
        for t in seq:
            want *= float(P[last][t])
            last = t
        assert math.isclose(dist.get(seq, 0.0), want, rel_tol=1e-9, abs_tol=1e-12), seq
    assert math.isclose(sum(dist.values()), 1.0, rel_tol=1e-12)


@pytest.mark.parametrize("accept, residual", [
    (lambda p, q: torch.tensor(1.0), residual_distribution),          # accept every draft token
    (lambda p, q: p, residual_distribution),                         # p(x), not min(1, p/q)
    (acceptance_probability, lambda p, q: (p - q).clamp_min(0)),       # residual not normalised
    (acceptance_probability, lambda p, q: p),                         # resample from p
])
def test_enumeration_catches_wrong_rules(accept, residual):
    p_of, q_of, P = _tables()
    dist = exact_output_distribution(p_of, q_of, [0], 2, 2, accept, residual)
    exact = {(a, b): float(P[0][a] * P[a][b]) for a in range(3) for b in range(3)}
    assert max(abs(dist.get(s, 0.0) - v) for s, v in exact.items()) > 1e-3


def _chi_square_p(obs: torch.Tensor, exp: torch.Tensor) -> float:
    """Pearson's test, the cells expected fewer than 5 times pooled into one."""
    big = exp >= 5
    if not big.all():
        obs = torch.cat([obs[big], obs[~big].sum().view(1)])
        exp = torch.cat([exp[big], exp[~big].sum().view(1)])
    exp = exp * obs.sum() / exp.sum()  # float rounding of the exact probabilities
    return float(stats.chisquare(obs.numpy(), exp.numpy()).pvalue)


def test_round_samples_the_target_chi_square():
    g = torch.Generator().manual_seed(5)
    V, k = 4, 2
    p = torch.softmax(torch.randn(k + 1, V, generator=g), -1)
    q = torch.softmax(torch.randn(k, V, generator=g), -1)
    counts = torch.zeros(V)
    for _ in range(20000):
        draft = [int(torch.multinomial(q[i], 1, generator=g)) for i in range(k)]
        # first emitted token: its draft prefix is empty, so p[0] is its distribution
        counts[speculative_round(p, q, draft, g)[0][0]] += 1
    assert stats.chisquare(counts.numpy(), (p[0] * 20000).numpy()).pvalue > 0.01


def test_loop_samples_the_target_chi_square():
    """The whole loop (cache rewinds, windows past block_size) on a tiny model: the first 3 tokens
    after a prompt of 6 (past block_size 8) against the target's exact distribution."""
    target = _tiny(vocab=4, block=8, layers=2, seed=3, n_embd=16)
    drafter = ModelDrafter(_tiny(vocab=4, block=8, seed=4))
    prompt = [1, 2, 3, 0, 1, 2]
    seqs = [list(s) for s in itertools.product(range(4), repeat=3)]
    with torch.no_grad():
        exact = []
        for s in seqs:
            prob = 1.0
            for j in range(3):
                ctx = (prompt + s[:j])[-8:]
                prob *= float(torch.softmax(target(torch.tensor([ctx]))[0][0, -1], -1)[s[j]])
            exact.append(prob)
    n = 3000
    g = torch.Generator().manual_seed(0)
    counts = {tuple(s): 0 for s in seqs}
    for _ in range(n):
        out = speculative_generate(target, drafter, torch.tensor([prompt]),
                                   3, k=2, temperature=1.0, generator=g)
        counts[tuple(out[0, 6:].tolist())] += 1
    obs = torch.tensor([counts[tuple(s)] for s in seqs], dtype=torch.float64)
    exp = torch.tensor(exact, dtype=torch.float64) * n
    assert _chi_square_p(obs, exp) > 0.01


@pytest.mark.slow
def test_real_model_pairs_chi_square_over_1e5_draws(shipped):
    """10^5 draws of the first two tokens after a prompt, the shipped model as the target and the
    trigram table as the draft (k = 1, the rule of the library's speculative_round), against the
    target's exact joint distribution p(x1) p(x2 | x1)."""
    model, tok, train = shipped
    drafter = NGramDrafter(train, 65, n=3)
    prompt = tok.encode("ROMEO:\n")
    V = 65
    with torch.no_grad():
        p1 = torch.softmax(model(torch.tensor([prompt]))[0][0, -1], -1)
        ctx2 = torch.tensor([prompt + [a] for a in range(V)])
        p2 = torch.softmax(model(ctx2)[0][:, -1], -1)  # (V, V): p(x2 | x1)
        ctx3 = torch.tensor([prompt + [a, b] for a in range(V) for b in range(V)])
        p3 = torch.softmax(model(ctx3)[0][:, -1], -1).view(V, V, V)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(V, V, dtype=torch.float64)
    n = 100_000
    for _ in range(n):
        (d1,), q = drafter.propose(prompt, 1, 1.0, generator=g)
        emitted, _ = speculative_round(torch.stack([p1, p2[d1]]), q, [d1], g)
        if len(emitted) == 1:  # a second round, from prompt + x1
            x1 = emitted[0]
            (d2,), q = drafter.propose(prompt + [x1], 1, 1.0, generator=g)
            emitted = (emitted
                       + speculative_round(torch.stack([p2[x1], p3[x1, d2]]), q, [d2], g)[0][:1])
        counts[emitted[0], emitted[1]] += 1
    exp = (p1[:, None] * p2).double().flatten() * n
    obs = counts.flatten()
    assert _chi_square_p(obs, exp) > 0.01


# --- the cost model ---

def test_expected_tokens_per_call():
    assert expected_tokens_per_call(0.0, 4) == 1.0
    assert expected_tokens_per_call(1.0, 4) == 5.0
    assert math.isclose(expected_tokens_per_call(0.5, 2), 1 + 0.5 + 0.25)
    assert alpha_from_rounds([2, 2], 2) == 1.0
    assert alpha_from_rounds([0, 1], 2) == 1 / 3
    with pytest.raises(ValueError, match="alpha"):
        expected_tokens_per_call(1.5, 2)


# --- equal to transformers' assisted generation ---

def test_equal_to_transformers_assisted_generation():
    transformers = pytest.importorskip("transformers")
    from course_lib.gpt2 import from_pretrained

    def gpt2(layers, seed):
        torch.manual_seed(seed)
        config = transformers.GPT2Config(vocab_size=97, n_positions=64, n_embd=32,
                                         n_layer=layers, n_head=4, bos_token_id=None,
                                         eos_token_id=None, pad_token_id=None)
        return transformers.GPT2LMHeadModel(config).eval()

    hf_target, hf_draft = gpt2(2, 0), gpt2(1, 1)
    target, draft = from_pretrained(hf_target), from_pretrained(hf_draft)
    for seed in range(3):
        idx = torch.randint(97, (1, 5), generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            theirs = hf_target.generate(idx, attention_mask=torch.ones_like(idx),
                                        assistant_model=hf_draft,
                                        do_sample=False, max_new_tokens=30)
            plain = hf_target.generate(idx, attention_mask=torch.ones_like(idx),
                                       do_sample=False, max_new_tokens=30)
        ours = speculative_generate(target, ModelDrafter(draft), idx, 30, k=4)
        assert torch.equal(theirs, plain)
        assert torch.equal(ours, theirs)


# --- bad drafts ---

def test_a_draft_with_another_vocabulary_is_refused():
    with pytest.raises(ValueError, match="vocabulary of 7 tokens and the target 5"):
        speculative_generate(_tiny(vocab=5), ModelDrafter(_tiny(vocab=7)), torch.tensor([[0]]), 3)
    with pytest.raises(TypeError, match="drafter must have"):
        speculative_generate(_tiny(vocab=5), _tiny(vocab=5), torch.tensor([[0]]), 3)
    with pytest.raises(ValueError, match="k must be"):
        speculative_generate(_tiny(vocab=5), ModelDrafter(_tiny(vocab=5)),
                             torch.tensor([[0]]), 3, k=0)


# --- the command line ---

def test_sample_with_a_draft_gives_the_greedy_text(capsys):
    from course_lib.cli import main
    from course_lib.pretrained import PRETRAINED_PATH

    common = ["sample", "--checkpoint", str(PRETRAINED_PATH), "--prompt", "ROMEO:",
              "--tokens", "40", "--temperature", "0", "--device", "cpu"]
    assert main(common) == 0
    plain = capsys.readouterr().out
    assert main([*common, "--draft", str(PRETRAINED_PATH), "--draft-k", "3"]) == 0
    captured = capsys.readouterr()
    assert captured.out == plain
    assert "tokens per target call" in captured.err


def test_the_cost_model_check_has_intervals_that_cover_a_model_that_holds():
    """Rounds whose kept counts follow the model exactly (each draft kept with probability 0.6,
    independently): the predicted and measured intervals overlap at every k; the Wilson interval
    of 60 successes in 100 is [0.502, 0.691] (its textbook value)."""
    from course_lib.speculative.measure import cost_model_rows, wilson_interval
    lo, hi = wilson_interval(60, 100)
    assert round(lo, 3) == 0.502 and round(hi, 3) == 0.691
    g = torch.Generator().manual_seed(0)
    cells = {}
    for k in (1, 2, 4):
        keeps = (torch.rand(400, k, generator=g) < 0.6).int()
        kept = [int(row.cumprod(0).sum()) for row in keeps]  # kept until the first rejection
        cells[str(k)] = {"kept": kept, "drafted": [k] * 400}
    rows = cost_model_rows({"temperatures": {"1.0": {"drafters": {"x": cells}}}})
    assert [r["k"] for r in rows] == [1, 2, 4] and all(r["agree"] for r in rows)
    assert all(r["predicted_interval"][0] < r["predicted"] < r["predicted_interval"][1]
               for r in rows)
    # a drafter right every time at k = 4: the model (from k = 1) cannot say so
    cells["4"]["kept"] = [4] * 400
    assert not cost_model_rows({"temperatures": {"1.0": {"drafters": {"x": cells}}}})[-1]["agree"]
