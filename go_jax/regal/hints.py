"""Heuristic hints for REGAL's policy (`policy.hints = True`, the `regal_hint` method).

  choice = hint_choices(graph, topology, objective, max_devices, num_nodes_padded)
  # (Np, Dmax + 1) int32
  cands, evals = hint_candidates(graph, topology, objective, partitions=16)
  # [(placement, priority, objective)] best first; evals: actions simulated

A hint is one key choice per op and key slot, in policy.BETA_CHOICES' indices, built from two
millisecond-cheap baselines of REGAL's own table:
* affinity slots: "mildly high" (Beta(3, 1)) on the device of GP's placement (the `gp_dfs`
  method: a METIS partition balancing bytes for peak memory, compute for makespan), uniform on
  the other slots;
* the priority slot: the op's place in a memory-friendly order, in fifths: "strongly high"
  (Beta(12, 1)), "mildly high", uniform, "mildly low" (Beta(1, 3)), "strongly low". The order
  is XLA's memory scheduler's (`xla_memory` on GP's placement) for `peak_memory`, and the
  critical-path order (upward rank) for `makespan`.
Padded ops and unused slots: uniform.

Why these: of nine such fixed guides tried on REGAL's 32 *training* graphs (BENCHMARKS.md "REGAL
with hints"), this one made BRKGA 5K's peak memory lowest (2.9% lower on average, 27 of 32
graphs), while each baseline alone is 20-35% worse than BRKGA. A hinted policy reads the hint
(an embedding and a learned logit bonus, policy.RegalPolicy) and starts from it (its most
likely guide at initialisation is the hint); REINFORCE is to learn where to deviate (so far it
has not: docs/regal.md section 4.1). The hint is computed on the host for every graph, in
training (trainer.build_data) and at inference (methods/regal.py).

Several partitions (`partitions` > 1; `regal_hint`'s option `hint_partitions`, 16 for its
shipped checkpoints): METIS is run with seeds 0 .. partitions - 1, each distinct
placement is simulated with each of XLA's three orders in one batch, and the best (placement,
order) becomes the hint; `regal_hint` also seeds the guided BRKGA's first generation with the
best `hint_seeds` of them (docs/regal.md section 4.3). One partition is the hint above.
With `hint_consensus` = k (`consensus_choices`) the affinity slot's strength follows how many of
the best k distinct partitions agree with the best one (section 4.4).
"""

from __future__ import annotations

import numpy as np

from simulator.graph import CompGraph, upward_rank
from simulator.topology import Topology

# indices in policy.BETA_CHOICES: Beta(3, 1), (1, 3), (12, 1), (1, 12)
MILD_HIGH, MILD_LOW, STRONG_HIGH, STRONG_LOW = 1, 2, 3, 4
FIFTHS = (STRONG_HIGH, MILD_HIGH, 0, MILD_LOW, STRONG_LOW)  # first fifth of the order first


def fifths(priority: np.ndarray) -> np.ndarray:
  """(N,) int32 priority-slot choice by the op's fifth in order of decreasing priority (ties:
  lower op id first): FIFTHS[k] for the k-th fifth."""
  n = priority.shape[0]
  order = np.lexsort((np.arange(n), -np.asarray(priority, np.float64)))
  rank = np.empty(n, np.int64)
  rank[order] = np.arange(n)
  return np.asarray(FIFTHS, np.int32)[np.minimum(5 * rank // max(n, 1), 4)]


def hint_candidates(graph: CompGraph, topology: Topology, objective: str,
                    partitions: int = 1):
  """([(placement (N,), priority (N,), objective)], evaluations): GP's placements under METIS
  seeds 0 .. partitions - 1 (duplicates dropped), each with the objective's order, lowest
  simulated objective first (seed order on ties); evaluations: the actions simulated (the
  batch below, padding included: 3 * partitions for peak_memory).

  The order is XLA's memory scheduler's on the placement for peak_memory (the best of its
  list, DFS and post-order schedules, as `xla_memory` chooses; the three orders depend on the
  graph only, so they are computed once) and the upward rank for makespan. All candidates
  are simulated in ONE batched call of a fixed size (3 * partitions actions, padded by
  repeating the last), so a bucket compiles it once. With one partition and makespan nothing
  is simulated (objective 0): the hint of the shipped checkpoints' training.
  """
  # The registered functions' proposals, not methods.solve: no re-simulation or bound of the
  # baselines inside regal_hint's timed search. (Imported here: the methods import regal.)
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  from go_jax.methods import regal_baselines  # pylint: disable=g-import-not-at-top
  partitions = int(partitions)
  if partitions < 1:
    raise ValueError(f"hint: partitions must be >= 1, got {partitions}")
  problem = methods.Problem(graph, topology, objective, 0, None, None)
  gp = methods.get("gp_dfs").defaults
  places, seen = [], set()
  for place, _ in regal_baselines.gp_placements(problem, range(partitions), gp["weights"],
                                                gp["ufactor"]):
    if place.tobytes() not in seen:
      seen.add(place.tobytes())
      places.append(place)
  if objective == "peak_memory":
    orders = [regal_baselines.order_priority(f(graph))
              for f in regal_baselines.XLA_ORDERS.values()]
  else:
    orders = [upward_rank(graph)]
  if objective != "peak_memory" and partitions == 1:
    return [(places[0], orders[0], 0.0)], 0
  pairs = [(p, o) for p in places for o in range(len(orders))]
  width = partitions * len(orders)
  padded_pairs = pairs + [pairs[-1]] * (width - len(pairs))
  values = regal_baselines._objective_of(  # pylint: disable=protected-access
      problem, np.stack([p for p, _ in padded_pairs]),
      np.stack([orders[o] for _, o in padded_pairs]))[:len(pairs)].reshape(len(places), -1)
  best_order = np.argmin(values, axis=1)  # first minimum: list, dfs, post_order
  out = [(p, orders[k], float(values[i, k])) for i, (p, k) in enumerate(zip(places, best_order))]
  return sorted(out, key=lambda c: c[2]), width  # stable: seed order on ties


def choices_of(placement, priority, max_devices: int, num_nodes_padded: int) -> np.ndarray:
  """(Np, Dmax + 1) int32 hinted key choice per op and slot of one action (module
  docstring)."""
  n = placement.shape[0]
  out = np.zeros((num_nodes_padded, max_devices + 1), np.int32)
  out[np.arange(n), placement] = MILD_HIGH
  out[:n, max_devices] = fifths(priority)
  return out


def aligned(placement, reference, num_devices: int) -> np.ndarray:
  """`placement` with its device labels permuted to agree with `reference` on the most ops
  (scipy's linear_sum_assignment on the D x D table of ops per label pair): METIS numbers its
  parts arbitrarily, so two partitions compare only after this."""
  from scipy.optimize import linear_sum_assignment  # pylint: disable=g-import-not-at-top
  table = np.zeros((num_devices, num_devices), np.int64)
  np.add.at(table, (placement, reference), 1)
  rows, cols = linear_sum_assignment(-table)
  relabel = np.arange(num_devices)
  relabel[rows] = cols
  return relabel[placement]


def consensus_choices(candidates, top: int, num_devices: int, max_devices: int,
                      num_nodes_padded: int) -> np.ndarray:
  """(Np, Dmax + 1) int32 hint of the best candidate whose affinity strength follows how many
  of the best `top` candidates (all, if fewer) agree with it (docs/regal.md section 4.4): the
  best's device gets "strongly high" where all of them (aligned to the best, `aligned`) put
  the op there, "mildly high" where at least three quarters do, and uniform elsewhere, so that
  the guided BRKGA explores the contested ops and keeps the agreed ones; the other affinity
  slots uniform and the priority slot as `choices_of`."""
  best, prio = candidates[0][0], candidates[0][1]
  out = choices_of(best, prio, max_devices, num_nodes_padded)
  chosen = candidates[:max(int(top), 1)]
  agree = np.zeros(best.shape[0])
  for place, _, _ in chosen:
    agree += aligned(place, best, num_devices) == best
  share = agree / len(chosen)
  out[np.arange(best.shape[0]), best] = np.where(
      share >= 1.0, STRONG_HIGH, np.where(share >= 0.75, MILD_HIGH, 0))
  return out


def hint_choices(graph: CompGraph, topology: Topology, objective: str, max_devices: int,
                 num_nodes_padded: int, partitions: int = 1) -> np.ndarray:
  """(Np, Dmax + 1) int32 hinted key choice per op and slot (module docstring): the best of
  `hint_candidates`."""
  n, d = graph.num_nodes, topology.num_devices
  if d > max_devices or num_nodes_padded < n:
    raise ValueError(f"hint_choices: {d} devices for {max_devices} slots, or {n} ops padded "
                     f"to {num_nodes_padded}")
  place, prio, _ = hint_candidates(graph, topology, objective, partitions)[0][0]
  return choices_of(place, prio, max_devices, num_nodes_padded)
