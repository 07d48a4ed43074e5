"""Dataset folders of CostGraphDef files: topology hashes, the resumable store, split loading.

A dataset folder (docs/regal_data.md) holds `train/`, `valid/` and `test/` sub-folders of
CostGraphDef text files named `graph_<hash>.pbtxt` (REGAL's naming) and one `manifest.json`:

  {"kind": "regal" | "xla", "settings": {...build options...},
   "graphs": [{"split", "file", "nodes", "edges", "hash", "bytes" (the file's size),
               ...source and filter figures}],
   "rejected": [{"candidate", "reason", ...}], "candidates": <candidates examined>,
   "seconds": <build seconds so far>}

Every file is written atomically (`simulator.fileio`), graph files before the manifest that
lists them, so a killed build leaves a consistent folder that `DatasetStore` resumes from: the
candidates recorded in the manifest (accepted or rejected) are never examined again.
`read_manifest` checks every field and entry (ValueError naming the file, entry and field).
Resuming checks that every listed graph file exists with its recorded size, loading
(`load_split`) that it also parses to its recorded nodes and edges (`check_file`): a damaged
folder is a ValueError naming the file and saying how to recover, never a silent gap.

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
# Data spec kind -> the manifest `kind` of the folders it loads.
MANIFEST_KINDS = {"regal_data": "regal", "xla_data": "xla"}


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
      for entry in self.graphs:  # parsing them all would take minutes on REGAL's 12,000
        check_file(out, entry, parse=False)
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
    path = write_costgraph(graph, os.path.join(self.out, rel))
    entry = dict(split=split, file=rel, nodes=graph.num_nodes, edges=graph.num_edges,
                 hash=digest, bytes=os.path.getsize(path), **figures)
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
  if not isinstance(manifest, dict):
    raise ValueError(f"{path}: not a manifest (a JSON object is expected)")
  for key in ("kind", "settings", "graphs", "rejected", "candidates", "seconds"):
    if key not in manifest:
      raise ValueError(f"{path}: manifest field {key!r} is missing")
  _check_manifest(path, manifest)
  return manifest


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _check_manifest(path: str, manifest: Dict) -> None:
  """ValueError naming the manifest file, the entry (index and file) and the field where a
  field has the wrong type or value (hand edits, another program's JSON), instead of a
  KeyError or TypeError deep in the builder or loader."""
  if not isinstance(manifest["kind"], str) or not isinstance(manifest["settings"], dict):
    raise ValueError(f"{path}: manifest fields 'kind' (a string) and 'settings' (an object) "
                     f"have the wrong type")
  for key in ("candidates", "seconds"):
    value = manifest[key]
    ok = _is_int(value) if key == "candidates" else (
        isinstance(value, (int, float)) and not isinstance(value, bool))
    if not ok or not value >= 0:
      raise ValueError(f"{path}: manifest field {key!r} must be a number >= 0"
                       f"{' (an integer)' if key == 'candidates' else ''}, got {value!r}")
  for key in ("graphs", "rejected"):
    if not isinstance(manifest[key], list):
      raise ValueError(f"{path}: manifest field {key!r} must be a list, got "
                       f"{type(manifest[key]).__name__}")
  for i, entry in enumerate(manifest["graphs"]):
    where = f"{path}: graphs[{i}]"
    if not isinstance(entry, dict):
      raise ValueError(f"{where} must be an object, got {entry!r}")
    if isinstance(entry.get("file"), str):
      where += f" ({entry['file']})"
    for field, ok, want in (
        ("split", lambda v: v in SPLITS, f"one of {list(SPLITS)}"),
        ("file", lambda v: isinstance(v, str) and v, "a file path inside the folder"),
        ("hash", lambda v: isinstance(v, str) and v, "a topology hash string"),
        ("nodes", lambda v: _is_int(v) and v >= 1, "an integer >= 1"),
        ("edges", lambda v: _is_int(v) and v >= 0, "an integer >= 0")):
      if field not in entry:
        raise ValueError(f"{where}: field {field!r} is missing")
      if not ok(entry[field]):
        raise ValueError(f"{where}: field {field!r} must be {want}, got {entry[field]!r}")
    if "bytes" in entry and not (_is_int(entry["bytes"]) and entry["bytes"] >= 1):
      raise ValueError(f"{where}: field 'bytes' must be an integer >= 1, got "
                       f"{entry['bytes']!r}")
  for i, entry in enumerate(manifest["rejected"]):
    if not isinstance(entry, dict) or not isinstance(entry.get("reason"), str):
      raise ValueError(f"{path}: rejected[{i}] must be an object with a string field "
                       f"'reason', got {entry!r}")


def check_file(folder: str, entry: Dict, parse: bool = True) -> Optional[CompGraph]:
  """The graph file of manifest entry `entry`, checked: it exists, has the size the manifest
  recorded (`bytes`, where the entry has it) and, with `parse`, parses to the recorded numbers
  of nodes and edges; returns the graph (None without `parse`). ValueError saying the folder is
  damaged, naming the file, and how to recover, otherwise."""
  path = os.path.join(folder, entry["file"])
  fix = ("restore the file, or delete the folder and build it again "
         "(experiments/build_regal_data.py)")
  damaged = f"dataset folder {folder} is damaged: {entry['file']} (listed in {MANIFEST})"
  if not os.path.isfile(path):
    raise ValueError(f"{damaged} is missing; {fix}")
  size = os.path.getsize(path)
  if "bytes" in entry and size != entry["bytes"]:
    raise ValueError(f"{damaged} has {size} bytes, the manifest says {entry['bytes']} "
                     f"(truncated or changed); {fix}")
  if not parse:
    if not size:
      raise ValueError(f"{damaged} is empty; {fix}")
    return None
  try:
    graph = load_costgraph(path)
  except ValueError as e:
    raise ValueError(f"{damaged} does not parse ({e}); {fix}") from None
  if (graph.num_nodes, graph.num_edges) != (entry["nodes"], entry["edges"]):
    raise ValueError(f"{damaged} holds {graph.num_nodes} nodes and {graph.num_edges} edges, "
                     f"the manifest says {entry['nodes']} and {entry['edges']} (truncated or "
                     f"changed); {fix}")
  return graph


def parse_data_spec(spec: str) -> Tuple[str, str, Optional[int]]:
  """'regal_data:SPLIT[,dir=FOLDER][,limit=N]' (or 'xla_data:...') -> (folder, split, limit).

  The folder defaults to $GO_JAX_REGAL_DATA/regal (xla_data: .../regal_xla), the root being
  ./data where the variable is unset. ValueError naming the spec for a bad kind, split or key,
  or a key given twice.
  """
  return _parse_data_spec(spec)[1:]


def _parse_data_spec(spec: str) -> Tuple[str, str, str, Optional[int]]:
  """`parse_data_spec` with the spec's kind first (regal_data or xla_data)."""
  kind, sep, rest = str(spec).strip().partition(":")
  if not sep or kind not in DATA_KINDS:
    raise ValueError(f"data spec {spec!r}: expected one of "
                     f"{[k + ':SPLIT[,dir=...][,limit=N]' for k in DATA_KINDS]}")
  split, *items = [x.strip() for x in rest.split(",")]
  if split not in SPLITS:
    raise ValueError(f"data spec {spec!r}: unknown split {split!r}; splits: {list(SPLITS)}")
  root = os.environ.get(DATA_ENV_VAR) or "data"
  folder, limit = os.path.join(root, DATA_KINDS[kind]), None
  seen = set()
  for item in items:
    key, eq, value = item.partition("=")
    if key in seen:
      raise ValueError(f"data spec {spec!r}: key {key!r} given twice")
    seen.add(key)
    if key == "dir" and eq and value:
      folder = value
    elif key == "limit" and eq and value.isdigit() and int(value) > 0:
      limit = int(value)
    else:
      raise ValueError(f"data spec {spec!r}: bad item {item!r}; keys: dir=FOLDER, limit=N "
                       f"(N >= 1)")
  return kind, folder, split, limit


def load_split(spec_or_split: str, folder: Optional[str] = None,
               limit: Optional[int] = None) -> Tuple[List[str], List[CompGraph]]:
  """(names, graphs) of one split of a dataset folder, in manifest order.

  `spec_or_split` is a data spec ('regal_data:test,dir=data/regal,limit=100'; see
  `parse_data_spec`) or a bare split name with `folder` given. `limit`: the first `limit`
  graphs only, an integer >= 1 (as the spec's limit=N; None, the default: every graph); it
  overrides the spec's. A regal_data spec needs a folder of kind regal and an xla_data spec
  one of kind xla (the manifest's `kind`). A graph's name is its file stem (graph_<hash>), as
  in REGAL's dataset. ValueError for a bad limit, a folder of the other kind, a bad manifest
  or a listed graph file that is missing, truncated or does not parse (`check_file`).
  """
  if limit is not None and (not _is_int(limit) or limit < 1):
    raise ValueError(f"load_split: limit must be an integer >= 1 (None: every graph), got "
                     f"{limit!r}")
  kind = None
  if ":" in str(spec_or_split):
    kind, folder, split, spec_limit = _parse_data_spec(spec_or_split)
    limit = limit if limit is not None else spec_limit
  else:
    split = spec_or_split
    if split not in SPLITS or folder is None:
      raise ValueError(f"load_split({spec_or_split!r}): give a data spec "
                       f"('regal_data:SPLIT,...') or a split in {list(SPLITS)} and a folder")
  manifest = read_manifest(folder)
  want = MANIFEST_KINDS.get(kind)
  if want is not None and manifest["kind"] != want:
    hint = "".join(f"; use {k}:{split},dir={folder}" for k, v in MANIFEST_KINDS.items()
                   if v == manifest["kind"])
    raise ValueError(f"data spec {spec_or_split!r}: {folder} holds a dataset of kind "
                     f"{manifest['kind']!r} ({MANIFEST}), not {want!r}{hint}")
  entries = [g for g in manifest["graphs"] if g["split"] == split]
  if limit is not None:
    entries = entries[:limit]
  graphs = [check_file(folder, g) for g in entries]
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
           "read_manifest", "check_file", "parse_data_spec", "load_split", "acceptance"]
