"""One figure for one run: the CPU preset's full-run val loss (2000 steps, seed 1337, on the whole
validation split) is recorded once, course_lib.presets.CPU_PRESET_VAL_LOSS, measured by
benchmarks/speedrun.py into course_lib/records/speedrun_results.json. Every place that quotes it
quotes that value, tied here to its source; chapter 13 prints it from the constant instead of
pasting it. Other estimates of the same preset are quoted only with their estimator named (200
random batches, 20 random batches of 32 windows), and are tied to their sources too."""
import json
import re

import pytest
import torch
from benchmark_loader import load_benchmark

from course_lib.presets import CPU_PRESET_VAL_LOSS
from course_lib.tools.chapters import ROOT

FIGURE = f"{CPU_PRESET_VAL_LOSS}"
RECORDS = ROOT / "course_lib" / "records"


# the book's "Measured results" page: one row per benchmark
MEASURED = ROOT / "book" / "measured.md"


def _measured_row(script: str) -> str:
    page = MEASURED.read_text()
    return next(line for line in page.splitlines() if line.startswith(f"| `{script}`"))


def test_the_constant_is_the_recorded_whole_split_loss_of_seed_1337():
    result = json.loads((RECORDS / "speedrun_results.json").read_text())
    run = next(r for r in result["runs"]["shakespeare-char-cpu"] if r["seed"] == 1337)
    assert "--preset shakespeare-char-cpu" in run["command"] and run["curve"][-1]["step"] == 2000
    assert run["curve"][-1]["estimate"] == "whole validation split"
    assert round(run["val_loss"], 3) == CPU_PRESET_VAL_LOSS


def test_the_measured_page_and_the_benchmark_quote_the_recorded_figure_and_name_the_others():
    row = _measured_row("train_shakespeare_cpu.py")
    assert f"val loss {FIGURE} (`speedrun.py`'s record), the one figure the book quotes" in row, row
    # the script's own estimate is quoted with its estimator, never as the book's figure
    assert "1.859 on 200 random batches" in row
    for path in (ROOT / "benchmarks" / "train_shakespeare_cpu.py",
                 ROOT / "course_lib" / "presets.py"):
        text = path.read_text()
        assert FIGURE in text and "whole validation split" in text, path
    # speedrun.py's row quotes the three seeds' whole-split losses as the record has them
    result = json.loads((RECORDS / "speedrun_results.json").read_text())
    losses = sorted(r["val_loss"] for r in result["runs"]["shakespeare-char-cpu"])
    assert "whole-validation-split loss" in _measured_row("speedrun.py")
    assert f"against {losses[0]:.3f}-{losses[-1]:.3f}" in _measured_row("speedrun.py")


def test_chapter_13_prints_the_constant_and_pastes_no_other_figure():
    nb = json.loads((ROOT / "book" / "ch13_gpt2_weights.ipynb").read_text())
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    assert "CPU_PRESET_VAL_LOSS" in code
    # a pasted val loss such as 1.875 next to "val loss" would be a second figure for the same run
    assert not re.search(r"val loss \d\.\d{2,3} nats",
                         code), "print CPU_PRESET_VAL_LOSS, do not paste it"
    outputs = "".join("".join(o.get("text", "")) for c in nb["cells"] if c["cell_type"] == "code"
                      for o in c.get("outputs", []))
    assert f"val loss {FIGURE} nats" in outputs
    prose = "".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    assert "whole validation split" in prose and "the one figure the book quotes" not in prose


@pytest.mark.slow
def test_the_shipped_model_is_that_run_and_the_finetune_row_names_its_estimate():
    """course_lib.pretrained's docstring and the fine-tuning row of book/measured.md quote the
    shipped model: recomputed here (about 10 s on 2 cores)."""
    import course_lib.pretrained as pretrained
    from course_lib.data import load_text, train_val_split
    from course_lib.finetune import TASK_CHARS, extend_tokenizer, text_loss
    from course_lib.lora_gpt import extend_vocabulary
    from course_lib.losses import sequence_loss

    model, tok0 = pretrained.load_pretrained()
    text = load_text("tinyshakespeare")
    _, val = train_val_split(torch.tensor(tok0.encode(text)))
    whole = round(sequence_loss(model, val), 3)
    assert whole == CPU_PRESET_VAL_LOSS
    assert f"is {FIGURE}, the one figure the book quotes" in " ".join(pretrained.__doc__.split())
    # the fine-tuning row of book/measured.md: ch15's estimate, the shipped model with the new
    # characters' rows
    tok = extend_tokenizer(tok0, TASK_CHARS)
    start = extend_vocabulary(model, tok.vocab_size - tok0.vocab_size)
    estimate = text_loss(start, tok, text[int(0.9 * len(text)):])
    assert f"20 random batches of 32 windows: {estimate:.3f})" in _measured_row("finetune_dates.py")


def test_the_measured_page_quotes_the_eval_speed_record():
    """book/measured.md's eval_speed.py row: the figures of course_lib/records/eval_speed.json, as
    stored."""
    import statistics
    rec = json.loads((RECORDS / "eval_speed.json").read_text())
    row = _measured_row("eval_speed.py")
    med = {k: statistics.median(v) for k, v in rec["seconds"].items()}
    best = {k: min(v) for k, v in rec["seconds"].items()}
    ll = "lm_eval_loglikelihood"
    assert (
        f"{rec['requests']} next-line log-likelihood requests, medians of {rec['repeats']}" in row
    ), row
    # not bold: noisy
    assert f"({med[ll] / med['ours_loglikelihood_our_gpt']:.2f}x faster on the medians" in row
    assert f"({med[ll] / med['ours_loglikelihood']:.2f}x)" in row
    assert (
        f"{best[ll] / best['ours_loglikelihood_our_gpt']:.2f}x and "
        f"{best[ll] / best['ours_loglikelihood']:.2f}x"
        in row
    )
    assert f"{med['lm_eval_generate'] / med['ours_generate']:.2f}x" in row
    loads = rec["load_average_after_each_repeat"]
    assert f"load average {min(loads):.1f}-{max(loads):.1f}" in row
    # what the benchmark computed itself agrees with the medians quoted
    assert rec["speedup_loglikelihood"] == med[ll] / med["ours_loglikelihood"]


def test_the_measured_page_quotes_the_chat_sft_record_and_the_shipped_model_is_its_run():
    """book/measured.md's chat_sft.py row: the ranges of course_lib/records/chat_sft_runs.json, and
    the shipped chat model is the run the record names (its final validation loss is the one stored
    in it)."""
    from course_lib.chat.engine import CHAT_V1_MODEL_PATH
    from course_lib.checkpoint import load_checkpoint

    rec = json.loads((RECORDS / "chat_sft_runs.json").read_text())
    row = _measured_row("chat_sft.py")
    for iters, start in [(1000, "pretrained"), (1000, "scratch"), (3000, "pretrained"),
                         (3000, "scratch")]:
        losses = [r["final_val_loss"] for r in rec["runs"] if r["iters"] == iters
                  and r["start"] == start]
        assert len(losses) == 3
    ranges = {(i, s): sorted(r["final_val_loss"] for r in rec["runs"] if r["iters"] == i
                             and r["start"] == s)
              for i in (1000, 3000) for s in ("pretrained", "scratch")}
    fmt = {1000: "{:.3f}", 3000: "{:.2f}"}
    for (i, s), v in ranges.items():
        assert f"{fmt[i].format(v[0])}-{fmt[i].format(v[-1])}" in row, (i, s, row)
    shipped = rec["chosen"]["shipped"].split()[0]
    run = next(r for r in rec["runs"] if r["name"] == shipped)
    ckpt = load_checkpoint(CHAT_V1_MODEL_PATH)  # the record's run is the first chat model
    assert (ckpt["step"] == run["iters"]
            and round(ckpt["history"]["val_loss"][-1], 5) == run["final_val_loss"])


def test_the_measured_page_quotes_the_align_records():
    """book/measured.md's align_speed.py and align_compare.py rows: the figures of their records, as
    stored."""
    speed = json.loads((RECORDS / "align_speed.json").read_text())
    row = _measured_row("align_speed.py")
    for name in ("dpo", "grpo"):
        s = speed["steps"][name]
        assert s["ratio_median"] == s["median_s"]["trl"] / s["median_s"]["ours"]
        assert (
            f"{1e3 * s['median_s']['ours']:.1f} ms against {1e3 * s['median_s']['trl']:.1f} ms "
            f"(**{s['ratio_median']:.2f}x faster**" in row
        ), (name, row)
        assert f"{s['ratio_fastest']:.2f}x" in row
    assert f"medians of {speed['repeats']}; load average {speed['load_average'][0]:.1f}" in row
    # the paired per-repeat ratios, as chapter 18 prints
    for name, label in (("dpo", "DPO"), ("grpo", "GRPO")):
        s = speed["steps"][name]
        paired = torch.tensor([t / o for t, o in zip(s["seconds"]["trl"], s["seconds"]["ours"])],
                              dtype=torch.float64)
        p10, p50, p90 = paired.quantile(torch.tensor([0.1, 0.5, 0.9], dtype=torch.float64)).tolist()
        faster = f"faster in {int((paired > 1).sum())} of {len(paired)}"
        assert (f"{label} median {p50:.2f}x, 10-90% {p10:.2f}-{p90:.2f}x, " in row
                and faster in row), (name, row)
    compare = json.loads((RECORDS / "align_compare.json").read_text())
    row = _measured_row("align_compare.py")
    for name, label in (("sft", "SFT"), ("dpo", "DPO"), ("grpo", "GRPO")):
        s = compare["summary"][name]
        runs = [r for r in compare["runs"].values() if r["method"] == name
                and r["reward"] == "exact"
                and r["learning_rate"] == compare["chosen_learning_rate"][name]]
        assert sorted(r["seed"] for r in runs) == s["seeds"] == [0, 1, 2]
        assert abs(s["mean"] - sum(r["test"]["accuracy"] for r in runs) / len(runs)) < 1e-12
        assert f"{label} {s['mean']:.3f} +- {s['std']:.3f}" in row, (name, row)
    assert f"{compare['start']['test']['accuracy']:.3f} of chapter 16's 200 test sums right" in row
    hack = compare["summary"]
    assert (
        f"exact accuracy {hack['grpo-units-hack']['mean']:.3f} against the control's "
        f"{hack['grpo-exact-hack']['mean']:.3f}"
        in row
        and f"lr {compare['hack_learning_rate']:.0e}".replace("e-0", "e-") in row
    )


def test_the_finetune_record_holds_the_benchmarks_runs_and_the_measured_page_quotes_it():
    """Every record of benchmarks/finetune_dates.py is one of its RUNS, keyed and configured as the
    benchmark keys and configures it today (records merged from several branches must not drift);
    book/measured.md's finetune_dates.py row quotes each stored run's held-out exact match (mean ±
    sd over the seeds, n=3 unless stated) and its Shakespeare loss over the old characters, as
    stored."""
    import statistics
    bench = load_benchmark("finetune_dates")
    records = json.loads(bench.RECORDS.read_text())
    by_name = {}
    for key, r in records.items():
        assert r["name"] in bench.RUNS, key
        assert key == f"{r['name']} | seed {r['seed']} | {r['steps']} steps"
        assert {k: r[k] for k in bench.RUNS[r["name"]]} == bench.RUNS[r["name"]], key
        if (r["steps"] == bench.DEFAULT_STEPS[r["task"]]
            and r["n_eval"] == bench.DEFAULT_EVAL[r["task"]]):
            by_name.setdefault(r["name"], []).append(r)
    row = _measured_row("finetune_dates.py")
    for name, runs in by_name.items():
        em = [100 * r["exact_match"] for r in runs]
        old = statistics.mean(r["old_vocab_loss"] for r in runs)
        sd = ((f" ± {statistics.stdev(em):.1f}" if len(em) > 1
               else "") + (f" (n={len(em)})" if len(em) != 3 else ""))
        assert f"`{name}` {statistics.mean(em):.1f}%{sd}, {old:.2f}" in row, (name, row)


def test_the_measured_page_quotes_the_align_budget_sweep_as_recorded():
    """book/measured.md's align_sampling.py row quotes, for each method at 1x, 4x and 16x, the three
    seeds' mean greedy test accuracy of the records chapter 18 prints (align_sampling.json for 1x,
    align_budget.json for 4x and 16x), the start's, and the fairer DPO arm's at its chosen rate."""
    import statistics
    samp = json.loads((RECORDS / "align_sampling.json").read_text())
    sweep = json.loads((RECORDS / "align_budget.json").read_text())
    fair = json.loads((RECORDS / "align_budget_dpo.json").read_text())
    row = _measured_row("align_sampling.py")
    assert sweep["budgets"] == [4, 16] and sweep["start"] == samp["start"]

    def mean_greedy(runs):
        assert sorted(r["seed"] for r in runs) == [0, 1, 2]
        return f"{statistics.mean(statistics.mean(r['test']['greedy']) for r in runs):.3f}"

    assert f"greedy {mean_greedy([samp['start'] | {'seed': s} for s in (0, 1, 2)])}" in row
    for method, label in (("sft", "SFT"), ("dpo", "DPO"), ("grpo", "GRPO"),
                          ("ei", "expert iteration")):
        means = [mean_greedy([r for r in rec["runs"].values()
                              if r["method"] == method and r["budget"] == budget])
                 for budget, rec in ((1, samp), (4, sweep), (16, sweep))]
        assert f"{label} {' / '.join(means)}" in row, (method, means)
    for budget in (4, 16):
        arm = [r for r in fair["runs"].values()
               if r["budget"] == budget and r["learning_rate"] == 1e-4]
        assert f"{budget}x {mean_greedy(arm)}" in row


def test_the_measured_page_quotes_the_counting_runs_as_recorded():
    """book/measured.md's chat_count_probe.py row (issue 54): each arm's range over its seeds of the
    probe's share right and of the development set's letters, the CPU minutes, and the test set's
    score of the two runs scored on it, as the records chapter 17 prints hold them."""
    probe = json.loads((RECORDS / "chat_count_probe_1500.json").read_text())["models"]
    runs = {r["name"].split(":")[0].removeprefix("cpu4-"): r for r in json.loads(
        (RECORDS / "chat_count_first_runs.json").read_text())["runs"]}
    row = _measured_row("chat_count_probe.py")

    def span(values):
        return f"{min(values):.3f}-{max(values):.3f}"

    for label, names in (("control", ["ctlL-s0", "ctlL-s1", "ctlL-s2"]),
                         ("worked", ["wrkL-s0", "wrkL-s1"]),
                         ("worked-all", ["wallL-s0", "wallL-s1", "wallL-s2"])):
        assert f"{label} {span([probe[n]['all_last_number'] for n in names])}" in row, label
    assert f"`chat-char-cpu-4` {probe['shipped']['all_last_number']:.3f}" in row
    assert "control 0.500 in every seed" in row and {
        runs[f"ctlL-s{s}"]["robustness_v2"]["letters"]["score"] for s in range(3)} == {0.5}
    letters = [runs[f"wallL-s{s}"]["robustness_v2"]["letters"]["score"] for s in range(3)]
    assert f"worked-all {span(letters)}" in row
    pairs = [(runs[f"wallL-s{s}"], runs[f"ctlL-s{s}"]) for s in range(3)]
    # the development letters' gain by item, each item's three seeds resampled together
    from course_lib.chat.robustness import load_robustness_set_v2
    from course_lib.evaluation import bootstrap_interval
    letter_items = [k for k, i in enumerate(load_robustness_set_v2()) if i["task"] == "letters"]
    d = [sum(w["v2_replies"][k]["right"] - c["v2_replies"][k]["right"] for w, c in pairs) / 3
         for k in letter_items]
    lo, hi = bootstrap_interval(d)
    assert f"+{sum(d) / len(d):.3f} [{lo:+.3f}, {hi:+.3f}]" in row
    minutes = [r["cpu_minutes"] for n, r in runs.items() if n[:5] in ("ctlL-", "wrkL-", "wallL")]
    assert f"{min(minutes):.1f}-{max(minutes):.1f} CPU minutes" in row
    for name, seed in (("wallL-s1", "worked-all seed 1"), ("ctlL-s2", "control seed 2")):
        v3 = runs[name]["robustness_v3"]["all"]
        lo, hi = v3["interval"]
        assert f"{seed} " in row and f"{v3['score']:.3f} [{lo:.3f}, {hi:.3f}]" in row, name
    # the shipped chat-char-cpu-5 (wallL-s1) against chat-char-cpu-4, paired by test request
    from course_lib.evaluation import paired_comparison
    before = next(r for r in json.loads((RECORDS / "chat_model_runs.json").read_text())["runs"]
                  if r["name"].startswith("chat-gpu-more-s2:"))
    c = paired_comparison(*([float(x["right"]) for x in r["v3_replies"]]
                            for r in (runs["wallL-s1"], before)))
    assert ("as `chat-char-cpu-5`" in row
            and f"{c['diff']:+.3f} [{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}]" in row)


def test_the_measured_page_quotes_the_word_anywhere_runs_as_recorded():
    """book/measured.md's chat_model_runs.py row (issue 54): the --word-anywhere runs' CPU minutes,
    both development sets' spelling and letters ranges against worked-all's, the paired difference
    (each item's seeds resampled together) and the chosen run's version-4 score, as recorded."""
    from course_lib.chat.robustness import load_robustness_set_v2, load_robustness_set_v3
    from course_lib.evaluation import bootstrap_interval, paired_comparison

    record = json.loads((RECORDS / "chat_count_first_runs.json").read_text())
    runs = {r["name"].split(":")[0].removeprefix("cpu4-"): r for r in record["runs"]}
    row = _measured_row("chat_model_runs.py")
    items = load_robustness_set_v2() + load_robustness_set_v3()

    def spell_count(r):
        right = [float(x["right"]) for x in r["v2_replies"] + r["v3_replies"]]
        return [x for x, i in zip(right, items) if i["task"] in ("spelling", "letters")]

    def span(values, digits=3):
        return f"{min(values):.{digits}f}-{max(values):.{digits}f}"

    new, old = ([runs[f"{arm}-s{s}"] for s in range(3)] for arm in ("anyL", "wallL"))
    assert f"{span([r['cpu_minutes'] for r in new], 1)} CPU minutes" in row
    means = [[sum(spell_count(r)) / len(spell_count(r)) for r in arm] for arm in (new, old)]
    assert f"(versions 2 and 3, {len(spell_count(new[0]))}) {span(means[0])}" in row
    assert f"worked-all's {span(means[1])}" in row
    d = [sum(a) / 3 - sum(b) / 3 for a, b in zip(zip(*map(spell_count, new)),
                                                  zip(*map(spell_count, old)))]
    lo, hi = bootstrap_interval(d)
    assert f"by item {sum(d) / len(d):+.3f} [{lo:+.3f}, {hi:+.3f}]" in row
    chosen = max(new, key=lambda r: sum(float(x["right"]) for x in r["v2_replies"]
                                        + r["v3_replies"]))
    assert chosen is runs["anyL-s1"] and "seed 1" in row
    v4 = chosen["robustness_v4"]["all"]
    assert f"{v4['score']:.3f} [{v4['interval'][0]:.3f}, {v4['interval'][1]:.3f}]" in row
    shipped = json.loads((RECORDS / "chat_robustness_v4.json").read_text())["models"][-1]
    c = paired_comparison([float(x["right"]) for x in chosen["v4_replies"]],
                          [float(x["right"]) for x in shipped["v4_replies"]])
    assert (f"`chat-char-cpu-5`'s {shipped['v4']['all']['score']:.3f} (by request "
            f"{c['diff']:+.3f} [{c['interval'][0]:+.3f}, {c['interval'][1]:+.3f}]") in row


def test_the_measured_page_quotes_the_wide_identity_runs_as_recorded():
    """book/measured.md's chat_model_runs.py row (issue 54): the --wide-identity runs' CPU minutes,
    blind identity and in-template identity ranges, the paired blind gain over worked-all (each
    item's seeds resampled together) and the chosen run's test score, as the record holds them."""
    from course_lib.chat.identity import blind_identity_set
    from course_lib.evaluation import bootstrap_interval

    runs = {r["name"].split(":")[0].removeprefix("cpu4-"): r for r in json.loads(
        (RECORDS / "chat_count_first_runs.json").read_text())["runs"]}
    shipped = next(r for r in json.loads((RECORDS / "chat_model_runs.json").read_text())["runs"]
                   if r["name"].startswith("chat-gpu-more-s2:"))
    row = _measured_row("chat_model_runs.py")

    def span(values, digits=3):
        return f"{min(values):.{digits}f}-{max(values):.{digits}f}"

    wide = [runs[f"widL-s{s}"] for s in range(3)]
    base = [runs[f"wallL-s{s}"] for s in range(3)]
    assert f"{span([r['cpu_minutes'] for r in wide], 1)} CPU minutes" in row
    assert f"blind identity set {span([r['identity_blind']['score'] for r in wide])}" in row
    assert f"worked-all {span([r['identity_blind']['score'] for r in base])}" in row
    assert f"`chat-char-cpu-4` {shipped['identity_blind']['score']:.3f}" in row
    now = runs[json.loads((RECORDS / "chat_count_first_runs.json").read_text())["roles"][
        "shipped"].split(":")[0].removeprefix("cpu4-")]
    assert f"`chat-char-cpu-5`, which ships now, {now['identity_blind']['score']:.3f}" in row
    assert f"template {span([r['in_template']['identity']['score'] for r in wide])}" in row
    n = len(blind_identity_set())
    d = [sum(w["identity_blind_replies"][k]["right"] - c["identity_blind_replies"][k]["right"]
             for w, c in zip(wide, base)) / 3 for k in range(n)]
    lo, hi = bootstrap_interval(d)
    assert f"+{sum(d) / n:.3f} [{lo:+.3f}, {hi:+.3f}]" in row
    v3 = runs["widL-s2"]["robustness_v3"]["all"]
    assert f"seed 2: {v3['score']:.3f} [{v3['interval'][0]:.3f}, {v3['interval'][1]:.3f}]" in row
    assert max(wide, key=lambda r: r["robustness_v2"]["all"]["score"]) is wide[2]


def test_the_measured_page_quotes_the_scale_record():
    """measured.md's Scale table is scale_speed.json's rows (the record chapter 12 prints), each
    figure as the record has it, and names the record's command and CPU."""
    record = json.loads((RECORDS / "scale_speed.json").read_text())
    page = MEASURED.read_text()
    section = page[page.index("## Scale"):page.index("## The CPU preset against")]
    assert record["command"] in section and record["cpu"].split(",")[0] in section
    table = [line for line in section.splitlines() if line.startswith("| ") and "process" in line]
    assert table == [f"| {r['way'].replace('torch.compile', '`torch.compile`')} | "
                     f"{r['tokens_per_s']:,.0f} | {r['ms_per_step']:.1f} "
                     f"({r['ms_per_step_min']:.1f}-{r['ms_per_step_max']:.1f}) | "
                     f"{r['vs_eager_fp32']:.2f}x | {r['warmup_s']:.1f} |" for r in record["rows"]]
    assert (f"{record['warmup_steps']} warm-up steps, then {record['rounds']} rounds of "
            f"{record['steps']} timed steps") in section


def test_the_measured_page_quotes_the_law_bootstrap_record():
    """measured.md's scaling_law_bootstrap.py row: the four 95% intervals as the record's values
    give them, and the record's CPU."""
    import numpy as np

    from course_lib.scaling import interval

    record = json.loads((RECORDS / "scaling_law_bootstrap.json").read_text())
    row = _measured_row("scaling_law_bootstrap.py")
    values = np.array(record["values"])
    (a0, a1), (b0, b1), (s0, s1), (p0, p1) = (interval(values[:, j]) for j in range(4))
    assert (f"alpha {a0:.3f}-{a1:.3f}, beta {b0:.3f}-{b1:.3f}, a {s0:.3f}-{s1:.3f}, the held-out "
            f"run's prediction {p0:.3f}-{p1:.3f}") in row, row
    assert record["cpu"].split(",")[0] in row and record["command"] in row


def test_chapter_12_quotes_the_scale_records_data_parallel_ratios():
    """Chapter 12's prose on data parallelism quotes scale_speed.json's two ratios (two processes
    of one thread, one process of one thread, against one process of two threads)."""
    record = json.loads((RECORDS / "scale_speed.json").read_text())
    ratio = {r["way"]: r["vs_eager_fp32"] for r in record["rows"]}
    nb = json.loads((ROOT / "book" / "ch12_training_at_scale.ipynb").read_text())
    prose = " ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")
    prose = " ".join(prose.split())
    assert (f"two processes of one thread each "
            f"{ratio['torchrun, 2 processes x 1 thread (gloo)']:.2f}x as fast") in prose
    one_thread = ratio["eager fp32, 1 process x 1 thread"]
    assert f"one process of one thread was {one_thread:.2f}x" in prose


def test_chapter_17_reads_its_more_steps_cell_as_printed():
    """Chapter 17's reading of "more steps on the same data" quotes that cell's stored output: the
    control's by-item differences with their intervals and counts, identity's interval with its
    phrasings resampled, and the seed-by-seed scores it names (the 2026-11-29 re-review's
    remaining item: nothing tied these figures to the cell)."""
    cells = json.loads((ROOT / "book" / "ch17_chat.ipynb").read_text())["cells"]
    i = next(i for i, c in enumerate(cells) if c["cell_type"] == "code"
             and "".join(c["source"]).startswith("# More steps on the same data"))
    out = "".join("".join(o.get("text", "")) for o in cells[i]["outputs"])
    prose = " ".join("".join(cells[i + 1]["source"]).replace("\u2212", "-").split())
    pair = r"(\S+) (\[\S+, \S+\]) (\d+)/(\d+)"
    dev = re.search(r"dev \(v2\)\s+" + pair, out)
    assert f"{dev[1]} {dev[2]} by item ({dev[3]} better, {dev[4]} worse)" in prose
    identity = re.search(r"identity\s+" + pair + r"; 8 phrasings resampled (\[\S+, \S+\])", out)
    assert (f"{identity[1]} {identity[2]} ({identity[3]} conversations better, "
            f"{identity[4]} worse)") in prose
    assert f"([{identity[5][1:-1]}])" in prose
    rows = {m[0]: m[1:] for m in re.findall(
        r"^(\S+ -> \S+)\s+([\d.]+) ->([\d.]+)\s+([\d.]+) ->([\d.]+)", out, re.M)}
    seed = [rows[f"ctl-s{s} -> ctlL-s{s}"] for s in range(3)]
    assert (f"from {seed[0][2]} to {seed[0][3]} in one seed and not in the other two "
            f"({seed[1][2]} to {seed[1][3]}, {seed[2][2]} to {seed[2][3]})") in prose
    worked = rows["worked-s1 -> wrkL-s1"]
    assert f"went from {worked[0]} to {worked[1]} in one of its two seeds" in prose


def _code_output(cells, start: str) -> str:
    """A chapter code cell's stored text, the cell found by the start of its source."""
    cell = next(c for c in cells if c["cell_type"] == "code"
                and "".join(c["source"]).startswith(start))
    return "".join("".join(o.get("text", "")) for o in cell["outputs"])


def test_chapter_17_reads_its_identity_by_phrasing_cell_as_printed():
    """Chapter 17's reading of identity in template, phrasing by phrasing, quotes that cell's
    stored output and the shipped model's and version 4's cells (the cell reads records only and
    was spliced in from another host: its review and re-review, 2026-11-29)."""
    from course_lib.chat.phrasing import ONES  # small numbers in words

    cells = json.loads((ROOT / "book" / "ch17_chat.ipynb").read_text())["cells"]
    start = "# Identity in template, phrasing by phrasing"
    i = next(i for i, c in enumerate(cells) if c["cell_type"] == "code"
             and "".join(c["source"]).startswith(start))
    out = _code_output(cells, start)
    prose = " ".join("".join(cells[i + 1]["source"]).split())
    n_runs = int(re.search(r"(\d+) phrasings, (\d+) runs", out)[2])
    table = {m[0]: tuple(map(int, m[1:])) for m in re.findall(
        r"^  '([^']+)'\s+(\d+)\s+(\d+)\s+(\d+)$", out, re.M)}
    asked, _, none = table.pop("And you are?")
    full = [row[1] for row in table.values()]
    assert len(table) == 7
    assert (f"by at least {min(full)} of the {n_runs} runs, {ONES[sum(f >= 32 for f in full)]} "
            f"of them by 32 or more") in prose
    assert f"The other {none} runs answer it wrong in every one of its {asked}" in prose
    assert re.search(r"^  chat-char-cpu-3 \(seed 1337\).*start\s+8\s", out, re.M)
    assert "by one run, `chat-char-cpu-3`" in prose
    more = re.search(r"the (\d+) runs trained with --more-phrasings: right in 0 of the "
                     r"phrasing's \d+ in each", out)
    assert f"the {more[1]} trained with `--more-phrasings` among them" in prose
    kept = re.search(r"its replies in the (\d+) runs that kept them: '([^']+)' \d+ times$", out,
                     re.M)
    assert f"the {kept[1]} that kept their replies all with `{kept[2]}`" in prose
    most = re.search(r"at most (\d+)/(\d+) = ([\d.]+)", out)
    assert f"at most {most[1]} of {most[2]}, {most[3]}" in prose
    # the runs from chat-char-cpu-3, without and with the added phrasings, and from the base
    alone = re.search(r"its conversations alone, seeds 0-2\s+(\d) (\d) (\d)", out).groups()
    [right] = [x for x in alone if x != "0"]
    assert "nearly by one of the three" in prose and f"({right} of {asked})" in prose
    assert (f"one of three seeds answered it right in {right} of its {asked} conversations "
            "without") in prose
    with_more = re.findall(r"--more-phrasings, seeds 0-2\s+(\d) (\d) (\d)", out)
    assert len(with_more) == 2 and all(x == "0" for row in with_more for x in row)
    assert "and none of three with it" in prose and "with it, none of three" in prose
    by_run = out.split("; identity in template\n")[1].split("\nthe ")[0]  # the run-by-run rows
    scores = [float(x) for x in re.findall(r"\b0\.\d\d\b", by_run)]
    assert f"ranges from {min(scores):.2f} to {max(scores):.2f} in the run-by-run rows" in prose
    # the shipped model's misses and blind identity score, version 4's identity row
    ship = _code_output(cells, "# The model that ships, chat-char-cpu-5")
    line = re.search(r"^in template, identity, wrong: (.*)$", ship, re.M)[1]
    wrong = {q: int(n) for q, n in re.findall(r"'([^']+)' -> [^;(]+\((\d+)\)", line)}
    assert f"it is {wrong['And you are?']} of the {sum(wrong.values())} misses" in prose
    blind = re.search(r"^blind identity set\s+\S+ \[\S+ \S+\]\s+(\S+ \[\S+ \S+\])$", ship,
                      re.M)[1]
    assert f"the blind identity set, {blind} on 64 questions" in prose
    v4 = re.search(r"^  identity\s+.*(\d\.\d\d \[\S+ \S+\])\s+\S+\s+(\d+)$",
                   _code_output(cells, "# Version 4: 85 requests"), re.M)
    assert f"version 4's {v4[2]} identity requests, {v4[1]}" in prose
