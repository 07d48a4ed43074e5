"""HDP (Mirhoseini et al., "A Hierarchical Model for Device Placement", ICLR 2018) in go-jax.

The grouper and the placer (`model`) and their joint per-graph REINFORCE training on the
simulator (`trainer`). The registered method `hdp` is go_jax/methods/hdp.py; the semantics are
in docs/design.md section 7.
"""
