"""GO's device-load state: placement logits that see the memory and compute already committed.

The encoder (GraphSAGE + segment attention) gives every node a state without knowing where the
other nodes go, so a policy that places from those states alone cannot see where memory runs
out: the paper's GO, zero-shot, put too much on one device and was out of memory on every
held-out instance. GO's "state embedding" conditions each segment's placement on what the
segments before it committed; this module does that within ONE forward pass.

The nodes are taken in topological order in blocks of `block` nodes (a `lax.scan`). Before a
block, every device carries a load state; the block's placement logits are the encoder's
node-device scores plus a term of that state (an MLP of the per-device load features, added to
the device keys and biases) minus a memory barrier; the block's placement distribution then
updates the state. What the state counts is the decoder's `mode` (`MODES`):
  expected  the EXPECTATION under the policy's own distribution (mean field: every node counts
            on device d with its probability p_i(d)). The logits are then a deterministic
            function of the graph and the parameters: every node's decision is an independent
            categorical given the forward pass, K samples cost one pass, and PPO's
            log-probabilities keep their form. Sampling and training use these logits.
  greedy    every earlier node on its most likely device: the greedy action is decoded block by
            block against the load it actually commits (GO's state embedding), so its memory
            barrier sees the real devices' load, not a spread-out expectation (a policy that is
            0.5-0.6 sure of each node looks balanced in expectation and piles up in argmax).
  forced    a given placement (imitation's teacher forcing: the logits the greedy decode sees
            when it follows the teacher).
The exact decode (the decoder given `leader`, GraphFeatures.node_leader; GOPolicy.load_exact):
a colocation group is decided and counted where its leader (its first member in topological
order) goes, since rule 1 puts the group on one device: members take the leader's logits, the
leader commits the group's parameters and members' output intervals, and an edge inside a group
moves nothing. The barrier also looks ahead: the largest block from b on of the live profile
with the node's output, group and incoming-copy intervals added. The greedy decode picks a
block's nodes one by one, each barrier adding the block's earlier picks to an incremental live
profile (its scores still come from the block's start state), then commits the block.
docs/design.md section 7 has the rules and what they fixed.
GOPolicy returns the expected logits as `placement_logits` and the greedy ones as
`greedy_placement_logits` from one call (the encoder runs once; each mode is one cheap scan).

Copy term (`comm`, off in the checkpoints before 2026-11-26 afternoon): a placement that
spreads a model to fit memory pays in copies, which the memory state does not see. With it,
node i's logit of device d also drops by
  w_i x (bytes of i's inputs known to be away from d) / (all of i's input bytes),
w_i = softplus(v . q_i + c) >= 0 learned per node from its query (c initially giving
`comm_init`), so the policy can weigh a copy against the compute and memory balance per node.
"Known": the inputs from earlier blocks, counted with the state's distribution (expected,
greedy or forced, as the load); the block's own inputs count on no device, except in the greedy
decode, which adds those of the block's earlier picks. The share is 0 for a node without
inputs (its term is the same on every device: no effect).

Group copies (`group_copies`, exact decode only; off in every shipped checkpoint):
an edge's copy is decided and committed at the block of the later of its ends' colocation
leaders, not at its receiver's block (a late backward member's), so the decisions that cause
it see it: a leader's barrier adds the copies into its group's members from groups decided
earlier (on its own device) and the copies out of its members to them (on their devices,
whenever it goes elsewhere: `load_state.spill`). design.md section 7 has the worked example.

Time term (`time`, off in every shipped checkpoint; load_time.py):
the decoder also carries when each device is free and when each placed node ends (a list
schedule along the topological order, in the state's mode), and node i's logit of device d
drops by w_i x log1p(N x (EFT_i(d) - min_e EFT_i(e))), w_i = softplus(v . q_i + c) learned per
node: with it, HEFT's own rule (each node where it finishes first) is one weight away.

Memory follows rule 7 of design.md section 4 with the topological order standing in for the
schedule (on the baselines' solutions of the PipeDream graphs this estimate equals the
simulator's peak; on random DAGs it is within ~30%). All sizes are shares of T, the graph's
total parameter + output bytes, and c_d is device d's capacity over T:
  params   P_d: parameter shares of the nodes placed on d so far (resident all step);
  live     L_d(b): the outputs live on d at block b. An output placed on d is live from its
           block to its last consumer's (an output nobody consumes lives to the end); an edge
           s -> r brings the copy out_s x p_r(d) x (1 - p_s(d)) to d when r is placed, live
           from s's block (the transfer starts when s ends) to s's last consumer's. The state
           keeps the whole profile over blocks (a difference array), so a copy placed late
           still counts where it was live;
  high     H_d: the largest L_d(b) over all blocks; the estimated peak is P_d + H_d;
  work     W_d: cost share placed on d (1 = the whole graph).
Load features of device d before a block (`LOAD_FEATURES`; clipped at FEATURE_CAP):
  params P_d / c_d, live L_d(b) / c_d, high H_d / c_d, peak (P_d + H_d) / c_d, its
  log1p, work W_d x D (1 = a fair share), progress sum_e W_e.

Memory barrier (`guard`): node i's logit of device d drops by
  softplus(a) x max(0, (P_d + param_i + max(H_d, L_d(b) + out_i + temp_i + in_i(d))) / c_d - 1),
with in_i(d) the copies i would receive on d (each input's output times the probability that
it is not on d; inputs from i's own block in full): the estimated overflow of d's peak with i
on it, times a learned scale (initially `guard_init`): an untrained or imitating policy is
steered away from devices where memory runs out, and training can weaken the barrier where the
estimate is loose. In the greedy decode the scale is at least GREEDY_BARRIER: the committed load
is known there, so a device the estimate says would overflow is all but masked.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from go_jax.policies import load_state as ls
from go_jax.policies import load_copies as lc
from go_jax.policies import load_time as lt
# the state's arithmetic lives in load_state; these names are this module's public API too
from go_jax.policies.load_state import (  # pylint: disable=unused-import
    FEATURE_CAP, LOAD_FEATURES, NODE_LOAD, LoadState, estimated_peak, load_features)

# What the state counts: "expected" (each node with its placement distribution: the logits of
# sampling and of PPO's log-probabilities), "greedy" (each node on its most likely device: the
# greedy action's logits) or "forced" (a given placement: imitation's teacher forcing).
MODES = ("expected", "greedy", "forced")
# Barrier scale of the greedy decode: there the state is the committed load, so a device the
# estimate says would overflow is all but masked (1 logit per 1e-5 of overflow); when every
# device would overflow, the least overflowing one wins.
GREEDY_BARRIER = 1e5


class LoadDecoder(nn.Module):
  """Placement logits (Np, Dmax) decoded block by block with the load state (module docstring).

  Call with q (Np, H) node queries, k (Dmax, H) device keys and bias (Dmax,) device biases (the
  load-free scores are q k^T / sqrt(H) + bias), node_load (Np, 4) shares (NODE_LOAD), node_end
  (Np,) int32 topological position of each node's last consumer (the last real position when
  nothing consumes it: such an output lives to the end, rule 7; features.load_inputs),
  device_capacity (Dmax,), device_mask (Dmax,) bool,
  topo_order / topo_position (Np,) int32, node_mask (Np,) bool, and the edges senders /
  receivers / edge_mask (Ep,). Logits of padded devices are `masked_logit`; padded nodes and
  edges add nothing to the state. With `time`, `timing` = (node_send (Np,), speed, overhead,
  latency (Dmax,)) in shares of the serial compute time (load_time.py; GOPolicy builds it).
  """
  hidden: int
  block: int = 32
  masked_logit: float = -1e9
  guard: bool = True
  guard_init: float = 100.0  # initial barrier per unit of relative overflow (1% over: 1 logit)
  # share of each device's memory the greedy decode keeps free: the estimate follows the
  # topological order, the simulator the priorities, and their peaks can differ by ~10-20%
  greedy_margin: float = 0.1
  # nodes per block of the greedy decode (0: `block`). Within a block every node sees the state
  # of the block's start, so up to `block` nodes can pile onto one device unseen by the
  # barrier; 1 commits node by node (GO's state embedding exactly). The parameters do not
  # depend on the block size, so a policy trained with `block` decodes with any. Measured on
  # the shipped `go` (BENCHMARKS.md, issue 11): 1 is better on the training set as a whole but
  # worse on 4 of its 7 families, so the default stays the training block.
  greedy_block: int = 0
  # the copy term (`comm`): each node's logit of device d drops by w_i x the share of its input
  # bytes known to be away from d (module docstring, "Copy term"); w_i = softplus of a learned
  # function of the node's query, initially `comm_init`
  comm: bool = False
  comm_init: float = 1.0
  # group copies (module docstring): a copy into or out of a colocation group is counted when
  # both ends' groups are decided, not when its receiver's block comes (exact decode only)
  group_copies: bool = False
  # a copy freed after its own receiver's block, not its sender's last consumer's (rule 7
  # frees a copy on e after the last consumer ON e; this bounds it per edge)
  copy_to_receiver: bool = False
  # the time term (load_time.py): each node's logit of device d drops by w_i x log1p(N x its
  # earliest finish time on d past its earliest on any device), w_i = softplus of a learned
  # function of the node's query, initially `time_init`; needs the call's `timing`
  time: bool = False
  time_init: float = 1.0
  # with `time`: the exact greedy decode also counts received copies over estimated time
  # (load_copies.py), so a device whose consumers queue is seen holding their inputs
  time_copies: bool = False

  @nn.compact
  def __call__(self, q, k, bias, node_load, node_end, device_capacity, device_mask, topo_order,
               topo_position, node_mask, senders, receivers, edge_mask, mode: str = "expected",
               placement=None, leader=None, timing=None):
    if mode not in MODES:
      raise ValueError(f"LoadDecoder: unknown mode {mode!r}; choose from {MODES}")
    if (mode == "forced") != (placement is not None):
      raise ValueError("LoadDecoder: mode 'forced' takes a placement, the other modes none")
    if self.block < 1:
      raise ValueError(f"LoadDecoder: block must be >= 1, got {self.block}")
    if self.greedy_block < 0:
      raise ValueError(f"LoadDecoder: greedy_block must be >= 0, got {self.greedy_block}")
    if self.time and timing is None:
      raise ValueError("LoadDecoder(time=True) needs `timing` (node_send, speed, overhead, "
                       "latency)")
    h = self.hidden
    f = len(LOAD_FEATURES)
    w1 = self.param("w1", nn.initializers.lecun_normal(), (f, h), jnp.float32)
    b1 = self.param("b1", nn.initializers.zeros, (h,), jnp.float32)
    # The load term starts small (not zero, so that w1 gets a gradient at once).
    small = nn.initializers.normal(1e-2)
    w2 = self.param("w2", small, (h, h), jnp.float32)
    wb = self.param("w_bias", small, (h,), jnp.float32)
    guard = jnp.float32(0.0)
    if self.guard:
      raw = self.param("guard_scale", nn.initializers.constant(
          math.log(math.expm1(self.guard_init))), (), jnp.float32)
      guard = jax.nn.softplus(raw)

    comm_v = comm_c = None
    if self.comm:
      comm_v = self.param("comm_w", small, (h,), jnp.float32)
      comm_c = self.param("comm_b", nn.initializers.constant(
          math.log(math.expm1(self.comm_init))), (), jnp.float32)

    time_v = time_c = None
    if self.time:
      time_v = self.param("time_w", small, (h,), jnp.float32)
      time_c = self.param("time_b", nn.initializers.constant(
          math.log(math.expm1(self.time_init))), (), jnp.float32)

    n, dmax = q.shape[0], k.shape[0]
    s = self.greedy_block if (mode == "greedy" and self.greedy_block) else self.block
    n_blk = -(-n // s)
    dev_mask = jnp.asarray(device_mask, bool)
    cap = jnp.where(dev_mask, jnp.maximum(device_capacity, 1e-6), 1.0)
    lay = ls.layout(node_load, node_end, topo_order, topo_position, node_mask, senders,
                    receivers, edge_mask, s, leader, self.group_copies,
                    self.copy_to_receiver)
    tl = None
    if self.time:
      node_send, speed, overhead, latency = timing
      tl = lt.time_layout(lay, node_load, node_send, node_mask, topo_order, senders, edge_mask,
                          speed, overhead, latency, device_mask)
    # the exact greedy decode (picks node by node, below); copies in time ride on it
    exact_greedy = lay.group is not None and self.guard and mode == "greedy"
    copies_on = exact_greedy and self.time and self.time_copies
    qs = jnp.pad(q[topo_order], ((0, n_blk * s - n), (0, 0))).reshape(n_blk, s, h)
    scale = 1.0 / jnp.sqrt(jnp.float32(h))

    forced = None
    if placement is not None:
      forced = jax.nn.one_hot(jnp.pad(placement[topo_order], (0, n_blk * s - n)), dmax,
                              dtype=jnp.float32).reshape(n_blk, s, dmax)
    else:
      forced = jnp.zeros((n_blk, 1, 1), jnp.float32)  # unused

    # A real device's logit never falls below `floor`, halfway to the padded devices'
    # `masked_logit`: the barrier grows without bound as capacity shrinks (GREEDY_BARRIER over a
    # capacity floored at 1e-6 reaches ~1e11), and below masked_logit a padded device would win
    # the argmax or be sampled. Devices clipped to the floor are all overflowing thousands of
    # times over (the placement is infeasible anyway); ties go to the lowest real device.
    floor = jnp.float32(0.5 * self.masked_logit)
    if mode == "greedy":
      scale_b, limit = jnp.maximum(guard, GREEDY_BARRIER), 1.0 - self.greedy_margin
    else:
      scale_b, limit = guard, 1.0

    def barrier(state, b, prof):
      now, ahead, _, out_iv = ls.barrier_terms(state, lay, b, prof)
      peak = (state.params[None, :] + lay.shares[b][:, :1]
              + jnp.maximum(now, ahead.max(1)))
      over = jnp.maximum(peak / cap[None, :] - limit, 0.0)
      if out_iv is not None:
        over = over + ls.spill(state.params, prof, out_iv, cap, limit)
      return scale_b * over

    def step(carry, xs):
      # ls.LoadState, lt.TimeState (None without the time term), lc.CopyState (None unless
      # time_copies)
      state, ts, cs = carry
      b, qb, fb = xs
      prof = ls.profile(state)
      feats = ls.load_features(state.params, prof[b], prof.max(0), state.work, cap, dev_mask)
      le = jax.nn.gelu(feats @ w1 + b1) @ w2  # (Dmax, H)
      logits = qb @ (k + le).T * scale + (bias + le @ wb)[None, :]
      logits = jnp.where(dev_mask[None, :], logits, self.masked_logit)
      if self.comm:
        away, inner = ls.copy_terms(state, lay, b)
        w = jax.nn.softplus(qb @ comm_v + comm_c)  # (S,) per-node weight of the copy term
        logits = logits - w[:, None] * away
      if self.time:
        # The time state is context, not a path for gradients: it counts the placement through
        # max() chains whose gradients are mostly zero, and differentiating its nested scans
        # doubled the compile and the update time (BENCHMARKS.md, "The time term").
        ready = lt.ready_known(ts, tl, lay, jax.lax.stop_gradient(state.probs), b)
        wt = jax.nn.softplus(qb @ time_v + time_c)  # (S,) per-node weight of the time term
        if not exact_greedy:  # the block's scores see the state at its start
          logits = logits - wt[:, None] * lt.term(lt.block_eft(ts, tl, b, ready), tl)
      if exact_greedy:
        # The exact greedy decode: the block's scores come from the state at the block's start
        # (as in training), but its nodes are picked one by one, each node's barrier adding
        # what the block's earlier picks put on each device (parameters, and their output and
        # group intervals over the blocks), so that the nodes of one block cannot pile onto a
        # device unseen; the block is then committed at once.
        now, ahead, riv, out_iv = ls.barrier_terms(state, lay, b, prof)
        adds = ls.intervals(lay, b)  # (S, n_blk): what each pick adds to its device's profile
        sb = lay.shares[b]
        lead = jax.lax.dynamic_slice_in_dim(lay.lead, b * s, s)

        def one(carry, j):
          # (n_blk, Dmax) live, (Dmax,) params of earlier picks, (S, Dmax) picks, and with the
          # time term (Dmax,) device ends and (S,) finish times after the earlier picks
          inc, extra, picks, avail, fin, cs = carry
          top = jnp.maximum(now[j] + inc[b], (ahead[j] + inc).max(0))
          peak = state.params + extra + sb[j, 0] + top
          over = jnp.maximum(peak / cap - limit, 0.0)
          if out_iv is not None:  # and the copies its group sends to decided groups
            over = over + ls.spill(state.params + extra, prof + inc, out_iv[j][None], cap,
                                 limit)[0]
          row = logits[j] - scale_b * over
          if self.comm:  # the block's earlier picks are known too: their copies count
            row = row - w[j] * (inner[j] * (jnp.arange(s) < j)) @ (1.0 - picks)
          if self.time:  # node by node: the earlier picks' devices and finish times are known
            eft = lt.eft_slot(tl, b, j, avail, fin, picks, ready[j])
            row = row - wt[j] * lt.term(eft[None], tl)[0]
          if copies_on:  # the copies this node's inputs would hold on each device, in time
            earlier = (jnp.arange(s) < j)
            fin_all = jax.lax.dynamic_update_slice(ts.finish, jnp.where(earlier, fin, 0.0),
                                                   (b * s,))
            p_all = jax.lax.dynamic_update_slice(state.probs, picks * earlier[:, None],
                                                 (b * s, 0))
            add = lc.new_copies(cs, lay.e_src, lay.e_dst, lay.e_out, b * s + j, fin_all,
                                p_all, eft)
            held = state.params + extra + sb[j, 0] + lc.peak(cs, add)
            row = row - scale_b * jnp.maximum(held / cap - limit, 0.0)
          row = jnp.where(dev_mask, jnp.maximum(row, floor), self.masked_logit)
          pick = jax.nn.one_hot(jnp.argmax(jnp.where(dev_mask, row, -jnp.inf)), dmax,
                                dtype=jnp.float32)
          local = lead[j] - b * s
          follow = jnp.where(local >= 0, picks[jnp.clip(local, 0, s - 1)],
                             state.probs[lead[j]])  # members follow their leader
          pick = jnp.where(local == j, pick, follow)
          grow = adds[j][:, None] * pick[None, :]
          if out_iv is not None:  # the pick's copies: in on its device, out to the others
            grow = grow + riv[j] * pick[None, :] + out_iv[j] * (1.0 - pick)[None, :]
          if self.time:  # the pick (or its leader's device) is committed in time
            avail, fin = lt.step_slot(avail, fin, j, eft, pick)
          if copies_on:
            cs = lc.commit(cs, lay.e_src, lay.e_dst, lay.e_out, b * s + j, add, pick, eft)
          return (inc + grow, extra + pick * sb[j, 0], picks.at[j].set(pick), avail, fin,
                  cs), row

        init = (jnp.zeros((n_blk, dmax), jnp.float32), jnp.zeros(dmax, jnp.float32),
                jnp.zeros((s, dmax), jnp.float32),
                ts.avail if self.time else jnp.zeros(dmax, jnp.float32),
                jnp.zeros(s, jnp.float32), cs)
        (_, _, picks, avail, fin, cs), rows = jax.lax.scan(one, init, jnp.arange(s))
        if self.time:
          ts = lt.with_block(ts, b, avail, fin)
        return (ls.commit(state, lay, b, picks), ts, cs), rows
      if self.guard:
        logits = logits - barrier(state, b, prof)
      logits = jnp.where(dev_mask[None, :], jnp.maximum(logits, floor), self.masked_logit)
      # the distribution the state counts (padded rows have zero shares: they add nothing)
      if mode == "expected":
        p = jax.nn.softmax(logits, axis=-1)
      elif mode == "greedy":
        p = jax.nn.one_hot(jnp.argmax(jnp.where(dev_mask[None, :], logits, -jnp.inf), axis=-1),
                           dmax, dtype=jnp.float32)
      else:
        p = fb
      p = ls.follow_leaders(state, lay, b, p)
      if self.time:
        ts = lt.commit_time(ts, tl, b, jax.lax.stop_gradient(p), ready)
      return (ls.commit(state, lay, b, p), ts, cs), logits

    init = (ls.init_state(n_blk, s, dmax), lt.init_time(n_blk, s, dmax) if self.time else None,
            lc.init_copies(n_blk * s, dmax) if copies_on else None)
    _, logits = jax.lax.scan(step, init,
                             (jnp.arange(n_blk), qs, forced))
    # every colocation member takes its leader's logits (the group's one decision, made where
    # the state counted it), then back to node-id order
    return logits.reshape(n_blk * s, dmax)[lay.lead][:n][topo_position]
