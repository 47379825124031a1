"""course_lib.gpt_config: GPTConfig, its rules and the checks across fields (its own module since
issue 45's split of model.py; bad values of every field are rows of test_bad_input_api.py)."""
import pytest

import course_lib.model as model
from course_lib import gpt_config
from course_lib.gpt_config import GPT_CONFIG_RULES, GPTConfig


def test_model_names_the_same_config_and_tables():
    for name in ("GPTConfig", "GPT_CONFIG_RULES", "NEEDS_ANOTHER", "LATER_FIELDS", "ACTIVATIONS",
                 "NORMS", "MLPS", "SWIGLU_MULTIPLE"):
        assert getattr(model, name) is getattr(gpt_config, name), name


def test_every_field_has_a_rule():
    assert set(GPTConfig.__dataclass_fields__) == set(GPT_CONFIG_RULES)


def test_the_repr_shows_later_fields_only_when_set():
    assert "qk_norm" not in repr(GPTConfig()) and "mtp_heads" not in repr(GPTConfig())
    assert "qk_norm=True" in repr(GPTConfig(qk_norm=True))


def test_an_option_that_needs_another_is_refused_alone():
    with pytest.raises(ValueError, match=r"moe_top_k=4 takes effect only with moe_experts: set it "
                                         r"too \(e.g. moe_experts=8\)"):
        GPTConfig(moe_top_k=4)
    assert GPTConfig(moe_experts=8, moe_top_k=4).moe_top_k == 4


def test_the_sizes_it_implies():
    config = GPTConfig(n_embd=128, n_head=4, mlp="swiglu")
    assert (config.head_size, config.kv_heads, config.ffn_size) == (32, 4, 352)
    assert GPTConfig(n_embd=128, n_kv_head=2, head_dim=16).head_size == 16
    assert GPTConfig(n_embd=128).ffn_size == 512
