"""course_lib.evaluation: log-likelihoods against a plain forward pass (packed and not, learned
positions and RoPE, the bigram table), lm-eval's encoding and cropping, acc/acc_norm, bits per
byte, generation with stops, exact match, standard errors, bootstrap and paired comparisons,
contamination; and equality with lm-evaluation-harness itself (slow: lm-eval's start-up)."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from course_lib import evaluation as ev
from course_lib.bigram import BigramLanguageModel
from course_lib.model import GPT, GPTConfig
from course_lib.tokenizers import CharTokenizer

ALPHABET = "abcdefgh \n"
TOK = CharTokenizer(ALPHABET)


def tiny_gpt(**options) -> GPT:
    torch.manual_seed(0)
    config = dict(vocab_size=len(ALPHABET), block_size=24, n_layer=2, n_head=2, n_embd=16,
                  dropout=0.0)
    return GPT(GPTConfig(**(config | options))).eval()


def direct(model, context: str, continuation: str) -> float:
    """The log-likelihood the slow, obvious way: one row, cropped like lm-eval."""
    c, x = ev.encode_pair(TOK, context, continuation)
    ids = torch.tensor([(c + x)[-(model.config.block_size + 1):]])
    logits, _ = model(ids[:, :-1])
    lp = logits.log_softmax(-1)[0, -len(x):]
    return lp.gather(-1, torch.tensor(x)[:, None]).sum().item()


REQUESTS = [("abc ", "de"), ("abc ", "f"), ("abc ", "gh\nab"), ("h", "a"), ("abcdefgh" * 3, "abc"),
            ("ab\n", "cc"), ("ab\n", "cd"), ("ba", "a" * 20)]


@pytest.mark.parametrize("options",
                         [{}, {"norm": "rmsnorm", "rope_theta": 10000.0, "mlp": "swiglu"}])
@pytest.mark.parametrize("share", [True, False])
def test_loglikelihood_equals_one_row_per_request(options, share):
    model = tiny_gpt(**options)
    got = ev.loglikelihood(model, TOK, REQUESTS, batch_size=3, share_context=share)
    for (ll, _), (c, x) in zip(got, REQUESTS):
        assert ll == pytest.approx(direct(model, c, x), abs=1e-5)


def test_the_bigram_table_is_scored_row_by_row():
    torch.manual_seed(0)
    model = BigramLanguageModel(len(ALPHABET), block_size=8).eval()
    got = ev.loglikelihood(model, TOK, REQUESTS[:4])
    for (ll, _), (c, x) in zip(got, REQUESTS[:4]):
        assert ll == pytest.approx(direct(model, c, x), abs=1e-5)


def test_a_continuation_longer_than_the_context_window_is_scored_in_pieces():
    torch.manual_seed(0)
    bigram = BigramLanguageModel(len(ALPHABET), block_size=4).eval()
    c, x = "ab", "cdefgh abc" * 3  # 30 tokens, block 4
    ids = TOK.encode(c + x)
    logprobs = bigram.token_embedding_table.weight.log_softmax(-1)
    expected = sum(logprobs[ids[t - 1], ids[t]].item() for t in range(len(c), len(ids)))
    ((ll, greedy),) = ev.loglikelihood(bigram, TOK, [(c, x)])
    assert ll == pytest.approx(expected, abs=1e-4) and not greedy
    long = ev.loglikelihood(tiny_gpt(), TOK, [("a", "b" * 60)])
    assert math.isfinite(long[0][0])


def test_encode_pair_moves_trailing_whitespace_to_the_continuation():
    assert ev.encode_pair(TOK, "ab \n", "c") == (TOK.encode("ab"), TOK.encode(" \nc"))
    with pytest.raises(ValueError, match="context is empty"):
        ev.encode_pair(TOK, "", "a")


def test_is_greedy_is_true_for_the_greedy_continuation_only():
    model = tiny_gpt()
    greedy = ev.greedy_generate(model, TOK, ["abc"], max_new_tokens=5, stop=())[0]
    logits, _ = model(torch.tensor([TOK.encode("abc")]))
    unlikely = TOK.decode([int(logits[0, -1].argmin())])  # the least likely next character
    (_, is_greedy), (_, other) = ev.loglikelihood(model, TOK,
                                                  [("abc", greedy), ("abc", unlikely + greedy[1:])])
    assert is_greedy and not other


@settings(max_examples=15, deadline=None)
@given(st.text(ALPHABET, min_size=1, max_size=6), st.text(ALPHABET, min_size=1, max_size=5),
       st.text(ALPHABET, min_size=1, max_size=5))
def test_chain_rule(context, x, y):
    """log p(x y | c) = log p(x | c) + log p(y | c x), for texts without trailing whitespace
    moves."""
    if context[-1].isspace() or x[-1].isspace():
        return
    model = tiny_gpt()
    (xy, _), (first, _), (second, _) = ev.loglikelihood(model, TOK, [(context, x + y), (context, x),
                                                                     (context + x, y)])
    assert xy == pytest.approx(first + second, abs=1e-4)


def test_acc_and_acc_norm_follow_lm_eval():
    # the long choice has the highest total log-likelihood per character, the short one in total
    scores = ev.choice_scores([-2.0, -9.0], ["ab", "abcdefghij"], gold=1)
    assert scores == {"acc": 0.0, "acc_norm": 1.0}
    assert ev.choice_scores([-1.0, -3.0], ["a", "b"], gold=0) == {"acc": 1.0, "acc_norm": 1.0}


def test_multiple_choice_scores_every_item():
    model = tiny_gpt()
    items = [{"context": "abc", "choices": ["d", "e", "fg"], "gold": 2},
             {"context": "h", "choices": ["a", "b"],
                                                                          "gold": 0}]
    out = ev.multiple_choice(model, TOK, items, delimiter="")
    assert (len(out["acc"]) == 2
            and all(len(l) == len(i["choices"]) for l, i in zip(out["lls"], items)))
    assert out["lls"][0][2] == pytest.approx(direct(model, "abc", "fg"), abs=1e-5)


def test_bits_per_byte_of_a_context_free_model_is_its_mean_loss_in_bits():
    torch.manual_seed(0)
    model = BigramLanguageModel(len(ALPHABET), block_size=8).eval()
    text = "abcabc defgh\nab" * 20
    ids = torch.tensor(TOK.encode(text))
    logits, _ = model(ids[None, :-1])
    mean = torch.nn.functional.cross_entropy(logits[0], ids[1:]).item()
    assert ev.bits_per_byte(model, TOK, text) == pytest.approx(mean / math.log(2), rel=1e-5)
    assert ev.bits_per_byte_from_loss(mean, 1.0) == pytest.approx(mean / math.log(2))


@pytest.mark.parametrize("stride", [1, 5, 12, 24])
def test_text_nll_scores_every_token_but_the_first_once(stride):
    model = tiny_gpt()
    ids = TOK.encode("abcdefgh abc\n" * 7)
    _, count = ev.text_nll(model, ids, stride=stride)
    assert count == len(ids) - 1
    with pytest.raises(ValueError, match="stride"):
        ev.text_nll(model, ids, stride=25)


def test_greedy_generate_stops_and_cuts():
    model = tiny_gpt()
    full = ev.greedy_generate(model, TOK, ["abc", "h"], max_new_tokens=10, stop=())
    cut = ev.greedy_generate(model, TOK, ["abc", "h"], max_new_tokens=10, stop=(full[0][2],))
    assert cut[0] == full[0].split(full[0][2])[0]
    assert ev.cut_at_stop("12\n\nQuestion: x", ["\n\n", "Question:"]) == "12"


@pytest.mark.parametrize("text, answer",
                         [("18 cups #### 18", "18"), ("3 * 6 = 18", "18"), ("#### 1,200", "1200"),
                                          ("it is 12.0", "12"), ("no number", None),
                          ("-4 and 5 #### -4", "-4"),
                                          ("costs $1,200.00", "1200"), ("#### 18.50", "18.5"),
                          ("#### 0.0", "0"),
                                          ("#### 100", "100")])
def test_parse_number(text, answer):
    assert ev.parse_number(text) == answer


def test_exact_match():
    assert ev.exact_match(["a ", "b"], ["a", "c"]) == [1.0, 0.0]
    assert ev.exact_match(["so #### 7", "x"], ["7", "7"], ev.parse_number) == [1.0, 0.0]
    with pytest.raises(ValueError, match="2 predictions for 1"):
        ev.exact_match(["a", "b"], ["a"])


def test_few_shot_prompt():
    assert ev.few_shot_prompt([("1+1=", "2"), ("2+2=", "4")], "3+3=") == "1+1=2\n2+2=4\n3+3="


def test_mean_stderr_is_lm_evals():
    from lm_eval.api.metrics import mean_stderr
    xs = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0]
    assert ev.mean_stderr(xs) == pytest.approx(mean_stderr(xs))


def test_bootstrap_interval_is_seeded_and_covers_the_mean():
    xs = [1.0] * 30 + [0.0] * 70
    lo, hi = ev.bootstrap_interval(xs, seed=3)
    assert lo < 0.3 < hi and (lo, hi) == ev.bootstrap_interval(xs, seed=3)
    # the normal approximation
    assert hi - lo == pytest.approx(2 * 1.96 * ev.mean_stderr(xs), rel=0.15)
    with pytest.raises(ValueError, match="level"):
        ev.bootstrap_interval(xs, level=1.5)


def test_paired_comparison_sees_a_consistent_small_gain():
    a = [1.0] * 60 + [0.0] * 40
    b = [1.0] * 50 + [0.0] * 50  # b is right only where a is: a wins 10 items, loses none
    out = ev.paired_comparison(a, b)
    assert out["diff"] == pytest.approx(0.1) and out["a_wins"] == 10 and out["b_wins"] == 0
    assert out["p_value"] < 0.01 and out["interval"][0] > 0
    same = ev.paired_comparison(a, a)
    assert same["diff"] == 0 and same["p_value"] == 1.0
    with pytest.raises(ValueError, match="same items"):
        ev.paired_comparison(a, b[:3])
    # 10 items to none: a fair coin gives 10 of 10 or 0 of 10 with probability 2 / 2**10
    assert out["mcnemar_p"] == pytest.approx(2 / 2 ** 10)
    assert out["interval"] == pytest.approx(ev.bootstrap_interval([x - y for x, y in zip(a, b)]))
    assert "mcnemar_p" not in ev.paired_comparison([0.5, 1.0], [0.0, 1.0])  # not 0/1 scores


@pytest.mark.parametrize("a_wins, b_wins", [(49, 29), (3, 12), (0, 0), (7, 7), (1, 0)])
def test_mcnemar_p_is_the_exact_two_sided_binomial_test(a_wins, b_wins):
    scipy_stats = pytest.importorskip("scipy.stats")
    expected = (scipy_stats.binomtest(a_wins, a_wins + b_wins, 0.5).pvalue if a_wins + b_wins
                else 1.0)
    assert ev.mcnemar_p(a_wins, b_wins) == pytest.approx(expected, rel=1e-12)
    assert ev.mcnemar_p(a_wins, b_wins) == ev.mcnemar_p(b_wins, a_wins)


def test_contamination():
    train = "to be or not to be that is the question whether tis nobler in the mind"
    grams = ev.word_ngrams(train, 4)
    shares = ev.contamination(["To be, or not to be: that is", "whether tis nobler in the cat",
                               "short"], grams, n=4)
    assert shares[0] == 1.0 and 0 < shares[1] < 1 and shares[2] == 0.0


# --- equal to the reference: lm-evaluation-harness ----------------------------------------------


@pytest.fixture(scope="module")
def reference():
    """A tiny random GPT2LMHeadModel and a character tokenizer, both built offline, seen through
    lm-eval's HFLM and through ours (course_lib.gpt2.from_pretrained of the same object)."""
    import os
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    lm_eval_hf = pytest.importorskip("lm_eval.models.huggingface")
    from course_lib.evaluation.tasks import load_task
    from course_lib.gpt2 import from_pretrained
    from eval_helpers import char_hf_tokenizer, tiny_gpt2

    hf_tok, ours_tok = char_hf_tokenizer()
    hf = tiny_gpt2(len(hf_tok))
    lm = lm_eval_hf.HFLM(pretrained=hf, tokenizer=hf_tok, batch_size=4, device="cpu", max_length=64)
    return dict(lm=lm, ours=from_pretrained(hf), tok=ours_tok, hf_tok=hf_tok,
                mc=load_task("next-line").test[:12], gen=load_task("next-word").test[:12])


@pytest.mark.slow
def test_loglikelihoods_equal_lm_eval(reference):
    """In float32 within 1e-5 relative (lm-eval sums in float32: a sum near -130 has a rounding
    step of 1.5e-5), and in float64, where rounding is out of the way, within 1e-9: the same
    tokens are scored at the same positions, crop and whitespace rules included."""
    from lm_eval.api.instance import Instance
    reqs = [(i["context"], " " + c) for i in reference["mc"] for c in i["choices"]]
    instances = [Instance(request_type="loglikelihood", doc={}, arguments=r, idx=0) for r in reqs]
    theirs = reference["lm"].loglikelihood(instances)
    ours = ev.loglikelihood(reference["ours"], reference["tok"], reqs)
    assert max(abs(a[0] - b[0]) / max(1.0, abs(a[0])) for a, b in zip(theirs, ours)) < 1e-5
    assert [a[1] for a in theirs] == [b[1] for b in ours]
    reference["lm"].model.double()
    try:
        theirs = reference["lm"].loglikelihood(instances)
    finally:
        reference["lm"].model.float()
    ours = ev.loglikelihood(reference["ours"].double(), reference["tok"], reqs)
    reference["ours"].float()
    assert max(abs(a[0] - b[0]) for a, b in zip(theirs, ours)) < 1e-9


@pytest.mark.slow
def test_packed_shared_context_equals_lm_eval(reference):
    """Items short enough to pack (one context, then the four choices under a block mask, with
    positions restarting after the context) give lm-eval's one-row-per-request numbers: the
    packed path itself, checked against the reference (one forward row per item, not per
    request)."""
    from lm_eval.api.instance import Instance

    from course_lib.evaluation.tasks import load_task
    block = reference["ours"].config.block_size
    items = [i for i in load_task("next-speaker").test
             if len(i["context"]) + sum(len(c) for c in i["choices"]) <= block - 4][:8]
    assert len(items) == 8
    reqs = [(i["context"], c) for i in items for c in i["choices"]]
    instances = [Instance(request_type="loglikelihood", doc={}, arguments=r, idx=0) for r in reqs]
    theirs = reference["lm"].loglikelihood(instances)
    rows = []
    hook = reference["ours"].register_forward_hook(lambda module, args,
                                                   out: rows.append(args[0].shape[0]))
    try:
        ours = ev.loglikelihood(reference["ours"], reference["tok"], reqs, batch_size=1)
    finally:
        hook.remove()
    assert sum(rows) == len(items)  # packed: one row per item
    assert max(abs(a[0] - b[0]) / max(1.0, abs(a[0])) for a, b in zip(theirs, ours)) < 1e-5
    assert [a[1] for a in theirs] == [b[1] for b in ours]


@pytest.mark.slow
def test_acc_and_acc_norm_equal_lm_evals_own_task(reference, tmp_path):
    """lm-eval's whole pipeline (a YAML task over a local JSON file, its metrics) against ours."""
    import json

    import lm_eval
    from lm_eval.tasks import TaskManager
    with open(tmp_path / "items.jsonl", "w") as f:
        for item in reference["mc"]:
            f.write(json.dumps(item) + "\n")
    (tmp_path / "task.yaml").write_text(
        "task: course_next_line\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {tmp_path / 'items.jsonl'}\ntest_split: test\noutput_type: multiple_choice\n"
        'doc_to_text: "{{context}}"\ndoc_to_choice: "{{choices}}"\ndoc_to_target: gold\n'
        'target_delimiter: " "\nmetric_list:\n  - metric: acc\n  - metric: acc_norm\n')
    out = lm_eval.simple_evaluate(model=reference["lm"], tasks=["course_next_line"],
                                  task_manager=TaskManager(include_path=str(tmp_path)),
                                  log_samples=True)
    samples = sorted(out["samples"]["course_next_line"], key=lambda s: s["doc_id"])
    ours = ev.multiple_choice(reference["ours"], reference["tok"], reference["mc"])
    assert [s["acc"] for s in samples] == ours["acc"]
    assert [s["acc_norm"] for s in samples] == ours["acc_norm"]
    result = out["results"]["course_next_line"]
    assert result["acc,none"] == pytest.approx(sum(ours["acc"]) / len(ours["acc"]))
    assert result["acc_stderr,none"] == pytest.approx(ev.mean_stderr(ours["acc"]), nan_ok=True)


@pytest.mark.slow
def test_generation_and_exact_match_equal_lm_eval(reference):
    from lm_eval.api.instance import Instance
    items = reference["gen"]
    kwargs = {"until": ["\n"], "max_gen_toks": 8, "do_sample": False}
    theirs = reference["lm"].generate_until([Instance(request_type="generate_until", doc={},
                                                      arguments=(i["prompt"], kwargs), idx=0)
                                             for i in items])
    ours = ev.greedy_generate(reference["ours"], reference["tok"], [i["prompt"] for i in items], 8,
                              ["\n"])
    assert ours == theirs and sum(len(o) for o in ours) > 12  # real text, not only empty answers
    answers = [i["answer"] for i in items]
    assert ev.exact_match(ours, answers) == ev.exact_match(theirs, answers)
