"""The learning curves of a training run (`<workdir>/learning_curves.png`, written by
`go_jax.training.evaluation`): per graph family, the greedy action's and the best of K sampled
actions' objective ratio to the reference method, over PPO updates. Drawn with
`go_jax.plotting`'s figure, colours and atomic save; a module of its own so that plotting.py
stays one concern (schedules and comparison bars).
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from go_jax import plotting


def learning_curves(rows: Sequence[dict], path: str, samples: Optional[int] = None,
                    title: Optional[str] = None) -> str:
  """Writes the learning curves of a training run: per graph family, the greedy action's and
  the best of K sampled actions' objective ratio to the reference method, over updates.

  Args:
    rows: dicts with "step", "family", "greedy_ratio", "best_ratio" (go_jax.training.evaluation
      .checkpoint_curve; family "all" is drawn thick and black) and optionally "seconds".
    path: PNG file to write atomically.
    samples: K, for the label of the second panel.

  ValueError naming the row where one lacks "step" or "family" or a ratio is not a positive
  finite number (a log axis cannot show it: it was silently left out, an empty panel for a
  curve of NaNs); a None ratio is no point.
  """
  rows = [r for r in rows if r.get("greedy_ratio") is not None]
  if not rows:
    raise ValueError("learning_curves: no rows to plot")
  for r in rows:
    for key in ("step", "family"):
      if r.get(key) is None:
        raise ValueError(f"learning_curves: a row has no {key!r}: {dict(r)}")
    for key in ("greedy_ratio", "best_ratio"):
      value = r.get(key)
      if value is not None and not (isinstance(value, (int, float, np.number)) and
                                    np.isfinite(value) and value > 0):
        raise ValueError(f"learning_curves: {key} {value!r} of family {r['family']!r} at step "
                         f"{r['step']} is not a positive finite ratio")
  present = {r["family"] for r in rows}
  families = sorted(present - {"all"}) + ["all"] * ("all" in present)
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  first_step, last_step = min(r["step"] for r in rows), max(r["step"] for r in rows)
  fig = plotting.new_figure(figsize=(11.0, 4.0), dpi=plotting.DPI)
  colors = plotting.distinct_colors(len(families))
  for k, (key, label) in enumerate((("greedy_ratio", "greedy action"),
                                    ("best_ratio", f"best of {samples or 'K'} samples"))):
    ax = fig.add_subplot(1, 2, k + 1)
    for j, fam in enumerate(families):
      pts = sorted((r["step"], r[key]) for r in rows
                   if r["family"] == fam and r.get(key) is not None)
      if not pts:
        continue
      x, y = zip(*pts)
      if fam == "all":
        ax.plot(x, y, color="black", lw=2.2, marker="o", ms=3, label="all (geo-mean)")
      else:
        ax.plot(x, y, color=colors[j], lw=1.2, marker=".", ms=3, label=fam)
    ax.axhline(1.0, color="0.3", ls="--", lw=1.0)
    ax.set_yscale("log")
    ax.set_xlabel("PPO update (0: after imitation)")
    # Updates are whole numbers: one point got ticks at -0.04 ... 0.04.
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    if last_step - first_step < 2:
      ax.set_xlim(first_step - 1, last_step + 1)
    ax.set_ylabel("objective / reference (log)")
    ax.set_title(label, fontsize=10)
    ax.grid(color="0.9", lw=0.5)
  last = max(rows, key=lambda r: r["step"])
  secs = last.get("seconds")
  fig.suptitle(title or ("learning curves per training family" +
                         (f" ({secs / 60:.0f} min of training)" if secs and np.isfinite(secs)
                          else "")), fontsize=11)
  # Beside the panels, in columns of at most 16: inside, 30 families ran over the curves and
  # below the figure.
  fig.axes[-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                      borderaxespad=0.0, ncol=-(-len(families) // 16), frameon=False)
  return plotting.save_figure(fig, path)
