"""Chapter 21: induction heads in a small attention-only Transformer, trained here on CPU.

One idea per module: the repeated-sequence task (:mod:`.task`), the 2-layer attention-only model
with its hook points (:mod:`.model`), training with the repeat-half loss and the in-context
learning score recorded through the run (:mod:`.training`), per-head attention scores with
TransformerLens's definitions (:mod:`.scores`), and ablations and composition scores
(:mod:`.ablation`).
"""
