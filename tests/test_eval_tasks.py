"""course_lib.evaluation.tasks: every shipped task is rebuilt by its code into the same bytes (and
SHA-256), its test items are held out, its chance level is right, and a damaged file is refused."""
import hashlib
import re

import pytest

from course_lib.data import load_text
from course_lib.dates import date_split_days
from course_lib.evaluation.tasks import (BUILDERS, HELDOUT_START, TASK_NAMES, TASK_SHA256,
                                         TASKS_DIR, check_task_names,
                                   load_task, task_bytes, write_tasks)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_regenerating_a_task_gives_the_stored_bytes_and_hash(name):
    data = task_bytes(BUILDERS[name]())
    assert data == (TASKS_DIR / f"{name}.json").read_bytes()
    assert hashlib.sha256(data).hexdigest() == TASK_SHA256[name]


def test_write_tasks_returns_the_hashes(tmp_path):
    assert write_tasks(tmp_path) == TASK_SHA256


def test_a_damaged_task_file_is_refused(tmp_path):
    write_tasks(tmp_path)
    path = tmp_path / "next-line.json"
    path.write_bytes(path.read_bytes().replace(b'"gold": 0', b'"gold": 1', 1))
    with pytest.raises(ValueError, match="SHA-256 .* damaged or was edited"):
        load_task("next-line", tmp_path)
    with pytest.raises(FileNotFoundError, match="missing"):
        load_task("dates", tmp_path / "nowhere")


def test_unknown_task_names_are_one_error():
    assert check_task_names("dates, next-line") == ["dates", "next-line"]
    with pytest.raises(ValueError, match="unknown task mmlu: choose from next-line"):
        check_task_names("mmlu,dates")
    with pytest.raises(ValueError, match="none given"):
        check_task_names(",")
    with pytest.raises(ValueError,
                       match="task next-word is named more than once: name each task once"):
        # review 2026-11-28 row 64 (E3): it was scored twice
        check_task_names("next-word, dates,next-word")


@pytest.mark.parametrize("name", TASK_NAMES)
def test_every_task_states_its_chance_and_is_well_formed(name):
    task = load_task(name)
    assert 0 < task.chance <= 0.25 and task.test and task.train
    if task.kind == "choice":
        assert task.chance == 0.25
        for item in task.test + task.train:
            assert len(item["choices"]) == 4 == len(set(item["choices"])) and 0 <= item["gold"] < 4
        golds = [i["gold"] for i in task.test]
        # the gold's place is no cue
        assert max(golds.count(g) for g in range(4)) / len(golds) < 0.35
    else:
        answers = [i["answer"] for i in task.test]
        assert task.chance == max(answers.count(a) for a in answers) / len(answers)


def test_shakespeare_test_items_are_held_out_and_few_shot_items_are_not():
    text = load_text()
    cut = int(HELDOUT_START * len(text))
    for item in load_task("next-line").test[:50]:
        assert text.index(item["context"] + item["choices"][item["gold"]]) >= cut
    for item in load_task("next-line").train[:20]:
        assert text.index(item["context"] + item["choices"][item["gold"]]) < 0.9 * len(text)
    for item in load_task("next-word").test[:50]:
        assert text.index(item["prompt"] + item["answer"]) >= cut
    for item in load_task("next-speaker").test[:50]:
        gold = item["choices"][item["gold"]]
        assert text.index(item["context"] + gold + "\n") >= cut


def test_dates_and_arithmetic_hold_out_their_test_items():
    held_out = {int(d) for d in date_split_days(0)["val"]}
    import datetime
    first = datetime.date(1950, 1, 1)
    assert all((datetime.date.fromisoformat(i["answer"]) - first).days in held_out
               for i in load_task("dates").test)
    arithmetic = load_task("arithmetic")
    assert not {i["prompt"] for i in arithmetic.test} & {i["prompt"] for i in arithmetic.train}
    assert all(eval(i["prompt"][:-1]) == int(i["answer"]) for i in arithmetic.test)


def test_gsm8k_style_solutions_compute_their_answers():
    task = load_task("gsm8k-style")
    assert len(task.test) == 10 and task.parser == "number"
    for item in task.test + task.train:
        expression, result = re.match(r"(.+) = (\d+)\. #### (\d+)", item["solution"]).group(1, 2)
        assert eval(expression) == int(result) == int(item["answer"])
