"""Placeto (Addanki et al., NeurIPS 2019): learned device placement by iterative improvement.

Modules: `model` (the graph-embedding policy, Flax), `env` (the MDP on the project's simulator:
grouping, batched jitted episodes, intermediate rewards), `trainer` (REINFORCE with the
per-step baseline, go-jax-train's `algorithm = "placeto"`), `search` (zero-shot and fine-tuning
on one instance). The registered method is go_jax/methods/placeto.py; design.md section 7.
"""
