"""course_lib.train_config: TrainConfig and its rules (its own module since issue 45's split of
train.py; bad values of every field are rows of test_bad_input_api.py)."""
import pytest

import course_lib.train as train
from course_lib.train_config import TRAIN_CONFIG_RULES, TrainConfig


def test_train_names_the_same_config_and_rules():
    assert train.TrainConfig is TrainConfig and train.TRAIN_CONFIG_RULES is TRAIN_CONFIG_RULES


def test_every_field_has_a_rule():
    assert set(TrainConfig.__dataclass_fields__) == set(TRAIN_CONFIG_RULES)


def test_a_decay_that_would_climb_is_refused():
    with pytest.raises(ValueError, match=r"min_lr \(0.01\) is above learning_rate \(0.001\).*"
                                         r"e.g. min_lr=0.0001"):
        TrainConfig(learning_rate=1e-3, min_lr=1e-2)
    assert TrainConfig(learning_rate=1e-3, min_lr=1e-2, schedule="constant").min_lr == 1e-2


def test_checkpoints_follow_the_evaluations_unless_told():
    assert TrainConfig(eval_interval=50).save_every == 50
    assert TrainConfig(eval_interval=50, checkpoint_interval=0).save_every == 0


def test_from_dict_refuses_an_unknown_field():
    assert TrainConfig.from_dict({"max_iters": 7}).max_iters == 7
    with pytest.raises(ValueError, match="unknown TrainConfig field"):
        TrainConfig.from_dict({"max_iter": 7})
