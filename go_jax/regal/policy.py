"""REGAL's policy: a graph network choosing, per op, the BRKGA key distributions and crossover bias.

Action space (discrete, one categorical per decision; all decisions of a graph come from ONE
forward pass and are independent given it):
  * per op and key slot (D device-affinity keys + 1 priority key) one of the Beta(alpha, beta)
    pairs in BETA_CHOICES: uniform (1, 1), mildly high (3, 1) / low (1, 3), strongly high
    (12, 1) / low (1, 12);
  * per op one crossover bias in BIAS_CHOICES (0.5, 0.7 = BRKGA's elite_bias, 0.9).
Why discrete and of this family: REINFORCE needs exact log-probabilities of what was sampled,
and a categorical gives them with no reparametrisation or clipping; every pair has alpha = 1 or
beta = 1, so the guided BRKGA draws its keys in closed form (guided.beta_quantile, no bisection
in the training loop), and the uniform choice is exactly the plain BRKGA, which the policy can
always fall back to. "High" keys win the affinity argmax / run early; "low" ones lose / run
late; that is all a key distribution can express for BRKGA's decoder. The head is initialised
(zero kernel, biased logits) so that every node starts with probability `init_uniform_prob` on
the uniform pair and on the default bias: training starts near the plain BRKGA.

Network (`RegalPolicy`): node features and op type of go_jax.policies.features -> Dense ->
the project's GraphSAGE encoder (go_jax.policies.sage) -> MLP head -> logits (Np, Dmax + 1, C)
and (Np, NB). The key slots used on a D-device topology are the first D and the last (priority).
`graph_aware=False` is GAS ("graph-agnostic search"): the head is fed a constant input, so
every op gets the same learned distribution (learned BRKGA hyper-distributions).
`hints=True` (the `regal_hint` method): the policy also reads a heuristic key choice per op
and slot (go_jax/regal/hints.py), embedded into the node states and given a learned logit bonus
that starts at `hint_init`, so that training starts from the hinted guide instead.
"""

from __future__ import annotations

from typing import Optional, Tuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from go_jax.policies.sage import GraphSAGE
from go_jax.policies.types import GraphFeatures
from go_jax.regal import guided
from simulator.ops import NUM_OP_TYPES

BETA_CHOICES: Tuple[Tuple[float, float], ...] = ((1.0, 1.0), (3.0, 1.0), (1.0, 3.0),
                                                 (12.0, 1.0), (1.0, 12.0))
BIAS_CHOICES: Tuple[float, ...] = (0.5, 0.7, 0.9)
UNIFORM = 0  # index of Beta(1, 1) in BETA_CHOICES
DEFAULT_BIAS = 1  # index of 0.7 (BRKGA's elite_bias) in BIAS_CHOICES
_ALPHA = np.asarray([a for a, _ in BETA_CHOICES], np.float32)
_BETA = np.asarray([b for _, b in BETA_CHOICES], np.float32)
_BIAS = np.asarray(BIAS_CHOICES, np.float32)


def default_config() -> ml_collections.ConfigDict:
  """REGAL's policy; `graph_aware=False` gives GAS."""
  c = ml_collections.ConfigDict()
  c.hidden = 64  # width of the node states
  c.gnn_layers = 3  # GraphSAGE depth
  c.max_devices = 2  # Dmax: device-affinity key slots of the head
  c.graph_aware = True  # False: GAS, one distribution shared by all ops
  c.init_uniform_prob = 0.6  # initial probability of the uniform pair and default bias
  c.hints = False  # True: reads a heuristic key choice per op and slot (go_jax/regal/hints.py)
  c.hint_init = 3.0  # initial logit bonus of the hinted choice (3: the hint is the mode at init)
  return c


def _init_logits(n: int, favoured: int, prob: float) -> np.ndarray:
  """Logits of n choices: `prob` on `favoured`, the rest shared evenly."""
  p = np.full(n, (1.0 - prob) / max(n - 1, 1))
  p[favoured] = prob
  return np.log(p).astype(np.float32)


class RegalPolicy(nn.Module):
  """Per-op key-distribution and bias logits of one padded graph (see the module docstring)."""
  hidden: int = 64
  gnn_layers: int = 3
  max_devices: int = 2
  graph_aware: bool = True
  init_uniform_prob: float = 0.6
  hints: bool = False
  hint_init: float = 3.0

  @nn.compact
  def __call__(self, feats: GraphFeatures, hint: Optional[jnp.ndarray] = None):
    """(key logits (Np, Dmax + 1, C), bias logits (Np, NB)) float32.

    hint: (Np, Dmax + 1) int32 hinted choice per op and key slot (hints.hint_choices); required
    by, and only by, a policy with `hints`. It is embedded into the node states and its choice
    gets a learned logit bonus (`hint_scale`, initially `hint_init`)."""
    np_ = feats.node_mask.shape[0]
    slots, c, nb = self.max_devices + 1, len(BETA_CHOICES), len(BIAS_CHOICES)
    if self.hints != (hint is not None):
      raise ValueError("a REGAL policy with hints needs the hint choices, and one without "
                       "takes none (config.policy.hints)")
    if hint is not None and tuple(hint.shape) != (np_, slots):
      raise ValueError(f"hint must be (Np, Dmax + 1) = {(np_, slots)}, got {tuple(hint.shape)}")
    onehot = None if hint is None else jax.nn.one_hot(hint, c, dtype=jnp.float32)
    if self.graph_aware:
      h = nn.Dense(self.hidden, name="embed")(feats.node_feats)
      h = h + nn.Embed(NUM_OP_TYPES, self.hidden, name="op_type")(feats.op_type)
      if onehot is not None:
        h = h + nn.Dense(self.hidden, name="hint_embed")(onehot.reshape(np_, slots * c))
      h = GraphSAGE(self.gnn_layers, self.hidden, name="gnn")(
          h, feats.senders, feats.receivers, feats.edge_mask, feats.node_mask)
    else:  # GAS: the same constant input for every op
      h = jnp.ones((np_, self.hidden), jnp.float32)
    h = nn.relu(nn.Dense(self.hidden, name="head_hidden")(h))
    init = np.concatenate([np.tile(_init_logits(c, UNIFORM, self.init_uniform_prob), slots),
                           _init_logits(nb, DEFAULT_BIAS, self.init_uniform_prob)])
    out = nn.Dense(slots * c + nb, name="head_out", kernel_init=nn.initializers.zeros,
                   bias_init=lambda *_: jnp.asarray(init))(h)
    key_logits = out[:, :slots * c].reshape(np_, slots, c)
    if onehot is not None:
      scale = self.param("hint_scale", lambda *_: jnp.float32(self.hint_init))
      key_logits = key_logits + scale * onehot
    return key_logits, out[:, slots * c:]


def make_policy(config) -> RegalPolicy:
  """The module a policy config describes; ValueError names a bad or unknown field."""
  cfg = dict(config)
  fields = set(default_config().keys())
  unknown = sorted(set(cfg) - fields)
  if unknown:
    raise ValueError(f"regal policy config has unknown field(s) {unknown}; valid: "
                     f"{sorted(fields)}")
  for k in ("hidden", "max_devices"):
    if k in cfg and int(cfg[k]) < 1:
      raise ValueError(f"regal policy config: {k} must be >= 1, got {cfg[k]}")
  if int(cfg.get("gnn_layers", 3)) < 0:
    raise ValueError(f"regal policy config: gnn_layers must be >= 0, got {cfg['gnn_layers']}")
  if float(cfg.get("hint_init", 3.0)) < 0:
    raise ValueError(f"regal policy config: hint_init must be >= 0, got {cfg['hint_init']}")
  if not 0.0 < float(cfg.get("init_uniform_prob", 0.6)) < 1.0:
    raise ValueError("regal policy config: init_uniform_prob must be in (0, 1), got "
                     f"{cfg['init_uniform_prob']}")
  return RegalPolicy(**cfg)


def used_logits(key_logits, num_devices: int):
  """The key slots of a D-device topology: (..., Np, Dmax + 1, C) -> (..., Np, D + 1, C)."""
  dmax = key_logits.shape[-2] - 1
  if num_devices > dmax:
    raise ValueError(f"the policy has {dmax} device key slots, the topology {num_devices} "
                     "devices")
  return jnp.concatenate([key_logits[..., :num_devices, :], key_logits[..., dmax:, :]], -2)


def sample(key, key_logits, bias_logits, samples: int):
  """K actions: key choices (K, Np, D + 1) and bias choices (K, Np), int32."""
  k1, k2 = jax.random.split(key)
  keys = jax.random.categorical(k1, key_logits, shape=(samples,) + key_logits.shape[:-1])
  bias = jax.random.categorical(k2, bias_logits, shape=(samples,) + bias_logits.shape[:-1])
  return keys.astype(jnp.int32), bias.astype(jnp.int32)


def mode(key_logits, bias_logits):
  """The most likely action: key choices (Np, D + 1) and bias choices (Np,)."""
  return (jnp.argmax(key_logits, -1).astype(jnp.int32),
          jnp.argmax(bias_logits, -1).astype(jnp.int32))


def log_prob(key_logits, bias_logits, key_choice, bias_choice, node_mask):
  """(...,) log-probability of actions (choices with leading batch axes) over the real ops."""
  lk = jnp.take_along_axis(jax.nn.log_softmax(key_logits), key_choice[..., None], -1)[..., 0]
  lb = jnp.take_along_axis(jax.nn.log_softmax(bias_logits), bias_choice[..., None], -1)[..., 0]
  per_node = jnp.sum(lk, -1) + lb  # (..., Np)
  return jnp.sum(jnp.where(node_mask, per_node, 0.0), -1)


def entropy(key_logits, bias_logits, node_mask):
  """() mean entropy per real op of its key and bias decisions (nats)."""
  def ent(logits):
    logp = jax.nn.log_softmax(logits)
    return -jnp.sum(jnp.exp(logp) * logp, -1)
  per_node = jnp.sum(ent(key_logits), -1) + ent(bias_logits)
  return jnp.sum(jnp.where(node_mask, per_node, 0.0)) / jnp.maximum(jnp.sum(node_mask), 1)


def guide_of(key_choice, bias_choice, node_mask) -> guided.Guide:
  """The Guide of chosen actions (any leading batch axes); padded ops get Beta(1, 1) and the
  default bias."""
  real = node_mask[..., None]
  key_choice = jnp.where(real, key_choice, UNIFORM)
  bias_choice = jnp.where(node_mask, bias_choice, DEFAULT_BIAS)
  return guided.Guide(alpha=jnp.asarray(_ALPHA)[key_choice],
                      beta=jnp.asarray(_BETA)[key_choice],
                      threshold=guided.bias_threshold(jnp.asarray(_BIAS)[bias_choice]))
