"""Chapter 22: speculative decoding, exact by construction (Leviathan et al. 2023; Chen et al.
2023).

- :mod:`.rule`: the accept/reject rule, the residual distribution, greedy verification, and the
  cost model (expected tokens per target call for k draft tokens and acceptance rate alpha);
- :mod:`.cached`: a model whose KV cache follows a text that grows and is rewound;
- :mod:`.drafters`: an n-gram table and a small model as drafters;
- :mod:`.decode`: :func:`speculative_generate`, the loop;
- :mod:`.train_draft`: the 1-layer GPT drafter trained on the target's training split;
- :mod:`.self_draft`: drafter 3, a GPT's own multi-token prediction heads (:mod:`course_lib.mtp`)
  drafting for it (self-speculative decoding).
"""
from .decode import SpeculativeStats, check_drafter, speculative_generate, speculative_text
from .drafters import ModelDrafter, NGramDrafter, drafter_from_checkpoint
from .rule import (acceptance_probability, acceptance_rate, alpha_from_rounds, expected_speedup,
                   expected_tokens_per_call, greedy_round, probabilities, residual_distribution,
                   speculative_round)

__all__ = ["SpeculativeStats", "check_drafter", "speculative_generate", "speculative_text",
           "ModelDrafter", "NGramDrafter", "drafter_from_checkpoint",
           "acceptance_probability", "acceptance_rate", "alpha_from_rounds", "expected_speedup",
           "expected_tokens_per_call", "greedy_round", "probabilities", "residual_distribution",
           "speculative_round"]
