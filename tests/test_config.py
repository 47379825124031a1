"""course_lib.config: the conventions every config class shares (Rule tables, to_dict/from_dict,
values parsed from text, overrides) and the command line's ``--set KEY=VALUE`` grammar."""
from dataclasses import dataclass

import numpy as np
import pytest
import torch
from hypothesis import given, strategies as st

from course_lib.config import (Rule, apply_overrides, apply_resume_overrides, check_fields,
                               config_from_dict, config_to_dict, parse_value, settings_from_pairs,
                               split_settings)
from course_lib.presets import get_preset

RULES = {"n": Rule(int, 1), "rate": Rule(float, 0.0, 1.0, "(]"), "flag": Rule(bool),
         "mode": Rule(str, choices=("a", "b")), "limit": Rule(int, 0)}


@dataclass
class Toy:
    n: int = 2
    rate: float = 0.5
    flag: bool = False
    mode: str = "a"
    limit: int | None = None

    def __post_init__(self):
        check_fields(self, RULES)


def test_check_fields_converts_to_plain_types_and_names_the_field_the_rule_and_the_value():
    toy = Toy(n=np.int64(3), rate=torch.tensor(0.25).item(), limit=None)
    assert type(toy.n) is int and toy.n == 3 and toy.limit is None
    with pytest.raises(TypeError, match=r"Toy.n must be an integer >= 1, got 2.0 of type float"):
        Toy(n=2.0)
    with pytest.raises(ValueError, match=r"Toy.rate must be a finite number in \(0, 1\], got 0"):
        Toy(rate=0)
    with pytest.raises(TypeError, match="Toy.flag must be True or False"):
        Toy(flag=1)
    with pytest.raises(TypeError, match="Toy.n must be an integer"):
        Toy(n=True)  # a bool is never a count
    with pytest.raises(ValueError, match="Toy.mode must be one of 'a', 'b', got 'c'"):
        Toy(mode="c")


@given(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["[]", "[)", "(]", "()"]))
def test_a_rule_holds_exactly_inside_its_bounds(value, bounds):
    rule = Rule(float, 0.0, 1.0, bounds)
    low_ok = value > 0 if bounds[0] == "(" else value >= 0
    high_ok = value < 1 if bounds[1] == ")" else value <= 1
    assert rule.holds(value) == (np.isfinite(value) and low_ok and high_ok)


def test_to_dict_and_from_dict_round_trip_and_an_unknown_key_is_refused():
    toy = Toy(n=4, mode="b")
    assert config_from_dict(Toy, config_to_dict(toy)) == toy
    with pytest.raises(ValueError, match=r"unknown Toy field\(s\) 'm'; valid fields: n, rate, "
                                         r"flag, mode, limit"):
        config_from_dict(Toy, {"m": 1})


def test_values_are_parsed_from_text_to_the_field_type():
    assert parse_value("3", int, "n") == 3 and parse_value("1e-3", float, "rate") == 1e-3
    assert parse_value("yes", bool, "flag") is True and parse_value("off", bool, "flag") is False
    assert (parse_value("none", int | None, "limit") is None
            and parse_value("7", int | None, "limit") == 7)
    with pytest.raises(ValueError, match="n='three': expected a value of type int"):
        parse_value("three", int, "n")
    with pytest.raises(ValueError, match="flag='maybe'"):
        parse_value("maybe", bool, "flag")


def test_overrides_parse_text_keep_values_validate_and_refuse_forbidden_fields():
    assert apply_overrides(Toy(), {"n": "5", "rate": 0.75}) == Toy(n=5, rate=0.75)
    with pytest.raises(ValueError, match="Toy.n must be an integer >= 1, got 0"):
        apply_overrides(Toy(), {"n": "0"})
    with pytest.raises(ValueError, match="n cannot be set: it is fixed"):
        apply_overrides(Toy(), {"n": "5"}, forbidden={"n": "it is fixed"})


def test_settings_are_text_or_values_and_an_unknown_key_lists_the_valid_ones():
    preset = get_preset("shakespeare-char-cpu")
    model, train = split_settings({"n_layer": 6, "learning_rate": "3e-4"}, preset.model,
                                  preset.train)
    assert model == {"n_layer": 6} and train == {"learning_rate": "3e-4"}
    assert settings_from_pairs(["n_layer=6",
                                " dropout = 0.1 "]) == {"n_layer": "6", "dropout": "0.1"}
    with pytest.raises(ValueError, match="--set n_layers: unknown setting. Model settings: "
                                         "vocab_size, block_size, n_layer.*Training settings: "
                                         "max_iters"):
        split_settings({"n_layers": 6}, preset.model, preset.train)
    with pytest.raises(ValueError, match="--set 'n_layer': write KEY=VALUE"):
        settings_from_pairs(["n_layer"])


def test_a_resume_may_change_only_the_keys_it_is_told_and_others_only_to_their_stored_value():
    stored = Toy(n=3, rate=0.25)
    assert apply_resume_overrides(stored, {"n": "3", "rate": "0.25", "limit": "9"}, {"limit"},
                                  "ckpt.pt") == \
        Toy(n=3, rate=0.25, limit=9)  # as stored (text parsed first), and the one that may change
    with pytest.raises(ValueError, match=r"^--set n=4: ckpt.pt was trained with n=3, and a resumed "
                                         r"run keeps its toy; leave --set n out to continue it, or "
                                         r"start a new run with it in another --out$"):
        apply_resume_overrides(stored, {"n": "4"}, {"limit"}, "ckpt.pt", "its toy")
    # checked as any value is, first
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        apply_resume_overrides(stored, {"n": "0"}, (), "ckpt.pt")
    with pytest.raises(ValueError, match="mode cannot be set: fixed"):
        apply_resume_overrides(stored, {"mode": "a"}, (), "ckpt.pt", forbidden={"mode": "fixed"})
