"""The REGAL table's config (experiments/regal_comparison.py; config
experiments/configs/regal_table.py): `as_settings` turns it into checked plain data before any
cell, so that a bad field is one line naming it (the launcher's exit 1) rather than every cell's
error, and `topology_spec_for` gives the topology spec of one device count.

Kept apart from the run (cells, resuming, the table and its plot) so that each module reads as
one concern; experiments.regal_comparison re-exports both names.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Sequence

from experiments import cli


def as_settings(config) -> Dict[str, Any]:
  """The config as plain data, checked: ValueError naming the field for anything unusable
  (unknown method, reference not among the methods, bad device count or objective, ...)."""
  from go_jax import methods, objectives  # pylint: disable=g-import-not-at-top
  cfg = cli.plain(config)
  missing = [k for k in ("methods", "reference", "datasets", "device_counts", "topology",
                         "seeds", "objective", "budget") if k not in cfg]
  if missing:
    raise ValueError(f"the config has no field(s) {missing}")
  cfg.setdefault("method_options", {})
  cfg.setdefault("schedule_placement", "gp_dfs")
  cfg.setdefault("warmup", True)
  cfg.setdefault("no_warmup", [])
  cfg.setdefault("plots", True)
  cfg.setdefault("fail_fast", False)
  cfg.setdefault("save_seconds", 5.0)
  names = [str(m) for m in cfg["methods"]]
  if not names or len(set(names)) != len(names):
    raise ValueError(f"config.methods: give distinct method names, got {names}")
  for name in names + [cfg["schedule_placement"]]:
    methods.get(name)  # ValueError: unknown method (the message lists the available ones)
  if cfg["reference"] not in names:
    raise ValueError(f"config.reference={cfg['reference']!r} is not in config.methods {names}")
  for name in names:  # a schedule method runs on config.schedule_placement's placement
    kind = methods.get(name).kind
    if kind not in ("placement", "joint", "schedule"):
      raise ValueError(f"config.methods: {name!r} is a {kind} method; the table takes "
                       "placement, joint and schedule methods")
  if methods.get(cfg["schedule_placement"]).kind == "schedule":
    raise ValueError(f"config.schedule_placement={cfg['schedule_placement']!r} is a schedule "
                     f"method; give a placement or joint method")
  options = cfg["method_options"]
  if not isinstance(options, Mapping):
    raise ValueError(f"config.method_options must map method -> options, got {options!r}")
  for name, opts in options.items():
    spec = methods.get(name)
    bad = sorted(set(opts) - set(spec.defaults))
    if bad:
      raise ValueError(f"config.method_options.{name}: no option(s) {bad}; options: "
                       f"{sorted(spec.defaults)}")
  objectives.get_objective(cfg["objective"])
  counts = cfg["device_counts"]
  if not counts or not all(isinstance(d, int) and d >= 1 for d in counts):
    raise ValueError(f"config.device_counts: give device counts >= 1, got {counts}")
  if "{devices}" not in cfg["topology"] and len(counts) > 1:
    raise ValueError(f"config.topology={cfg['topology']!r}: put '{{devices}}' where the device "
                     f"count goes (e.g. 'nvlink{{devices}}')")
  if len(set(counts)) != len(counts):
    raise ValueError(f"config.device_counts: a count is given twice: {list(counts)}")
  from simulator import topology_spec  # pylint: disable=g-import-not-at-top
  for d in counts:  # the tables are labelled by D: the topology must have D devices
    spec = topology_spec_for(cfg, d)
    try:
      have = topology_spec.parse_topology(spec).base().num_devices
    except ValueError as e:
      raise ValueError(f"config.topology: {e}") from None
    if have != d:
      raise ValueError(f"config.topology={cfg['topology']!r}: {spec!r} has {have} devices, not "
                       f"the {d} of config.device_counts")
  seeds = list(cfg["seeds"])
  if not seeds:
    raise ValueError("config.seeds is empty")
  # the one seed rule of the sweeps (methods.check_seed): 1.5 or True would run as seed 1, and
  # a seed above methods.MAX_SEED would silently repeat another seed's answer
  seeds = [methods.check_seed(x, f"config.seeds[{i}]") for i, x in enumerate(seeds)]
  if len(set(seeds)) != len(seeds):
    raise ValueError(f"config.seeds: give distinct seeds, got {seeds}")
  cfg["seeds"] = seeds
  if cfg["budget"] is not None and int(cfg["budget"]) < 1:
    raise ValueError(f"config.budget must be >= 1, got {cfg['budget']}")
  _check_generation_budget(cfg, names)
  if not isinstance(cfg["datasets"], Mapping) or not cfg["datasets"]:
    raise ValueError(f"config.datasets must map a name to a data spec or graph specs, got "
                     f"{cfg['datasets']!r}")
  return cfg


def topology_spec_for(cfg, devices: int) -> str:
  return str(cfg["topology"]).replace("{devices}", str(devices))


_BRKGA_FIELDS = ("population", "elite_frac", "mutant_frac", "elite_bias")


def _check_generation_budget(cfg, names: Sequence[str]) -> None:
  """ValueError naming config.budget (or the method's evaluations option) when a BRKGA
  method's budget is below one of its generations: `solve` would refuse every cell."""
  from go_jax import methods  # pylint: disable=g-import-not-at-top
  from go_jax.methods import evolution  # pylint: disable=g-import-not-at-top
  for name in names:
    opts = dict(methods.get(name).defaults, **cfg["method_options"].get(name, {}))
    if not all(opts.get(k) is not None for k in _BRKGA_FIELDS):
      continue  # not a BRKGA (regal's population is its checkpoint's)
    per_gen = evolution.generation_evaluations(opts, f"config.method_options.{name}")
    if cfg["budget"] is not None and int(cfg["budget"]) < per_gen:
      raise ValueError(f"config.budget={cfg['budget']} is below one generation of {name} "
                       f"({per_gen} evaluations: population - elites)")
    if cfg["budget"] is None and int(opts["evaluations"]) < per_gen:
      raise ValueError(f"config.method_options.{name}.evaluations={opts['evaluations']} is "
                       f"below one generation ({per_gen} evaluations: population - elites)")
