"""Dataset folders of CostGraphDef files: topology hashes, the resumable store, split loading.

A dataset folder (docs/regal_data.md) holds `train/`, `valid/` and `test/` sub-folders of
CostGraphDef text files named `graph_<hash>.pbtxt` (REGAL's naming) and one `manifest.json`:

  {"kind": "regal" | "xla", "settings": {...build options...},
   "graphs": [{"split", "file", "nodes", "edges", "hash", ...source and filter figures}],
   "rejected": [{"candidate", "reason", ...}], "candidates": <candidates examined>,
   "seconds": <build seconds so far>}

Every file is written atomically (`simulator.fileio`), graph files before the manifest that
lists them, so a killed build leaves a consistent folder that `DatasetStore` resumes from: the
candidates recorded in the manifest (accepted or rejected) are never examined again.

`topology_hash` is the de-duplication key: a Weisfeiler-Lehman hash of the directed edge
structure (node and edge attributes ignored). Isomorphic graphs always get the same hash, so
exact duplicates (the same topology under any relabelling) are always removed; two
non-isomorphic graphs collide only where 1-WL colour refinement cannot tell them apart, and then
the later one is dropped too (conservative: the dataset never holds a duplicate).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from simulator import fileio
from simulator.graph import CompGraph
from simulator.sources.costgraph import load_costgraph, write_costgraph

SPLITS = ("train", "valid", "test")
MANIFEST = "manifest.json"
DATA_ENV_VAR = "GO_JAX_REGAL_DATA"  # root of the dataset folders (default ./data)
# Data spec kind -> default folder under the root.
DATA_KINDS = {"regal_data": "regal", "xla_data": "regal_xla"}


def topology_hash(graph: CompGraph, digits: int = 16) -> str:
  """Weisfeiler-Lehman hash (hex, `digits` long) of `graph`'s directed edges (module docstring).

  Colour refinement: every op starts with one colour; each round an op's new colour is the rank
  of (old colour, sorted predecessor colours, sorted successor colours) among the sorted
  distinct signatures of that round, until the number of colours stops growing. Every round's
  sorted signature list (invariant under relabelling) is fed to one SHA-256.
  """
  n = graph.num_nodes
  pptr, preds = graph.predecessor_csr()
  sptr, succs = graph.successor_csr()
  pptr, preds, sptr, succs = pptr.tolist(), preds.tolist(), sptr.tolist(), succs.tolist()
  h = hashlib.sha256(f"{n},{graph.num_edges}".encode())
  colour, count = [0] * n, 1
  for _ in range(n + 1):
    sig = [(colour[v], tuple(sorted(colour[u] for u in preds[pptr[v]:pptr[v + 1]])),
            tuple(sorted(colour[w] for w in succs[sptr[v]:sptr[v + 1]]))) for v in range(n)]
    ranks = {s: k for k, s in enumerate(sorted(set(sig)))}
    h.update(repr(sorted(sig)).encode())
    colour = [ranks[s] for s in sig]
    if len(ranks) == count:
      break
    count = len(ranks)
  return h.hexdigest()[:digits]


def graph_file(split: str, digest: str) -> str:
  """Path of a graph inside a dataset folder, REGAL's naming: `<split>/graph_<hash>.pbtxt`."""
  return f"{split}/graph_{digest}.pbtxt"


def split_for(counts: Dict[str, int], targets: Dict[str, int]) -> Optional[str]:
  """The split the next accepted graph goes to: the least-filled one relative to its target
  (ties in SPLITS order), so the splits fill together; None when all are full."""
  open_ = [s for s in SPLITS if counts.get(s, 0) < targets.get(s, 0)]
  if not open_:
    return None
  return min(open_, key=lambda s: (counts.get(s, 0) / targets[s], SPLITS.index(s)))


def _duration(seconds: float) -> str:
  seconds = max(0.0, float(seconds))
  if seconds < 90:
    return f"{seconds:.0f}s"
  if seconds < 5400:
    return f"{seconds / 60:.1f}min"
  return f"{seconds / 3600:.1f}h"


class DatasetStore:
  """A dataset folder being built: the manifest in memory, saved atomically (module docstring).

  Opening a folder with a manifest resumes it; its `settings` must equal `settings` (else a
  ValueError naming the differing keys), so a resumed build never mixes two recipes.
  """

  def __init__(self, out: str, kind: str, settings: Dict, *, save_seconds: float = 5.0,
               log: Optional[Callable[[str], None]] = print):
    self.out, self.kind, self.log = out, kind, log or (lambda s: None)
    self.save_seconds = float(save_seconds)
    settings = json.loads(json.dumps(settings))  # as JSON stores it (tuples -> lists)
    path = os.path.join(out, MANIFEST)
    if os.path.isfile(path):
      self.manifest = read_manifest(out)
      old = self.manifest.get("settings", {})
      diff = sorted(k for k in set(old) | set(settings) if old.get(k) != settings.get(k))
      if self.manifest.get("kind") != kind or diff:
        raise ValueError(f"{path}: the dataset there was built with other settings (differing: "
                         f"{diff or ['kind']}); use another folder or the same options")
      self.log(f"[{kind}] resuming {out}: {len(self.graphs)} graphs, "
               f"{self.manifest['candidates']} candidates done")
      self._fresh = False
    else:
      self.manifest = {"kind": kind, "settings": settings, "graphs": [], "rejected": [],
                       "candidates": 0, "seconds": 0.0}
      self._fresh = True
    self.hashes = {g["hash"] for g in self.graphs}
    self._t0 = time.perf_counter()
    self._seconds0 = float(self.manifest["seconds"])
    self._candidates0 = int(self.manifest["candidates"])
    self._last_save = time.perf_counter()
    self._last_log = 0.0
    self._mark = (self._t0, self._candidates0)  # (time, candidates) at the last progress line

  @property
  def graphs(self) -> List[Dict]:
    return self.manifest["graphs"]

  @property
  def candidates(self) -> int:
    return int(self.manifest["candidates"])

  def counts(self) -> Dict[str, int]:
    out = {s: 0 for s in SPLITS}
    for g in self.graphs:
      out[g["split"]] += 1
    return out

  def add(self, split: str, graph: CompGraph, digest: str, **figures) -> Dict:
    """Writes `graph` to its file in `split` and records it (one more candidate)."""
    rel = graph_file(split, digest)
    write_costgraph(graph, os.path.join(self.out, rel))
    entry = dict(split=split, file=rel, nodes=graph.num_nodes, edges=graph.num_edges,
                 hash=digest, **figures)
    self.graphs.append(entry)
    self.hashes.add(digest)
    self._candidate_done()
    return entry

  def reject(self, reason: str, **figures) -> None:
    """Records a candidate that was not kept (duplicate, no room for improvement, ...)."""
    self.manifest["rejected"].append(dict(reason=reason, **figures))
    self._candidate_done()

  def _candidate_done(self) -> None:
    self.manifest["candidates"] += 1
    if time.perf_counter() - self._last_save >= self.save_seconds:
      self.save()

  def save(self) -> None:
    """Writes the manifest; not in a new folder before its first candidate is recorded, so a
    run that fails at once (a bad option found late) leaves no manifest to refuse the rerun."""
    if self._fresh and not self.manifest["candidates"]:
      return
    self.manifest["seconds"] = self._seconds0 + time.perf_counter() - self._t0
    fileio.write_json(os.path.join(self.out, MANIFEST), self.manifest)
    self._last_save = time.perf_counter()

  def progress(self, targets: Dict[str, int], every: float = 10.0, force: bool = False) -> None:
    """Logs one progress line at most every `every` seconds: graphs per split, candidates and
    acceptance, this session's seconds per candidate, the recent rate (since the previous
    line: compiles make the first candidates slow) and the ETA at the recent rate."""
    now = time.perf_counter()
    if not force and now - self._last_log < every:
      return
    self._last_log = now
    counts, done = self.counts(), self.candidates
    session = done - self._candidates0
    elapsed = now - self._t0
    kept = len(self.graphs)
    total = sum(targets.values())
    mark_t, mark_n = self._mark
    self._mark = (now, done)
    recent = (done - mark_n) / (now - mark_t) if now > mark_t else 0.0
    accept = kept / done if done else 0.0
    eta = ((total - kept) / (recent * accept)) if recent > 0 and accept > 0 else float("inf")
    per_split = " ".join(f"{s} {counts[s]}/{targets[s]}" for s in SPLITS)
    each = f"{elapsed / session:.2f}" if session else "-"
    self.log(f"[{self.kind}] {kept}/{total} graphs ({per_split}); {done} candidates, "
             f"accepted {100 * accept:.0f}%; {each} s per candidate this session, recently "
             f"{recent:.2f} candidates/s; ETA "
             f"{_duration(eta) if np.isfinite(eta) else '?'}")


def read_manifest(folder: str) -> Dict:
  """The manifest of a dataset folder; ValueError naming the file when missing or bad."""
  path = os.path.join(folder, MANIFEST)
  if not os.path.isfile(path):
    raise ValueError(f"{path}: no dataset manifest there (build one with "
                     f"experiments/build_regal_data.py)")
  try:
    with open(path, encoding="utf-8") as fh:
      manifest = json.load(fh)
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"{path}: not a readable manifest ({e})") from None
  for key in ("kind", "settings", "graphs", "rejected", "candidates", "seconds"):
    if key not in manifest:
      raise ValueError(f"{path}: manifest field {key!r} is missing")
  return manifest


def parse_data_spec(spec: str) -> Tuple[str, str, Optional[int]]:
  """'regal_data:SPLIT[,dir=FOLDER][,limit=N]' (or 'xla_data:...') -> (folder, split, limit).

  The folder defaults to $GO_JAX_REGAL_DATA/regal (xla_data: .../regal_xla), the root being
  ./data where the variable is unset. ValueError naming the spec for a bad kind, split or key.
  """
  kind, sep, rest = str(spec).strip().partition(":")
  if not sep or kind not in DATA_KINDS:
    raise ValueError(f"data spec {spec!r}: expected one of "
                     f"{[k + ':SPLIT[,dir=...][,limit=N]' for k in DATA_KINDS]}")
  split, *items = [x.strip() for x in rest.split(",")]
  if split not in SPLITS:
    raise ValueError(f"data spec {spec!r}: unknown split {split!r}; splits: {list(SPLITS)}")
  root = os.environ.get(DATA_ENV_VAR) or "data"
  folder, limit = os.path.join(root, DATA_KINDS[kind]), None
  for item in items:
    key, eq, value = item.partition("=")
    if key == "dir" and eq and value:
      folder = value
    elif key == "limit" and eq and value.isdigit() and int(value) > 0:
      limit = int(value)
    else:
      raise ValueError(f"data spec {spec!r}: bad item {item!r}; keys: dir=FOLDER, limit=N "
                       f"(N >= 1)")
  return folder, split, limit


def load_split(spec_or_split: str, folder: Optional[str] = None,
               limit: Optional[int] = None) -> Tuple[List[str], List[CompGraph]]:
  """(names, graphs) of one split of a dataset folder, in manifest order.

  `spec_or_split` is a data spec ('regal_data:test,dir=data/regal,limit=100'; see
  `parse_data_spec`) or a bare split name with `folder` given. A graph's name is its file
  stem (graph_<hash>), as in REGAL's dataset.
  """
  if ":" in str(spec_or_split):
    folder, split, spec_limit = parse_data_spec(spec_or_split)
    limit = limit if limit is not None else spec_limit
  else:
    split = spec_or_split
    if split not in SPLITS or folder is None:
      raise ValueError(f"load_split({spec_or_split!r}): give a data spec "
                       f"('regal_data:SPLIT,...') or a split in {list(SPLITS)} and a folder")
  entries = [g for g in read_manifest(folder)["graphs"] if g["split"] == split]
  if limit is not None:
    entries = entries[:limit]
  graphs = [load_costgraph(os.path.join(folder, g["file"])) for g in entries]
  return [g.name for g in graphs], graphs


def acceptance(manifest: Dict) -> Dict[str, float]:
  """Figures of a built folder: candidates, kept, rejected by reason, acceptance rate,
  build seconds and seconds per candidate and per kept graph."""
  reasons: Dict[str, int] = {}
  for r in manifest["rejected"]:
    reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
  cand, kept, secs = manifest["candidates"], len(manifest["graphs"]), manifest["seconds"]
  return {"candidates": cand, "kept": kept, "rejected": reasons,
          "acceptance": kept / cand if cand else 0.0, "seconds": secs,
          "seconds_per_candidate": secs / cand if cand else 0.0,
          "seconds_per_graph": secs / kept if kept else 0.0}


__all__ = ["SPLITS", "MANIFEST", "DatasetStore", "topology_hash", "graph_file", "split_for",
           "read_manifest", "parse_data_spec", "load_split", "acceptance"]
