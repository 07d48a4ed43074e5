"""REGAL (Paliwal et al., ICLR 2020) and GAS in go-jax: the guided BRKGA (`guided`), the graph
policy that chooses its per-op Beta distributions and crossover bias (`policy`) and the REINFORCE
trainer (`trainer`). The registered methods `regal` and `gas` are in go_jax/methods/regal.py;
the semantics and measured figures in docs/regal.md.
"""
