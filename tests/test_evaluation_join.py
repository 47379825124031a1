"""course_lib.evaluation.pairs (issue 48): log-likelihood requests where a byte-level BPE token
spans the join of context and continuation. Every request gets a finite score, the score is the one
the rule of eval_pairs defines (computed here by hand from the model's logits, the split found by
brute force), and where a token boundary lies at the join the ids and scores are lm-eval's own (its
``TemplateLM._encode_pair`` on our tokenizer; its HFLM on a tiny GPT-2, slow)."""
import math
import random
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import evaluation as ev
from course_lib.bpe import BPETokenizer
from course_lib.data import load_text
from course_lib.evaluation.pairs import complete_context_tokens, encode_pair
from course_lib.model import GPT, GPTConfig

TEXT = load_text()
TRAIN = TEXT[:100_000]  # the tokenizer's text; the requests come from text after it
HELDOUT = TEXT[500_000:600_000]
# real text with characters of two and three UTF-8 bytes, for cuts inside a character
UNICODE = "naïve café, déjà vu — ‘quoted’ and “double” © Ærøskøbing; 日本語 is 3 bytes each. " * 3

# (context, continuation) whose join a token of the BPE below spans, each for a reason named
SPANNING = [("Of th", "e king"),       # " the" is one token: the context's " th" is its tail
            ("Of th", "e"),  # the whole text has as many tokens as the context: lm-eval stops
            ("wh", "at"),              # the same, at the very start
            ("my lo", "rd, I come"),
            ("CORIOLAN", "US:\nGo"),   # "CORIOLANUS" is one token
            ("t", "hou art"),          # the context lies inside the first token: PR 4055's ids
            ("Sir, I have wi", "th me ")]


@pytest.fixture(scope="module")
def tok():
    return BPETokenizer.train(TRAIN, vocab_size=400)


@pytest.fixture(scope="module")
def model(tok):
    torch.manual_seed(0)
    config = GPTConfig(vocab_size=tok.vocab_size, block_size=256, n_layer=2, n_head=2, n_embd=32,
                       dropout=0.0)
    return GPT(config).eval()


def moved(context: str, continuation: str) -> tuple[str, str]:
    """lm-eval's whitespace rule: the context's trailing whitespace starts the continuation."""
    n = len(context) - len(context.rstrip())
    return (context[:-n], context[-n:] + continuation) if n else (context, continuation)


def boundary_at_join(tok, context: str, continuation: str) -> bool:
    """Do some first tokens of encode(context + continuation) spell exactly the context?"""
    c, x = moved(context, continuation)
    whole = tok.encode(c + x)
    return any(tok.decode(whole[:j]) == c for j in range(len(whole) + 1))


def rule_by_brute_force(tok, context: str, continuation: str) -> tuple[list[int], int]:
    """(the ids the model reads, index of the first scored one) by eval_pairs' rule, the split
    found by trying every prefix of the whole text's tokens."""
    c, x = moved(context, continuation)
    whole = tok.encode(c + x)
    k = max(j for j in range(len(whole)) if c.startswith(tok.decode(whole[:j])))
    if k == 0:
        return tok.encode(c) + tok.encode(x), len(tok.encode(c))
    return whole, k


@torch.no_grad()
def by_hand(model, ids: list[int], first: int) -> float:
    """sum over t >= first of log p(ids[t] | ids[:t]), from one plain forward pass."""
    out = model(torch.tensor([ids[:-1]]))  # ours: (logits, loss); Hugging Face's: an output object
    logits = out[0] if isinstance(out, tuple) else out.logits  # (1, T, V)
    logprobs = logits[0].double().log_softmax(-1)
    return sum(logprobs[t - 1, ids[t]].item() for t in range(first, len(ids)))


def lm_eval_pair(tok, context: str, continuation: str):
    """lm-eval's own ``TemplateLM._encode_pair`` (causal backend) with our tokenizer."""
    from lm_eval.api.model import TemplateLM
    return TemplateLM._encode_pair(SimpleNamespace(backend="causal", tok_encode=tok.encode),
                                   context, continuation)


def test_the_examples_span_the_join(tok):
    for c, x in SPANNING:
        assert not boundary_at_join(tok, c, x), (c, x)
    empty = [(c, x) for c, x in SPANNING if len(tok.encode(c + x)) <= len(tok.encode(c))]
    assert empty == [("Of th", "e"), ("wh", "at")]  # where lm-eval's continuation has no tokens


def test_the_split_moves_back_to_the_last_boundary_before_the_join(tok):
    context_ids, cont_ids = encode_pair(tok, "Of th", "e king")
    assert tok.decode(context_ids) == "Of" and tok.decode(cont_ids) == " the king"
    assert context_ids + cont_ids == tok.encode("Of the king")  # the text's own tokens
    assert [tok.decode([i]) for i in encode_pair(tok, "Of th", "e")[1]] == [" the"]
    # the context inside the first token: the context and the continuation encoded alone
    assert encode_pair(tok, "t", "hou art") == (tok.encode("t"), tok.encode("hou art"))


def test_every_spanning_request_gets_the_rules_score(tok, model):
    got = ev.loglikelihood(model, tok, SPANNING, batch_size=3)
    for (ll, _), (c, x) in zip(got, SPANNING):
        assert math.isfinite(ll) and ll < 0
        assert ll == pytest.approx(by_hand(model, *rule_by_brute_force(tok, c, x)), abs=1e-4)
        ids, first = rule_by_brute_force(tok, c, x)
        assert tok.decode(ids) == c + x  # the ids scored spell the request's text
    unpacked = ev.loglikelihood(model, tok, SPANNING, share_context=False)
    assert [a for a, _ in got] == pytest.approx([a for a, _ in unpacked], abs=1e-4)


def test_multiple_choice_scores_a_choice_that_merges_with_the_context(tok, model):
    items = [{"context": "Of th", "choices": ["e", "e king", "ink"], "gold": 1}]
    out = ev.multiple_choice(model, tok, items, delimiter="")
    assert len(out["lls"][0]) == 3 and all(math.isfinite(v) for v in out["lls"][0])


def test_an_empty_continuation_is_refused_and_a_spanning_one_is_not(tok, model):
    with pytest.raises(ValueError, match="continuation is empty"):
        ev.loglikelihood(model, tok, [("Of the", "")])
    with pytest.raises(ValueError, match="context is empty or only whitespace"):
        encode_pair(tok, "\n\n", "KING:")
    ev.loglikelihood(model, tok, [("Of th", "e")])  # lm-eval's "empty continuation": scored


def test_non_spanning_requests_keep_lm_evals_ids(tok):
    for c, x in [("Of the", " king"), ("Answer: ", "A"), ("KING:\nWhat news? ", "None"),
                 ("And", "\n")]:
        assert boundary_at_join(tok, c, x)
        assert encode_pair(tok, c, x) == lm_eval_pair(tok, c, x)


def test_a_cut_inside_a_character_is_not_a_boundary():
    """A BPE whose one merge joins the second byte of "é" (c3 a9) to "x": in "ab éx" the token
    a9+x spans the join after "é", and the cut before it falls inside "é" (decoded "ab \\ufffd"),
    so the split moves back to "ab "."""
    weird = BPETokenizer.train("éxĩx " * 50, vocab_size=258)
    assert weird.merges == [(b"\xa9", b"x")]
    whole = weird.encode("ab éx")
    assert [weird.vocab[i] for i in whole] == [b"a", b"b", b" ", b"\xc3", b"\xa9x"]
    assert complete_context_tokens(weird, whole, "ab é") == 3
    context_ids, cont_ids = encode_pair(weird, "ab é", "x")
    assert weird.decode(context_ids) == "ab " and weird.decode(cont_ids) == "éx"
    # nothing before the cut
    assert encode_pair(weird, "é", "x!") == (weird.encode("é"), weird.encode("x!"))


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_complete_context_tokens_is_the_brute_force_split(tok, data):
    text = data.draw(st.sampled_from([HELDOUT, UNICODE]))
    start = data.draw(st.integers(0, len(text) - 40))
    length = data.draw(st.integers(1, 30))
    c, x = text[start:start + length], text[start + length:start + length + 10]
    whole = tok.encode(c + x)
    expected = max(j for j in range(len(whole)) if c.startswith(tok.decode(whole[:j])))
    assert complete_context_tokens(tok, whole, c) == expected


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_random_splits_of_real_text(tok, model, data):
    """Any split of real text: a finite score, the ids spell the text, the score is the rule's;
    where a boundary lies at the join, the ids are lm-eval's."""
    text = data.draw(st.sampled_from([HELDOUT, UNICODE]))
    start = data.draw(st.integers(0, len(text) - 100))
    n_context, n_cont = data.draw(st.integers(1, 60)), data.draw(st.integers(1, 30))
    context, continuation = (
        text[start : start + n_context],
        text[start + n_context : start + n_context + n_cont],
    )
    if not context.strip():
        return  # a context of whitespace only is refused (test above)
    context_ids, cont_ids = encode_pair(tok, context, continuation)
    assert cont_ids and tok.decode(context_ids + cont_ids) == "".join(moved(context, continuation))
    ((ll, _),) = ev.loglikelihood(model, tok, [(context, continuation)])
    assert math.isfinite(ll)
    assert ll == pytest.approx(by_hand(model, *rule_by_brute_force(tok, context, continuation)),
                               abs=1e-4)
    if boundary_at_join(tok, context, continuation):
        assert (context_ids, cont_ids) == lm_eval_pair(tok, context, continuation)


# --- against lm-evaluation-harness's HFLM ------------------------------------------------------


def heldout_requests(tok, n: int = 60, seed: int = 0) -> list[tuple[str, str]]:
    """Splits of held-out lines inside words and between them: some spanning, most not."""
    rng = random.Random(seed)
    lines = [line for line in HELDOUT.splitlines() if len(line) > 20]
    out = []
    for line in rng.sample(lines, n):
        cut = rng.randrange(3, len(line) - 2)
        out.append((line[:cut], line[cut:cut + rng.randrange(2, 12)]))
    return out + SPANNING


@pytest.mark.slow
def test_against_lm_eval(tok):
    """Where a boundary lies at the join, lm-eval's HFLM and ours give the same numbers. Where a
    token spans it, lm-eval stops on an empty continuation or scores ids that do not spell the text;
    ours scores the rule's ids (by hand, on the same GPT-2's logits)."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    lm_eval_hf = pytest.importorskip("lm_eval.models.huggingface")
    from lm_eval.api.instance import Instance

    from course_lib.gpt2 import from_pretrained
    from eval_helpers import bpe_hf_tokenizer, tiny_gpt2

    hf_tok, ours_tok = bpe_hf_tokenizer(TRAIN, vocab_size=400)
    requests = heldout_requests(ours_tok)
    texts = "".join(c + x for c, x in requests)
    assert hf_tok.encode(texts,
                         add_special_tokens=False) == ours_tok.encode(texts) == tok.encode(texts)
    hf = tiny_gpt2(len(hf_tok), n_positions=128)
    lm = lm_eval_hf.HFLM(pretrained=hf, tokenizer=hf_tok, batch_size=8, device="cpu",
                         max_length=128)
    ours_model = from_pretrained(hf)
    ours = ev.loglikelihood(ours_model, ours_tok, requests)
    clean = [i for i, r in enumerate(requests) if boundary_at_join(ours_tok, *r)]
    spanning = [i for i in range(len(requests)) if i not in clean]
    assert len(clean) >= 30 and len(spanning) >= 10

    theirs = lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=requests[i],
                                        idx=0)
                               for i in clean])
    assert max(abs(a[0] - ours[i][0]) / max(1.0, abs(a[0])) for a, i in zip(theirs, clean)) < 1e-5
    assert [a[1] for a in theirs] == [ours[i][1] for i in clean]

    stopped = 0
    for i in spanning:
        c, x = moved(*requests[i])
        lm_ids = sum(lm_eval_pair(ours_tok, *requests[i]), [])
        try:
            lm.loglikelihood([Instance(request_type="loglikelihood", doc={}, arguments=requests[i],
                                       idx=0)])
        except AssertionError:
            stopped += 1
        else:
            assert ours_tok.decode(lm_ids) != c + x  # lm-eval's ids misspell the text
        assert math.isfinite(ours[i][0])
        assert ours[i][0] == pytest.approx(
            by_hand(hf, *rule_by_brute_force(ours_tok, *requests[i])), abs=1e-4
        )
    assert stopped >= 2
