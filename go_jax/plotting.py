"""Figures of simulated schedules and method comparisons (matplotlib, Agg, no pyplot state).

`plot_schedule` draws what `simulator.reference_simulate` computed for one action: a Gantt chart
with, per device, one row of ops and one row of its outgoing send channel (design.md 4, rule 3:
transfers leave a device one at a time), and below it the memory in use on every device over time
against its capacity (rule 7). It is the picture to look at when a placement is slow or runs out
of memory: idle gaps, a saturated send channel and the moment a device overflows are all visible.

Figures are built on `matplotlib.figure.Figure` directly (not pyplot) so that nothing global is
changed, no GUI backend is needed and figures are freed when they go out of scope. Bars are drawn
as one `PolyCollection` per row kind, so graphs of tens of thousands of ops still render in about
a second; op labels are only drawn for small graphs and only where they fit inside their bar.
PNGs are written atomically (temporary file in the same folder, then `os.replace`), so a reader
never sees a half-written file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Tuple

import numpy as np

from simulator import fileio

if TYPE_CHECKING:
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top


# matplotlib is imported where a figure is drawn, not with this module: it takes about half a
# second to import, and every launcher imports this module (for format_seconds / format_bytes,
# and through go_jax.harness) whether or not it plots.
def _colormap(name: str):
  from matplotlib import colormaps  # pylint: disable=g-import-not-at-top
  return colormaps[name]


def new_figure(**kwargs) -> "Figure":
  from matplotlib.figure import Figure  # pylint: disable=g-import-not-at-top,redefined-outer-name
  return Figure(**kwargs)


# Labels are never drawn for graphs with more ops than this (there would be no room anyway, and
# tens of thousands of Text artists make rendering slow).
MAX_LABELED_OPS = 400
_LABEL_FONTSIZE = 7
_ROW_INCHES = 0.32  # height of one Gantt row
_LEGEND_LINE_INCHES = 0.135  # height of one line of the memory legend (fontsize 7)
# Bounds that keep a figure of many devices readable and small: the Gantt rows share at most
# MAX_GANTT_INCHES (1100 devices drew a 96000-pixel-tall, 9 MB PNG in 20 s); the memory legend
# names at most MAX_LEGEND_DEVICES devices, those of the highest peaks.
MAX_GANTT_INCHES = 64.0
MAX_LEGEND_DEVICES = 64
_WIDTH_INCHES = 12.0
DPI = 110
MAX_TEXT_CHARS = 200  # longest text drawn (save_figure)

_TIME_UNITS = ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns"))
_BYTE_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1.0, "B"))


# ------------------------------------------------------------------ units
def time_unit(seconds: float) -> Tuple[float, str]:
  """(scale, name) of the largest unit in which `seconds` is >= 1 (seconds if it is 0)."""
  seconds = abs(float(seconds))
  for scale, name in _TIME_UNITS:
    if seconds >= scale:
      return scale, name
  return (1.0, "s") if seconds == 0 else _TIME_UNITS[-1]


def byte_unit(nbytes: float) -> Tuple[float, str]:
  """(scale, name) of the largest decimal byte unit in which `nbytes` is >= 1."""
  nbytes = abs(float(nbytes))
  for scale, name in _BYTE_UNITS:
    if nbytes >= scale:
      return scale, name
  return 1.0, "B"


def format_seconds(seconds: float, digits: int = 4) -> str:
  """Human-readable duration, e.g. '12.5 ms'."""
  if not np.isfinite(seconds):
    return str(seconds)
  scale, name = time_unit(seconds)
  return f"{seconds / scale:.{digits}g} {name}"


def format_bytes(nbytes: float, digits: int = 4) -> str:
  """Human-readable size, e.g. '3.2 GB'; 'inf' for an unbounded capacity, 'nan' for NaN (it
  read 'inf', an unbounded size, as did '-inf')."""
  if not np.isfinite(nbytes):
    return str(float(nbytes))
  scale, name = byte_unit(nbytes)
  return f"{nbytes / scale:.{digits}g} {name}"


# ------------------------------------------------------------------ output
def literal_text(fig: Figure) -> Figure:
  """Turns matplotlib's math text off in every text of `fig`: titles and labels hold graph
  names and file paths, and a '$' in one (`runs/m$x$.json`) was read as TeX, so the figure
  either failed to draw (`Unknown symbol`) or showed other text than the name. No figure of
  the project uses math text of its own. The numbers matplotlib's tick formatters write keep
  theirs: a log axis labels its ticks in math text ('$\\mathdefault{10^{0}}$'), which was drawn
  as that raw string (learning_curves); labels set as strings (method names under bars) are
  literal."""
  from matplotlib.text import Text  # pylint: disable=g-import-not-at-top
  from matplotlib import ticker  # pylint: disable=g-import-not-at-top
  numbers = (ticker.ScalarFormatter, ticker.LogFormatter, ticker.LogitFormatter)
  texts = fig.findobj(Text)  # first: listing an axis' children can add ticks to it
  generated = set()  # ids of the tick labels and offsets of matplotlib's number formatters
  for ax in fig.axes:
    for axis in (ax.xaxis, ax.yaxis):
      for formatter, ticks in ((axis.get_major_formatter(), axis.majorTicks),
                               (axis.get_minor_formatter(), axis.minorTicks)):
        if isinstance(formatter, numbers):
          generated.update(id(label) for tick in ticks for label in (tick.label1, tick.label2))
          generated.add(id(axis.offsetText))
  for text in texts:
    if id(text) not in generated:
      text.set_parse_math(False)
  return fig


def save_figure(fig: Figure, path: str) -> str:
  """Writes `fig` as PNG to `path` atomically (creating the folder), its text literal
  (`literal_text`) and no text longer than MAX_TEXT_CHARS (its start and end are kept: a
  12000-character graph name in a title made the PNG 120000 pixels wide); returns the path."""
  from matplotlib.text import Text  # pylint: disable=g-import-not-at-top
  for text in literal_text(fig).findobj(Text):
    if len(text.get_text()) > MAX_TEXT_CHARS:
      text.set_text(_cut(text.get_text(), MAX_TEXT_CHARS))
  with fileio.atomic_open(path, "wb", make_dirs=True) as fh:
    fig.savefig(fh, format="png", dpi=DPI, bbox_inches="tight")
  return path


# ------------------------------------------------------------------ drawing helpers
def _bars(x0: np.ndarray, x1: np.ndarray, y: np.ndarray, height: float) -> np.ndarray:
  """(M, 4, 2) rectangle vertices for bars [x0, x1] centred on rows y."""
  lo, hi = y - height / 2, y + height / 2
  return np.stack([np.stack([x0, lo], -1), np.stack([x0, hi], -1),
                   np.stack([x1, hi], -1), np.stack([x1, lo], -1)], axis=1)


def _op_colors(ops: np.ndarray) -> np.ndarray:
  """One colour per op id from a qualitative colormap, via a multiplicative hash of the id.

  A plain `id % 20` would give every device of a round-robin placement (op i on device i mod D)
  only the 20 / D colours congruent to its id, so devices would look differently shaded.
  """
  h = (np.asarray(ops, np.uint64) * np.uint64(2654435761)) % np.uint64(2**32)
  return _colormap("tab20")(((h >> np.uint64(16)) % np.uint64(20)).astype(np.int64))


def _add_bars(ax, x0, x1, y, height, colors, many: bool, alpha: float = 1.0, hatch=None):
  if len(x0) == 0:
    return
  verts = _bars(np.asarray(x0, float), np.asarray(x1, float), np.asarray(y, float), height)
  # With many tiny bars an edge in the face colour keeps sub-pixel ops visible; with few, a thin
  # dark edge separates back-to-back ops of similar colour.
  from matplotlib.collections import PolyCollection  # pylint: disable=g-import-not-at-top
  coll = PolyCollection(verts, facecolors=colors, alpha=alpha, hatch=hatch,
                        edgecolors="face" if many else "0.15",
                        linewidths=0.3 if many else 0.6)
  ax.add_collection(coll)


def _fits(ax, fig, widths_data: np.ndarray, texts: Sequence[str], x_span: float,
          fontsize: float) -> np.ndarray:
  """Which labels fit inside their bars, estimated from the axes width in pixels.

  A character is taken as 0.65 em wide (a little over DejaVu Sans' average), so that estimated
  fits never overlap their neighbours; measuring every Text would be far slower.
  """
  ax_px = ax.get_position().width * fig.get_figwidth() * fig.dpi
  bar_px = widths_data / max(x_span, 1e-300) * ax_px
  em_px = fontsize * fig.dpi / 72.0
  text_px = np.array([len(t) for t in texts]) * 0.65 * em_px + 4
  return bar_px >= text_px


def _op_label(graph, i: int) -> str:
  if graph.node_names is not None:
    return graph.node_names[i]
  return str(i)


def _check_inputs(graph, topology, result):
  n, d = graph.num_nodes, topology.num_devices
  for field in ("start", "finish", "placement"):
    shape = np.shape(getattr(result, field))
    if shape != (n,):
      raise ValueError(f"plot_schedule: result.{field} has shape {shape}, expected ({n},) for "
                       f"graph '{graph.name}' (pass the ReferenceResult of this graph)")
  place = np.asarray(result.placement)
  if np.any((place < 0) | (place >= d)):
    raise ValueError(f"plot_schedule: result.placement has device ids outside [0, {d}) of the "
                     f"{d}-device topology")
  if len(result.memory_events) != d:
    raise ValueError(f"plot_schedule: result has memory events for {len(result.memory_events)} "
                     f"devices, topology has {d}")


# ------------------------------------------------------------------ schedule
def plot_schedule(graph, topology, result, path: str, title: Optional[str] = None,
                  max_labeled_ops: int = MAX_LABELED_OPS) -> str:
  """Writes a PNG with a per-device Gantt chart (ops and send channel) and memory over time.

  Args:
    graph: the `simulator.CompGraph` that was simulated.
    topology: the `simulator.Topology` it ran on (capacities are read from it).
    result: `simulator.ReferenceResult` of `reference_simulate` (needs its timeline: placement,
      transfers and memory_events, which the batched `simulate` does not return).
    path: PNG file to write (atomically; the folder is created).
    title: figure title; default names the graph, size and makespan.
    max_labeled_ops: op and transfer labels are drawn only for graphs up to this many ops.

  Returns:
    `path`.
  """
  _check_inputs(graph, topology, result)
  n, d = graph.num_nodes, topology.num_devices
  start = np.asarray(result.start, float)
  finish = np.asarray(result.finish, float)
  place = np.asarray(result.placement, int)
  makespan = float(result.makespan)
  tscale, tname = time_unit(makespan)
  span = makespan / tscale if makespan > 0 else 1.0
  many = n > max_labeled_ops

  rows = 2 * d
  row_in = min(_ROW_INCHES, MAX_GANTT_INCHES / rows)
  gantt_h = max(1.6, row_in * rows + 0.6)
  # The memory legend has a line per device: the panel grows with D so that it fits beside it
  # (64 devices ran 8 inches below the figure). Margins are in inches, not fractions of a
  # figure whose height grows with D (they left 5-inch gaps at 64).
  mem_h = max(2.6, _LEGEND_LINE_INCHES * (min(d, MAX_LEGEND_DEVICES) + 2))
  top_in, gap_in, bottom_in = 0.7, 0.3, 0.55
  height = gantt_h + mem_h + top_in + gap_in + bottom_in
  fig = new_figure(figsize=(_WIDTH_INCHES, height), dpi=DPI)
  gs = fig.add_gridspec(2, 1, height_ratios=[gantt_h, mem_h],
                        hspace=gap_in / ((gantt_h + mem_h) / 2), top=1 - top_in / height,
                        bottom=bottom_in / height)
  ax_g = fig.add_subplot(gs[0])
  ax_m = fig.add_subplot(gs[1], sharex=ax_g)

  # Row layout: device k's ops at y = 2k, its send channel at y = 2k + 1 (y axis inverted).
  ops = np.arange(n)
  colors = _op_colors(ops)
  _add_bars(ax_g, start / tscale, finish / tscale, 2.0 * place, 0.8, colors, many)
  tr = result.transfers
  t_op = np.fromiter((t.op for t in tr), int, len(tr))
  t_src = np.fromiter((t.src for t in tr), int, len(tr))
  t_dst = np.fromiter((t.dst for t in tr), int, len(tr))
  t0 = np.fromiter((t.start for t in tr), float, len(tr)) / tscale
  t1 = np.fromiter((t.arrival for t in tr), float, len(tr)) / tscale
  _add_bars(ax_g, t0, t1, 2.0 * t_src + 1, 0.55, _op_colors(t_op), many, alpha=0.75,
            hatch=None if many else "///")

  ax_g.set_xlim(0, span * 1.01)
  if not many:
    labels = [_op_label(graph, i) for i in range(n)]
    ok = _fits(ax_g, fig, (finish - start) / tscale, labels, span * 1.01, _LABEL_FONTSIZE)
    for i in np.flatnonzero(ok):
      ax_g.text((start[i] + finish[i]) / 2 / tscale, 2.0 * place[i], labels[i], ha="center",
                va="center", fontsize=_LABEL_FONTSIZE, clip_on=True)
    tlabels = [f"{_op_label(graph, int(o))}\u2192{int(e)}" for o, e in zip(t_op, t_dst)]
    ok = _fits(ax_g, fig, t1 - t0, tlabels, span * 1.01, _LABEL_FONTSIZE - 1)
    for k in np.flatnonzero(ok):
      ax_g.text((t0[k] + t1[k]) / 2, 2.0 * t_src[k] + 1, tlabels[k], ha="center", va="center",
                fontsize=_LABEL_FONTSIZE - 1, clip_on=True,
                bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.7))

  ax_g.set_ylim(rows - 0.5, -0.5)
  busy = np.bincount(place, weights=finish - start, minlength=d)
  util = busy / makespan if makespan > 0 else np.zeros(d)
  # Each device's utilisation in its row's name: listed in the title, 64 devices' ran three
  # figure widths wide. Rows too thin for a name each: every k-th device's ops row is named.
  if row_in >= _ROW_INCHES / 2:
    ax_g.set_yticks(np.arange(rows))
    ax_g.set_yticklabels([f"dev {k} ops {util[k]:.0%}" if r == 0 else f"dev {k} send"
                          for k in range(d) for r in (0, 1)], fontsize=8)
  else:
    named = np.arange(0, d, int(np.ceil(_ROW_INCHES / 2 / (2 * row_in))))
    ax_g.set_yticks(2 * named)
    ax_g.set_yticklabels([f"dev {k} ops {util[k]:.0%}" for k in named], fontsize=8)
  if d > 1:
    ax_g.hlines(2 * np.arange(1, d) - 0.5, 0, 1, transform=ax_g.get_yaxis_transform(),
                color="0.75", lw=0.6)
  ax_g.axvline(makespan / tscale, color="crimson", lw=1.0, ls=":")
  ax_g.grid(axis="x", color="0.9", lw=0.5)
  ax_g.set_axisbelow(True)
  ax_g.tick_params(labelbottom=False)
  ax_g.set_title("schedule: ops per device (colour = op; % = device utilisation) and outgoing "
                 "transfers (label = op\u2192destination)", fontsize=9)

  _plot_memory(ax_m, topology, result, makespan, tscale)
  ax_m.set_xlabel(f"time ({tname})")

  if title is None:
    title = (f"{graph.name}: {n} ops, {graph.num_edges} edges on {d} devices, makespan "
             f"{format_seconds(makespan)}, {len(tr)} transfers"
             f"{', OUT OF MEMORY' if result.oom else ''}")
  fig.suptitle(title, fontsize=11, y=1 - 0.12 / height)  # in inches too: above the top margin
  return save_figure(fig, path)


def plot_fused_schedule(graph, topology, placement, priority, fuse, path: str,
                        title: Optional[str] = None,
                        max_labeled_ops: int = MAX_LABELED_OPS) -> str:
  """`plot_schedule` of one action with fusion (design.md 4.1): one bar per fused group,
  labelled by its members ("a+b+c"), from the reference simulation of the quotient graph."""
  from simulator import fusion, reference_simulate
  fg = fusion.fuse_graph(graph, placement, fuse)
  res = reference_simulate(fg.graph, topology, fg.placement,
                           np.asarray(priority, np.float64)[fg.roots])
  if title is None:
    title = (f"{graph.name}: {graph.num_nodes} ops in {fg.graph.num_nodes} groups, makespan "
             f"{format_seconds(res.makespan)}")
  return plot_schedule(fg.graph, topology, res, path, title, max_labeled_ops)


def distinct_colors(d: int) -> np.ndarray:
  """A distinct colour per device (or family): tab10 (tab20 up to 20, then evenly along
  'turbo'): tab10 alone gave devices k and k + 10 the same colour, so the legend could not
  tell them apart."""
  if d <= 10:
    return _colormap("tab10")(np.arange(d))
  if d <= 20:
    return _colormap("tab20")(np.arange(d))
  return _colormap("turbo")(np.linspace(0.0, 1.0, d))


def _plot_memory(ax, topology, result, makespan: float, tscale: float):
  """Step lines of bytes in use per device, dashed capacity lines where finite and on scale."""
  d = topology.num_devices
  cap = np.asarray(topology.mem_capacity, float)
  peak = np.asarray(result.peak_memory, float)
  top = max(float(peak.max(initial=0.0)), 1.0)
  # A capacity far above every peak would squash the curves flat; draw it only when on scale
  # and otherwise state it in the legend.
  on_scale = np.isfinite(cap) & (cap <= 2.5 * top)
  ymax = max(top, float(cap[on_scale].max(initial=0.0)))
  bscale, bname = byte_unit(ymax)
  from matplotlib.lines import Line2D  # pylint: disable=g-import-not-at-top
  dev_colors = distinct_colors(d)
  listed = np.arange(d)
  if d > MAX_LEGEND_DEVICES:
    listed = np.sort(np.argsort(-peak, kind="stable")[:MAX_LEGEND_DEVICES - 1])
  handles = []
  for k in range(d):
    ev = np.asarray(result.memory_events[k], float).reshape(-1, 2)
    t = np.append(ev[:, 0], max(makespan, ev[-1, 0] if len(ev) else 0.0))
    b = np.append(ev[:, 1], ev[-1, 1] if len(ev) else 0.0)
    label = f"dev {k} (peak {format_bytes(peak[k], 3)}"
    label += f", cap {format_bytes(cap[k], 3)})" if np.isfinite(cap[k]) else ")"
    if np.isfinite(cap[k]) and not on_scale[k]:
      label = label[:-1] + ", off scale)"
    if np.isfinite(cap[k]) and peak[k] > cap[k]:
      label += " OOM"
    ax.step(t / tscale, b / bscale, where="post", color=dev_colors[k], lw=1.2)
    if k in listed:
      handles.append(Line2D([], [], color=dev_colors[k], lw=1.2, label=label))
    if on_scale[k]:
      ax.axhline(cap[k] / bscale, color=dev_colors[k], ls="--", lw=1.0, alpha=0.9)
  if len(listed) < d:
    rest = np.setdiff1d(np.arange(d), listed)
    handles.append(Line2D([], [], color="none", label=f"{len(rest)} more devices, peak at most "
                          f"{format_bytes(peak[rest].max(), 3)}"))
  if np.any(on_scale):
    handles.append(Line2D([], [], color="0.3", ls="--", lw=1.0, label="capacity"))
  ax.axvline(makespan / tscale, color="crimson", lw=1.0, ls=":")
  ax.set_ylim(0, ymax / bscale * 1.12)
  ax.set_ylabel(f"memory in use ({bname})")
  ax.grid(color="0.9", lw=0.5)
  ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.005, 1.0),
            borderaxespad=0.0, frameon=False)


# ------------------------------------------------------------------ comparisons
def plot_bars(labels: Sequence[str], values: Sequence[float], path: str,
              title: Optional[str] = None, ylabel: Optional[str] = None,
              errors: Optional[Sequence[float]] = None, reference: Optional[float] = None,
              highlight_min: bool = True) -> str:
  """Writes a bar chart comparing one figure across methods (e.g. makespan per method).

  Args:
    labels: one name per bar (cut to MAX_BAR_LABEL_CHARS characters).
    values: one value per bar (finite).
    path: PNG file to write atomically.
    title, ylabel: text of the chart.
    errors: optional error bars, one per bar: half-heights of shape (m,) (e.g. std over
      seeds), or (2, m) for the lengths below and above each bar (e.g. lowest and highest
      seed).
    reference: optional value drawn as a dashed horizontal line (e.g. the single-device time);
      finite.
    highlight_min: colour the smallest bar differently (the best when lower is better).

  Returns:
    `path`.
  """
  labels = [str(s) for s in labels]
  values = np.asarray(values, float)
  if values.ndim != 1 or len(labels) != values.shape[0] or not labels:
    raise ValueError(f"plot_bars: need one value per label, got {len(labels)} labels and "
                     f"values of shape {values.shape}")
  if not np.all(np.isfinite(values)):
    raise ValueError(f"plot_bars: values must be finite, got {values.tolist()}")
  if reference is not None and not np.isfinite(float(reference)):  # no line was drawn
    raise ValueError(f"plot_bars: reference must be finite, got {reference}")
  if errors is not None:
    errors = np.asarray(errors, float)
    if errors.shape not in (values.shape, (2,) + values.shape):
      raise ValueError(f"plot_bars: errors has shape {errors.shape}, expected {values.shape} "
                       f"or {(2,) + values.shape}")
    if not np.all(np.isfinite(errors)) or np.any(errors < 0):
      raise ValueError(f"plot_bars: errors must be finite and non-negative, got "
                       f"{errors.tolist()}")
  m = len(labels)
  fig = new_figure(figsize=(max(4.0, 0.7 * m + 2.0), 3.6), dpi=DPI)
  ax = fig.add_subplot(1, 1, 1)
  colors = np.tile(np.array(_colormap("tab10")(0)), (m, 1))
  if highlight_min:
    colors[int(np.argmin(values))] = _colormap("tab10")(2)
  x = np.arange(m)
  ax.bar(x, values, yerr=errors, color=colors, capsize=3 if errors is not None else 0)
  tops = values if errors is None else values + (errors if errors.ndim == 1 else errors[1])
  for xi, v, top in zip(x, values, tops):  # the value above its error bar, not across it
    ax.annotate(f"{v:.4g}", (xi, top), xytext=(0, 2), textcoords="offset points", ha="center",
                va="bottom", fontsize=7)
  if reference is not None:
    ax.axhline(float(reference), color="0.3", ls="--", lw=1.0)
  ax.set_xticks(x)
  shown = [_cut(s, MAX_BAR_LABEL_CHARS) for s in labels]
  tilt = m > 4 or max(len(s) for s in shown) > _UPRIGHT_LABEL_CHARS
  ax.set_xticklabels(shown, rotation=30 if tilt else 0, ha="right" if tilt else "center",
                     fontsize=8)
  if ylabel:
    ax.set_ylabel(ylabel)
  if title:
    ax.set_title(title, fontsize=10)
  ax.grid(axis="y", color="0.9", lw=0.5)
  ax.set_axisbelow(True)
  ax.margins(y=0.12)
  return save_figure(fig, path)


# A bar's label is cut to at most this many characters (its start and end, joined by an
# ellipsis): a 300-character method name ran across every other bar and made the PNG five
# times as wide. Labels longer than _UPRIGHT_LABEL_CHARS are tilted so neighbours do not meet.
MAX_BAR_LABEL_CHARS = 40
_UPRIGHT_LABEL_CHARS = 12


def _cut(text: str, chars: int) -> str:
  """`text` if it has at most `chars` characters, else its start and end joined by '\u2026'."""
  if len(text) <= chars:
    return text
  head = (chars - 1) * 2 // 3
  return text[:head] + "\u2026" + text[len(text) - (chars - 1 - head):]
