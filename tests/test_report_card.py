"""course_lib.evaluation.report_card: a task's score with its interval and chance, the report card
(tasks a tokenizer cannot encode are skipped, or an error when named), its table and JSON, and
`python -m course_lib eval` on every decoder kind the project writes."""
import json
import os
import re

import pytest
import torch

from course_lib.bigram import BigramLanguageModel
from course_lib.checkpoint import save_checkpoint
from course_lib.cli import main
from course_lib.data import load_text
from course_lib.evaluation.tasks import load_task
from course_lib.model import GPT, GPTConfig
from course_lib.evaluation.report_card import (cannot_encode, evaluate_checkpoint, evaluate_task,
                                               first_word, format_card, heldout_text, report_card)
from course_lib.tokenizers import CharTokenizer, train_tokenizer

CHARS = CharTokenizer.from_text(load_text())


def tiny(vocab_size: int = 65, **options) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=vocab_size, block_size=32, n_layer=1, n_head=2, n_embd=16,
                         dropout=0.0, **options)).eval()


def test_a_choice_task_reports_acc_acc_norm_interval_and_chance():
    row = evaluate_task(tiny(), CHARS, load_task("next-line"), limit=6, shots=1)
    assert row["metric"] == "acc" and row["n"] == 6 and row["chance"] == 0.25 and row["shots"] == 1
    assert (row["score"] == sum(row["per_item"]) / 6
            and row["interval"][0] <= row["score"] <= row["interval"][1])
    assert len(row["per_item_norm"]) == 6 and row["acc_norm"] == sum(row["per_item_norm"]) / 6


def test_a_generate_task_reports_exact_match():
    row = evaluate_task(tiny(), CHARS, load_task("next-word"), limit=4, shots=2)
    assert (row["metric"] == "exact_match" and len(row["outputs"]) == 4
            and set(row["per_item"]) <= {0.0, 1.0})
    with pytest.raises(ValueError, match="20 training items for few-shot examples, not 50"):
        evaluate_task(tiny(), CHARS, load_task("next-word"), limit=1, shots=50)


def test_first_word():
    assert (first_word("  thank you") == "thank" and first_word("stoop'd,") == "stoop'd"
            and first_word("!") == "")


def test_tasks_the_tokenizer_cannot_encode_are_skipped_or_refused():
    assert cannot_encode(CHARS, load_task("arithmetic")) == ("the tokenizer cannot write '+', '0', "
                                                             "'1', '2', '4', '5', '6', '7', '8', "
                                                             "'9' and '='")
    assert cannot_encode(CHARS, load_task("next-line")) is None
    card = report_card(tiny(), CHARS, limit=2, heldout_chars=500)
    skipped = {r["task"] for r in card["tasks"] if "skipped" in r}
    assert skipped == {"dates", "arithmetic", "gsm8k-style"}
    table = format_card(card)
    assert "0.250" in table and "bits per byte" in table
    # each reason whole (review 2026-11-28 E1, rows 60-62: they were cut at 60 characters, "it is
    # not in t")
    assert (
        "dates         skipped: the tokenizer cannot write '/', '0', '1', '2', '4', '5', '6', '7', "
        "'8', '9' and '='\n" in table
    )
    with pytest.raises(ValueError, match="cannot encode task dates"):
        report_card(tiny(), CHARS, tasks="next-line,dates", limit=2, heldout_chars=500)


def test_the_card_names_its_baselines_and_says_what_each_task_asks():
    # review 2026-11-28 16-M5: "chance" of a generative task is its majority answer; a student reads
    # what each task is from the card itself; acc_norm has its interval too
    card = report_card(tiny(), CHARS, tasks="next-line,next-word", limit=4, heldout_chars=300)
    table = format_card(card)
    rows = {line.split()[0]: line for line in table.splitlines() if line[:1].strip()}
    assert (rows["next-line"].rstrip().endswith("0.250 chance    4")
            and "majority" in rows["next-word"])
    acc_norm = next(line for line in table.splitlines() if line.lstrip().startswith("acc_norm"))
    assert acc_norm.count("[") == 1 and "chance" in acc_norm
    assert "what each task asks:" in table and load_task("next-word").description in table


def test_the_encodability_check_covers_the_few_shot_solutions():
    # chapter 15's fine-tunes know the digits, not '#' or '*': gsm8k-style runs with no shots, and
    # with shots its worked solutions ("12 - 5 = 7. #### 7") are refused up front, before any work
    from course_lib.finetune import TASK_CHARS, extend_tokenizer
    tok = extend_tokenizer(CHARS, TASK_CHARS)
    task = load_task("gsm8k-style")
    assert cannot_encode(tok, task) is None
    assert cannot_encode(tok, task, shots=2) == "the tokenizer cannot write '#' and '*'"
    card = report_card(tiny(tok.vocab_size), tok, limit=1, shots=2, heldout_chars=300)
    assert "skipped" in {r["task"]: r for r in card["tasks"]}["gsm8k-style"]


def test_a_byte_level_bpe_model_encodes_every_task():
    tok = train_tokenizer({"type": "bpe", "vocab_size": 260}, load_text()[:3000])
    card = report_card(tiny(tok.vocab_size), tok, tasks="next-line,gsm8k-style,dates", limit=1,
                       heldout_chars=300)
    assert not any("skipped" in r for r in card["tasks"]) and card["bits_per_byte"] > 0


def test_heldout_text_is_after_the_training_split():
    text = load_text()
    assert text.index(heldout_text(1000)) > 0.9 * len(text)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eval")
    torch.manual_seed(0)
    save_checkpoint(folder / "gpt.pt", tiny(), tokenizer=CHARS)
    save_checkpoint(folder / "rope.pt",
                    tiny(norm="rmsnorm", rope_theta=10000.0, mlp="swiglu", n_kv_head=1),
                    tokenizer=CHARS)
    save_checkpoint(folder / "bigram.pt", BigramLanguageModel(65, block_size=8), tokenizer=CHARS)
    return folder


@pytest.mark.parametrize("name", ["gpt", "rope", "bigram"])
def test_the_eval_command_prints_the_card_and_writes_json(checkpoints, name, tmp_path, capsys,
                                                          monkeypatch):
    import course_lib.evaluation.report_card
    # a fast test; the default is 20,000
    monkeypatch.setattr(course_lib.evaluation.report_card, "HELDOUT_CHARS", 1500)
    out = tmp_path / "card.json"
    argv = ["eval", "--checkpoint", str(checkpoints / f"{name}.pt"), "--tasks",
            "next-line,next-word", "--limit", "3", "--json", str(out), "--device", "cpu"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert ("next-line" in printed.out and "exact_match" in printed.out
            and f"wrote {out}" in printed.out)
    assert "1,500 characters" in printed.out
    card = json.loads(out.read_text())
    assert ([r["task"] for r in card["tasks"]] == ["next-line", "next-word"]
            and card["bits_per_byte"] > 0)
    assert all(len(r["per_item"]) == 3 and "interval" in r and "chance" in r for r in card["tasks"])


def test_evaluate_checkpoint_checks_its_arguments_before_loading(tmp_path):
    with pytest.raises(ValueError, match="unknown task nope"):
        evaluate_checkpoint(tmp_path / "missing.pt", tasks="nope")
    with pytest.raises(ValueError, match="--limit must be at least 1"):
        evaluate_checkpoint(tmp_path / "missing.pt", limit=0)
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        evaluate_checkpoint(tmp_path / "missing.pt")


@pytest.fixture
def no_evaluation(monkeypatch):
    """eval must refuse a bad --json before it loads or scores anything."""
    import course_lib.evaluation.report_card

    def fail(*args, **kwargs):
        raise AssertionError("the --json path was checked after the work")

    monkeypatch.setattr(course_lib.evaluation.report_card, "load_model", fail)


def bad_json_paths(folder, ckpt):
    """Review rows 1-2 and 66-72 (2026-11-28): the checkpoint itself, a device, a folder, a file
    used as a folder, an overlong name; and the message each gets."""
    (folder / "adir").mkdir()
    (folder / "small.txt").write_text("x")
    os.mkfifo(folder / "pipe")
    return {str(ckpt): "is this command's input", str(folder / "pipe"): "is not a regular file",
            str(folder / "adir"): "is a folder: name a file in it",
            str(folder / "small.txt" / "card.json"): "small.txt is a file, not a folder",
            str(folder / ("x" * 300 + ".json")): "bytes, more than this file system's"}


def test_eval_refuses_a_bad_json_path_before_any_work_and_writes_nothing(checkpoints, tmp_path,
                                                                         capsys,
                                                                          no_evaluation):
    ckpt = tmp_path / "ckpt_copy.pt"
    ckpt.write_bytes((checkpoints / "gpt.pt").read_bytes())
    before = sorted(os.listdir(tmp_path)), ckpt.read_bytes()
    for path, why in bad_json_paths(tmp_path, ckpt).items():
        assert main(["eval", "--checkpoint", str(ckpt), "--limit", "3", "--json", path]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"error: --json {path} ") and why in err and "\n" not in err
    assert ckpt.read_bytes() == before[1]  # row 1: the checkpoint is intact
    # no .tmp left
    assert sorted(os.listdir(tmp_path)) == sorted(before[0] + ["adir", "small.txt", "pipe"])
    assert os.listdir(tmp_path / "adir") == []


def test_eval_refuses_too_many_shots_before_any_work(checkpoints, capsys, no_evaluation,
                                                     monkeypatch):
    """Review row 65 (E4): --shots beyond the tasks' training items was refused after the
    bits-per-byte pass (and, with every task, after the tasks before the short one); now before the
    model is loaded."""
    ckpt = str(checkpoints / "gpt.pt")
    for argv, phrase in ((["--shots", "100000"],
                          "task next-line has 20 training items for few-shot examples, not "
                          "100000: give --shots 20 or fewer"),
                         (["--tasks", "next-word", "--shots", "21"],
                          "task next-word has 20 training items .*not 21: "
                          "give --shots 20 or fewer, or leave it out of --tasks")):
        assert main(["eval", "--checkpoint", ckpt, "--limit", "3", *argv]) == 2
        err = capsys.readouterr().err
        assert re.fullmatch(f"error: {phrase}" + chr(10), err), err
    # a task the tokenizer encodes, with too few: before the bits per byte
    import course_lib.evaluation.report_card

    def fail(*args, **kwargs):
        raise AssertionError("shots were checked after the work")

    monkeypatch.setattr(course_lib.evaluation.report_card, "bits_per_byte", fail)
    tok = train_tokenizer({"type": "bpe", "vocab_size": 260}, load_text()[:3000])
    with pytest.raises(ValueError, match="task gsm8k-style has 2 training items .*not 3: give "
                                         "--shots 2 or fewer, "
                       "or name other tasks in --tasks"):
        report_card(tiny(tok.vocab_size), tok, limit=1, shots=3, heldout_chars=300)


def test_eval_json_dash_writes_the_card_to_stdout_and_the_table_to_stderr(checkpoints, tmp_path,
                                                                          capsys, monkeypatch):
    import course_lib.evaluation.report_card
    monkeypatch.setattr(course_lib.evaluation.report_card, "HELDOUT_CHARS", 1500)
    monkeypatch.chdir(tmp_path)
    argv = ["eval", "--checkpoint", str(checkpoints / "gpt.pt"), "--tasks", "next-word", "--limit",
            "2", "--json", "-"]
    assert main(argv) == 0
    printed = capsys.readouterr()
    assert json.loads(printed.out)["tasks"][0]["task"] == "next-word"  # stdout is the JSON alone
    # row 69: no file named "-"
    assert "report card" in printed.err and list(tmp_path.iterdir()) == []


def test_eval_json_through_a_symlink_writes_its_target(checkpoints, tmp_path, monkeypatch):
    import course_lib.evaluation.report_card
    monkeypatch.setattr(course_lib.evaluation.report_card, "HELDOUT_CHARS", 1500)
    (tmp_path / "real.json").write_text("old")
    (tmp_path / "link.json").symlink_to("real.json")
    argv = ["eval", "--checkpoint", str(checkpoints / "gpt.pt"), "--tasks", "next-word", "--limit",
            "2", "--json", str(tmp_path / "link.json")]
    assert main(argv) == 0
    assert (tmp_path / "link.json").is_symlink()  # row 70: the link is kept, its target written
    assert json.loads((tmp_path / "real.json").read_text())["tasks"][0]["task"] == "next-word"


def test_eval_json_is_strict_json_when_bits_per_byte_are_infinite(checkpoints, tmp_path, capsys,
                                                                  monkeypatch):
    """Review row 63 (E2): a counting bigram with smoothing 0 has infinite bits per byte; the table
    says inf, and the JSON file held the token Infinity, which JSON.parse and jq do not read."""
    import course_lib.evaluation.report_card
    monkeypatch.setattr(course_lib.evaluation.report_card, "bits_per_byte", lambda *a,
                        **k: float("inf"))
    out = tmp_path / "card.json"
    argv = ["eval", "--checkpoint", str(checkpoints / "bigram.pt"), "--tasks", "next-word",
            "--limit", "2", "--json", str(out)]
    assert main(argv) == 0
    assert (
        "bits per byte (held-out tiny Shakespeare, 20,000 characters): inf"
        in capsys.readouterr().out
    )

    def refuse(name):
        raise AssertionError(f"not JSON: {name}")

    # Infinity, -Infinity and NaN are refused
    card = json.loads(out.read_text(), parse_constant=refuse)
    assert card["bits_per_byte"] == "Infinity" and float(card["bits_per_byte"]) == float("inf")
    strict = course_lib.evaluation.report_card._strict_json({"a": [float("nan"), -float("inf"),
                                                                   1.5], "b": (2, "x")})
    assert strict == {"a": ["NaN", "-Infinity", 1.5], "b": [2, "x"]}


def test_a_chat_models_card_adds_the_robustness_sets_scored_by_their_rules():
    """course_lib.chat.robustness.card_rows: each set's first requests asked greedily, the share
    right by each request's rule, and as baseline the best single constant reply; nothing for a
    model whose tokenizer is not a chat tokenizer."""
    from chat_helpers import TOK, Cycling, ids_of
    from course_lib.chat.robustness import CARD_SETS, card_rows, is_right
    from course_lib.chat.template import END
    model = Cycling(ids_of("3", END))  # answers "3" to everything
    rows = card_rows(model, TOK, limit=8)
    assert [r["task"] for r in rows] == list(CARD_SETS) == ["chat-v2", "chat-v3"]
    for row, (load, _) in zip(rows, CARD_SETS.values()):
        items = load()[:8]
        assert row["n"] == 8 and row["replies"] == ["3"] * 8
        assert row["per_item"] == [float(is_right(i, "3")) for i in items]
        assert row["score"] == sum(row["per_item"]) / 8 <= row["chance"]  # "3" is one constant
        assert row["baseline"] == "constant" and row["interval"][0] <= row["score"]
    assert "chat-v3" in format_card({"model": "m", "bits_per_byte": None, "heldout_chars": 0,
                                     "bits_per_byte_skipped": "-", "tasks": rows})
    assert card_rows(tiny(), CHARS, limit=2) == []


def test_eval_on_the_shipped_chat_model_prints_the_robustness_sets_unless_tasks_are_named(
        tmp_path, capsys, monkeypatch):
    import course_lib.evaluation.report_card
    monkeypatch.setattr(course_lib.evaluation.report_card, "HELDOUT_CHARS", 1500)
    from course_lib.chat.engine import CHAT_MODEL_PATH as CHAT_CPU_PATH
    out = tmp_path / "card.json"
    assert main(["eval", "--checkpoint", str(CHAT_CPU_PATH), "--limit", "2", "--json",
                 str(out)]) == 0
    tasks = [r["task"] for r in json.loads(out.read_text())["tasks"]]
    assert tasks[-2:] == ["chat-v2", "chat-v3"] and "blind test set" in capsys.readouterr().out
    assert main(["eval", "--checkpoint", str(CHAT_CPU_PATH), "--tasks", "arithmetic",
                 "--limit", "2", "--json", str(tmp_path / "named.json")]) == 0
    named = json.loads((tmp_path / "named.json").read_text())["tasks"]
    assert [r["task"] for r in named] == ["arithmetic"]
