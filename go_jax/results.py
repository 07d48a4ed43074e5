"""What go-jax-evaluate, go-jax-place and go-jax-transfer share: the row, the results folder and
the Markdown table.

A row is a flat dict of `COLUMNS` (one per method answer on one instance, as the simulator
scores it; a method with stages, such as GO's zero-shot and fine-tuned answers, gives one row
per stage). A results folder holds

  results.json  {"launcher": NAME, "config": ..., "rows": [...], ...}: the store a run resumes
                from; NAME says which launcher wrote it, so that another launcher pointed at the
                same folder stops with a ValueError naming both instead of misreading it
  results.csv   the rows, one line each
  results.md    the launcher's report

all written atomically. Values are formatted with their objective's unit
(`objectives.Objective.format`); an infeasible answer never shows its penalty objective, only
"infeasible (needs X / capacity Y)".
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import hashlib
import json
import math
import os
from typing import Any, Dict, Iterable, Mapping, Optional, Sequence

import numpy as np

from go_jax import objectives
from simulator import fileio

JSON_NAME, CSV_NAME, MD_NAME = "results.json", "results.csv", "results.md"
LAUNCHERS = {"evaluate": "go-jax-evaluate", "place": "go-jax-place",
             "transfer": "go-jax-transfer"}

# Row fields, in CSV order.
COLUMNS = (
    "method", "label", "stage", "method_kind", "graph", "graph_name", "nodes", "edges",
    "topology", "preset", "devices", "mem_capacity", "mem_capacities", "mem_reference", "seed",
    "objective_kind", "budget", "budget_seconds", "placement_from", "objective", "makespan",
    "peak_memory", "feasible", "reason", "lower_bound", "gap", "search_seconds", "evaluations",
    "updates", "resimulated_objective", "agrees", "error")
# A row's identity within a results folder (label: the method's name in the tables).
KEY_FIELDS = ("label", "graph", "topology", "seed", "objective_kind", "stage")


def finite(x) -> Optional[float]:
  """JSON-safe float: None for None, NaN and inf (strict JSON has neither)."""
  if x is None:
    return None
  x = float(x)
  return x if math.isfinite(x) else None


def empty_row(**fields) -> Dict[str, Any]:
  """A row with every column (None) and `fields` set; ValueError on an unknown field."""
  unknown = sorted(set(fields) - set(COLUMNS))
  if unknown:
    raise ValueError(f"unknown row field(s) {unknown}; fields: {list(COLUMNS)}")
  row = {c: None for c in COLUMNS}
  row.update(fields)
  return row


def row_key(row: Mapping[str, Any]) -> tuple:
  return tuple(row.get(k) for k in KEY_FIELDS)


STAGE_TEXT = {"zero-shot greedy": "zero-shot (greedy)"}


def stage_text(stage: Optional[str], budget_seconds: Optional[float] = None,
               updates: Optional[int] = None) -> str:
  """'zero-shot greedy' -> 'zero-shot (greedy)', 'zero-shot best of 8' -> 'zero-shot (best of
  8)', 'fine-tuned' -> 'fine-tuned (60s)' with a time budget, else 'fine-tuned (3 updates)';
  '' for no stage."""
  if not stage:
    return ""
  if stage.startswith("zero-shot best of"):
    return f"zero-shot ({stage[len('zero-shot '):]})"
  if stage == "fine-tuned" and budget_seconds:
    return f"fine-tuned ({budget_seconds:g}s)"
  if stage == "fine-tuned" and updates is not None:
    return f"fine-tuned ({updates} update{'' if updates == 1 else 's'})"
  return STAGE_TEXT.get(stage, stage)


def row_name(row: Mapping[str, Any]) -> str:
  """A row's name in the tables: its label (the method's name) and its stage, if any."""
  label = row.get("label") or row["method"]
  stage = stage_text(row.get("stage"), row.get("budget_seconds"), row.get("updates"))
  return f"{label} {stage}".strip()


# ------------------------------------------------------------------ memory and values
def capacity_text(capacities) -> str:
  """Per-device capacities in words: '4 x 16 GB', '2 x 32 GB, 2 x 16 GB', 'unbounded'."""
  caps = np.asarray(getattr(capacities, "mem_capacity", capacities), np.float64).ravel()
  if caps.size and np.all(np.isinf(caps)):
    return "unbounded"
  from go_jax import plotting  # pylint: disable=g-import-not-at-top  (matplotlib: lazy)
  groups: Dict[float, int] = {}
  for c in caps.tolist():  # in device order, equal capacities counted together
    groups[c] = groups.get(c, 0) + 1
  return ", ".join(f"{n} x {plotting.format_bytes(c)}" for c, n in groups.items())


def _row_capacities(row: Mapping[str, Any]) -> list:
  """A row's per-device capacities in bytes (JSON's None back to inf); the minimum alone for
  rows that recorded only it."""
  caps = row.get("mem_capacities") or [row.get("mem_capacity")]
  return [math.inf if c is None else c for c in caps]


def infeasible_text(row: Mapping[str, Any]) -> str:
  """'infeasible (needs X / capacity Y)' of an infeasible row: its peak device memory against
  the per-device capacity (the penalty objective is never shown)."""
  from go_jax import plotting  # pylint: disable=g-import-not-at-top
  need = row.get("peak_memory")
  caps = _row_capacities(row)
  cap = capacity_text(caps) if row.get("mem_capacities") else plotting.format_bytes(caps[0])
  return (f"infeasible (needs {plotting.format_bytes(need) if need is not None else '?'} / "
          f"capacity {cap})")


def value_text(row: Mapping[str, Any], value: Optional[float] = None) -> str:
  """A row's objective (or `value`) in its unit, or its infeasibility, or 'error'."""
  if row.get("error"):
    return "error"
  if row.get("feasible") is False:
    return infeasible_text(row)
  obj = objectives.get_objective(row.get("objective_kind") or "makespan")
  return obj.format(row.get("objective") if value is None else value)


def no_feasible_text(rows: Sequence[Mapping[str, Any]]) -> Optional[str]:
  """The plain statement when rows ran but none is feasible (None if some row is feasible or
  none ran): no method found a feasible placement, and what the least-overflowing one needs."""
  ran = [r for r in rows if not r.get("error") and r.get("objective") is not None]
  if not ran or any(r.get("feasible") for r in ran):
    return None
  best = min(ran, key=lambda r: r["objective"])  # infeasible objectives grow with overflow
  from go_jax import plotting  # pylint: disable=g-import-not-at-top
  caps = _row_capacities(best)
  return (f"no method found a feasible placement: the least memory any needs is "
          f"{plotting.format_bytes(best['peak_memory'])} on its fullest device ({row_name(best)}), "
          f"against a capacity of {capacity_text(caps)} per device")


# ------------------------------------------------------------------ tables
def markdown_table(head: Sequence[str], body: Iterable[Sequence[Any]],
                   align: Optional[Sequence[str]] = None) -> str:
  """A Markdown table; `align` per column: 'l' or 'r' (default: left). A '|' in a cell, head
  included (a pivot's columns are method labels), reads '/': it would split the cell."""
  align = align or ["l"] * len(head)
  cell = lambda c: "-" if c is None else str(c).replace("|", "/").replace("\n", " ")
  lines = ["| " + " | ".join(map(cell, head)) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
  for cells in body:
    lines.append("| " + " | ".join(map(cell, cells)) + " |")
  return "\n".join(lines)


# ------------------------------------------------------------------ the results folder
def _writer_of(data: Mapping[str, Any]) -> str:
  """Which launcher wrote a results.json (files from before it was recorded: by shape)."""
  if "launcher" in data:
    return str(data["launcher"])
  if "verdict" in data:
    return "place"
  return "evaluate" if "config" in data else "transfer"


class StoreError(ValueError):
  """A results.json that cannot be resumed from (not a results file, another launcher's, a
  damaged row), or a folder another run writes; the message starts with the file (or --out=),
  so that a launcher reports it as it is, not as a fault of its config."""
  names_the_file = True  # (experiments.cli.run_resumable_table reports it without the config)


@contextlib.contextmanager
def sole_writer(out: str, what: str = "a sweep"):
  """Holds an exclusive lock on the folder `out` (created) while a run writes its results
  there: a second run pointed at the same folder meanwhile (the command started twice, a job
  re-queued while the first still runs) is a StoreError at once, not two writers each
  rewriting the file with only its own rows, so that one's rows are lost. The lock is the
  folder's own (`flock`, no extra file) and ends with the process, however it ends; where the
  filesystem has no such locks, runs are not guarded."""
  os.makedirs(out, exist_ok=True)
  fd = os.open(out, os.O_RDONLY)
  try:
    try:
      fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
      raise StoreError(f"--out={out}: another run of {what} is writing its results there; "
                       "wait for it to end, or give another --out folder") from None
    except OSError:  # e.g. a network filesystem without flock: unguarded
      pass
    yield
  finally:
    os.close(fd)  # releases the lock


# Row fields that hold a number or None (JSON null: not finite), and one that holds a list of
# them; a stored row with anything else there is damaged.
NUMBER_FIELDS = ("nodes", "edges", "devices", "mem_capacity", "mem_reference", "seed", "budget",
                 "budget_seconds", "objective", "makespan", "peak_memory", "lower_bound", "gap",
                 "search_seconds", "evaluations", "updates", "resimulated_objective")
NUMBER_LIST_FIELDS = ("mem_capacities",)


def _is_number(value) -> bool:
  return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def check_row_numbers(row: Mapping[str, Any], index: int, path: str) -> None:
  """StoreError naming the file, the row (its index, label and key) and the field, for a
  stored row whose number field holds something else (an edit, another tool)."""
  for field in NUMBER_FIELDS + NUMBER_LIST_FIELDS:
    value = row.get(field)
    if field in NUMBER_LIST_FIELDS:
      ok = value is None or (isinstance(value, list) and all(_is_number(v) for v in value))
    else:
      ok = _is_number(value)
    if not ok:
      what = row_name(row) if isinstance(row.get("label") or row.get("method"), str) else "?"
      raise StoreError(
          f"{path}: row {index} ({what} on {row.get('graph')!r} / {row.get('topology')!r}, "
          f"seed {row.get('seed')!r}, {row.get('objective_kind')}): field {field!r} is "
          f"{value!r}, not a number{' list' if field in NUMBER_LIST_FIELDS else ''}; fix or "
          "delete that row, or give another --out folder")


def load(out: str, launcher: str) -> Optional[Dict[str, Any]]:
  """`<out>/results.json` if `launcher` wrote it, None if there is none.

  Raises:
    StoreError (a ValueError): the file is not a results file, another launcher wrote it (the
      message names the folder and that launcher), or a row is damaged: a key field or its
      result missing, or a number field holding something else (the message names the file,
      the row's index and key, and the field).
  """
  path = os.path.join(out, JSON_NAME)
  if not os.path.exists(path):
    return None
  try:
    with open(path) as fh:
      data = json.load(fh)
  except (OSError, json.JSONDecodeError, RecursionError) as e:
    raise StoreError(f"{path}: not a go-jax results file ({e})") from e
  if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
    raise StoreError(f"{path}: not a go-jax results file (expected an object with 'rows')")
  writer = _writer_of(data)
  if writer != launcher:
    raise StoreError(
        f"--out={out} holds results of {LAUNCHERS.get(writer, writer)} ({path}); "
        f"{LAUNCHERS.get(launcher, launcher)} cannot add to them: give another --out folder")
  data["rows"] = [_upgrade(r, path) for r in data["rows"]]
  for i, r in enumerate(data["rows"]):
    check_row_numbers(r, i, path)
  return data


def load_store(out: Optional[str], launcher: str) -> Dict[str, Any]:
  """{"rows": [...], "cell_settings": {cell_text(key): settings}} of `<out>/results.json`
  (both empty where there is none, or for out None): what a sweep resumes from."""
  data = load(out, launcher) if out else None
  if data is None:
    return {"rows": [], "cell_settings": {}}
  made_with = data.get("cell_settings")
  return {"rows": data["rows"], "cell_settings": made_with if isinstance(made_with, dict) else {}}


def cell_record(options: Mapping[str, Any], budget, schedule_placement,
                placement_options: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
  """A sweep cell's settings as results.json's cell_settings records them: its method options,
  the budget, the placement a scheduler orders (and that method's options, where any are
  given) and, for an option naming a checkpoint, its parameters' sha256 (a policy retrained in
  place under the same path is another cell). JSON-normalised, so that a record read back
  compares equal to the one written."""
  value = {"options": dict(options), "budget": budget, "schedule_placement": schedule_placement}
  if placement_options:  # only where given: records written before this field stay equal
    value["schedule_placement_options"] = dict(placement_options)
  digest = _checkpoint_digest(options.get("checkpoint"))
  if digest is not None:
    value["checkpoint_sha256"] = digest
  return json.loads(json.dumps(value, sort_keys=True, default=str))


def _checkpoint_digest(checkpoint) -> Optional[str]:
  """sha256 of a checkpoint option's parameter file (a shipped name or a folder), or None
  where there is none (yet: a row pretrained just before its cell runs)."""
  if not isinstance(checkpoint, str) or not checkpoint:
    return None
  from go_jax import pretrained  # pylint: disable=g-import-not-at-top
  folder = pretrained.available().get(checkpoint, checkpoint)
  path = os.path.join(os.path.expanduser(folder), pretrained.PARAMS_NAME)
  if not os.path.isfile(path):
    return None
  with open(path, "rb") as fh:
    return hashlib.sha256(fh.read()).hexdigest()


def cell_text(key: Sequence[Any]) -> str:
  """A sweep cell's key as the JSON text that names it in results.json's cell_settings."""
  return json.dumps(list(key))


def _upgrade(row: Mapping[str, Any], path: str) -> Dict[str, Any]:
  """A stored row in the current format: rows of go-jax-evaluate from before stages (no
  label) get label = method and no stage; other rows of an older format are refused."""
  if not isinstance(row, Mapping) or "method" not in row:
    raise StoreError(f"{path}: rows in an older or unknown format (no 'method'); give another "
                     "--out folder (or delete this one) to start afresh")
  if "label" in row:
    # A damaged row (an edit, another tool) must not pass for a finished cell or break the
    # report later: every key field, and a result unless the row records an error.
    need = KEY_FIELDS + (() if row.get("error") else ("objective", "feasible"))
    missing = [k for k in need if k not in row]
    if missing:
      raise StoreError(f"{path}: a row of {row.get('method')!r} has no field(s) {missing}; "
                       "give another --out folder (or delete this one) to start afresh")
    return dict(row)
  return empty_row(**{k: v for k, v in row.items() if k in COLUMNS}, label=row["method"])


def write_json(out: str, launcher: str, payload: Mapping[str, Any]) -> str:
  """Writes `<out>/results.json` = {"launcher": launcher, **payload} atomically."""
  return fileio.write_json(os.path.join(out, JSON_NAME), {"launcher": launcher, **payload})


def write_csv(out: str, rows: Sequence[Mapping[str, Any]],
              columns: Sequence[str] = COLUMNS) -> str:
  """Writes `<out>/results.csv` (the `columns` of every row) atomically; returns its path."""
  path = os.path.join(out, CSV_NAME)
  with fileio.atomic_open(path, "w", make_dirs=True) as fh:
    writer = csv.DictWriter(fh, fieldnames=list(columns), lineterminator="\n",
                            extrasaction="ignore")
    writer.writeheader()
    writer.writerows([{c: ("" if r.get(c) is None else r.get(c)) for c in columns}
                      for r in rows])
  return path


def write_markdown(out: str, text: str) -> str:
  path = os.path.join(out, MD_NAME)
  with fileio.atomic_open(path, "w", make_dirs=True) as fh:
    fh.write(text if text.endswith("\n") else text + "\n")
  return path
