"""Tests of go_jax.plotting: PNGs are written (atomically) for small and mid-size schedules."""

import os
import struct

import numpy as np
import pytest

from simulator import CompGraph, Topology, reference_simulate
from simulator.sources import synthetic
from go_jax import plotting, plotting_curves

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def diamond():
  """design.md section 4 worked example: a->b, a->c, b->d, c->d; costs 1, 2, 3, 1; outputs 1 B."""
  return CompGraph(cost=[1.0, 2.0, 3.0, 1.0], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                   out_bytes=[1.0] * 4, name="diamond", node_names=["a", "b", "c", "d"])


def layered(n=300, width=20, seed=0):
  """A random layered DAG (about 2 predecessors per op)."""
  return synthetic.layered_dag(n, width, seed=seed)


def assert_png(path):
  assert os.path.isfile(path)
  with open(path, "rb") as fh:
    head = fh.read(8)
  assert head == PNG_MAGIC
  assert os.path.getsize(path) > 1000
  leftovers = [f for f in os.listdir(os.path.dirname(path)) if f.startswith(".tmp_")]
  assert not leftovers, leftovers


def test_worked_example(tmp_path):
  g = diamond()
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.5, mem_capacity=3.0)
  res = reference_simulate(g, topo, [0, 0, 1, 0], np.zeros(4))
  np.testing.assert_allclose(res.start, [0, 1, 2.5, 7])  # the figure shows the documented run
  path = str(tmp_path / "sub" / "diamond.png")  # the folder is created
  assert plotting.plot_schedule(g, topo, res, path, title="worked example") == path
  assert_png(path)


def test_mid_size_graph_and_overwrite(tmp_path):
  g = layered()
  topo = Topology.uniform(3, bandwidth=1e9, latency=1e-5, mem_capacity=2e7)
  place = np.arange(g.num_nodes) % 3
  res = reference_simulate(g, topo, place, np.zeros(g.num_nodes))
  path = str(tmp_path / "schedule.png")
  plotting.plot_schedule(g, topo, res, path)
  assert_png(path)
  plotting.plot_schedule(g, topo, res, path, max_labeled_ops=0)  # replaces the file
  assert_png(path)


def test_single_device_infinite_memory(tmp_path):
  g = layered(n=40, width=4)
  topo = Topology.uniform(1, bandwidth=1.0)
  res = reference_simulate(g, topo, np.zeros(40, int), np.zeros(40))
  assert not res.transfers
  path = str(tmp_path / "one.png")
  plotting.plot_schedule(g, topo, res, path)
  assert_png(path)


def test_mismatched_result_is_rejected(tmp_path):
  g = diamond()
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.5)
  res = reference_simulate(g, topo, [0, 0, 1, 0], np.zeros(4))
  other = layered(n=10, width=5)
  with pytest.raises(ValueError, match="shape"):
    plotting.plot_schedule(other, topo, res, str(tmp_path / "x.png"))
  with pytest.raises(ValueError, match="device ids"):
    plotting.plot_schedule(g, Topology.uniform(1, bandwidth=1.0), res, str(tmp_path / "x.png"))
  assert not os.listdir(tmp_path)


def test_plot_bars(tmp_path):
  path = str(tmp_path / "bars.png")
  plotting.plot_bars(["single", "round_robin", "random"], [3.0, 1.2, 1.9], path,
                     title="makespan", ylabel="seconds", errors=[0.0, 0.1, 0.2], reference=3.0)
  assert_png(path)
  with pytest.raises(ValueError, match="one value per label"):
    plotting.plot_bars(["a", "b"], [1.0], path)
  with pytest.raises(ValueError, match="finite"):
    plotting.plot_bars(["a"], [np.nan], path)
  plotting.plot_bars(["a", "b"], [1.0, 2.0], path, errors=[[0.1, 0.0], [0.2, 0.3]])  # below, above
  assert_png(path)
  with pytest.raises(ValueError, match="errors has shape"):
    plotting.plot_bars(["a", "b"], [1.0, 2.0], path, errors=[[0.1, 0.0, 0.1]])
  with pytest.raises(ValueError, match="non-negative"):
    plotting.plot_bars(["a", "b"], [1.0, 2.0], path, errors=[-0.1, 0.0])


def test_unit_formatting():
  assert plotting.format_seconds(0.0125) == "12.5 ms"
  assert plotting.format_seconds(0.0) == "0 s"
  assert plotting.format_bytes(3.2e9) == "3.2 GB"
  assert plotting.format_bytes(np.inf) == "inf"
  assert plotting.format_bytes(12) == "12 B"
  assert plotting.format_bytes(float("nan")) == "nan"
  assert plotting.format_bytes(-np.inf) == "-inf"


@pytest.mark.parametrize("name", ["m$\\bad$", "p$_1$", "cost $5 and $"])
def test_dollar_signs_in_names_are_literal_text(tmp_path, name):
  """Graph names and file paths go into titles and labels; a '$' in one was read as TeX (an
  'Unknown symbol' error, no file, or other text than the name). They are drawn as written."""
  g = CompGraph(cost=[1.0, 2.0, 3.0, 1.0], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[1.0] * 4, name=name, node_names=[name, "b", "c", "d"])
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.5, mem_capacity=3.0)
  res = reference_simulate(g, topo, [0, 0, 1, 0], np.zeros(4))
  path = str(tmp_path / "s.png")
  plotting.plot_schedule(g, topo, res, path)
  assert_png(path)
  bars = str(tmp_path / "b.png")
  plotting.plot_bars([name, "heft"], [1.0, 2.0], bars, title=name, ylabel=name)
  assert_png(bars)
  from matplotlib.text import Text
  fig = plotting.new_figure()  # pylint: disable=protected-access
  fig.suptitle(name)
  assert not any(t.get_parse_math() for t in plotting.literal_text(fig).findobj(Text))


def test_log_axis_tick_labels_render_as_numbers_not_raw_math_text():
  """literal_text keeps math text in the labels matplotlib's tick formatters write: a log
  axis (learning_curves) writes '$\\mathdefault{10^{0}}$', which was drawn as that string."""
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  fig = plotting.new_figure()  # pylint: disable=protected-access
  ax = fig.add_subplot(1, 1, 1)
  ax.plot([0, 1], [0.5, 20.0])
  ax.set_yscale("log")
  ax.set_title("m$x$")
  plotting.literal_text(fig)
  FigureCanvasAgg(fig).draw()
  labels = [t for t in ax.yaxis.get_ticklabels(which="both") if t.get_visible() and t.get_text()]
  assert labels and any("$" in t.get_text() for t in labels)
  raw = [t.get_text() for t in labels if "$" in t.get_text() and not t.get_parse_math()]
  assert not raw, raw
  assert not ax.title.get_parse_math()


def _curve_row(step, family, greedy=1.2, best=1.1, **extra):
  return dict(step=step, family=family, greedy_ratio=greedy, best_ratio=best, **extra)


def test_learning_curves_without_an_all_family_and_with_bad_ratios(tmp_path):
  """Rows of families but no "all" drew (zip of nothing: 'not enough values to unpack'); a NaN,
  inf or 0 ratio was silently left off the log axis (a curve of NaNs: an empty panel)."""
  path = str(tmp_path / "lc.png")
  plotting_curves.learning_curves([_curve_row(0, "a"), _curve_row(1, "a", 1.1, 1.0),
                            _curve_row(0, "b", seconds=float("nan"))], path)
  assert_png(path)
  os.remove(path)
  for bad in (float("nan"), float("inf"), 0.0, -1.0):
    with pytest.raises(ValueError, match="best_ratio .* family 'all' at step 3"):
      plotting_curves.learning_curves([_curve_row(0, "all"), _curve_row(3, "all", best=bad)], path)
  with pytest.raises(ValueError, match="no 'family'"):
    plotting_curves.learning_curves([dict(step=0, greedy_ratio=1.0, best_ratio=1.0)], path)
  assert not os.listdir(tmp_path)


def _png_size(path):
  with open(path, "rb") as fh:
    head = fh.read(24)
  return struct.unpack(">II", head[16:24])


def test_many_devices_stay_one_figure_wide_with_distinct_colours(tmp_path):
  """With many devices the title listed every utilisation (64 devices: an image three figure
  widths wide, the charts in its left third), the memory legend ran below the figure, the
  margins grew with the height, and tab10 gave devices k and k + 10 one colour."""
  g = layered(n=40, width=8)
  few, many = str(tmp_path / "few.png"), str(tmp_path / "many.png")
  for d, path in ((2, few), (32, many)):
    topo = Topology.uniform(d, bandwidth=1e9, latency=1e-5)
    res = reference_simulate(g, topo, np.arange(40) % d, np.zeros(40))
    plotting.plot_schedule(g, topo, res, path)
    assert_png(path)
  (w_few, h_few), (w_many, h_many) = _png_size(few), _png_size(many)
  assert w_many <= 1.05 * w_few, (w_few, w_many)
  rows_inches = 2 * (32 - 2) * plotting._ROW_INCHES  # pylint: disable=protected-access
  assert h_many <= h_few + (rows_inches + 32 * 0.2) * plotting.DPI  # pylint: disable=protected-access
  colors = plotting.distinct_colors(64)  # pylint: disable=protected-access
  assert len({tuple(c) for c in np.round(colors, 4)}) == 64


def test_bar_labels_are_cut_and_a_non_finite_reference_refused(tmp_path):
  """A 300-character method name ran across the other bars (a PNG five times as wide); a NaN or
  inf reference drew no line, silently."""
  short, long_ = str(tmp_path / "short.png"), str(tmp_path / "long.png")
  plotting.plot_bars(["a", "b", "c"], [1.0, 2.0, 3.0], short)
  plotting.plot_bars(["a", "x" * 290 + "tail", "c"], [1.0, 2.0, 3.0], long_)
  assert _png_size(long_)[0] <= 1.5 * _png_size(short)[0], (_png_size(short), _png_size(long_))
  cut = plotting._cut("x" * 290 + "tail", plotting.MAX_BAR_LABEL_CHARS)  # pylint: disable=protected-access
  assert len(cut) == plotting.MAX_BAR_LABEL_CHARS and cut.endswith("tail") and "\u2026" in cut
  for bad in (float("nan"), float("inf")):
    with pytest.raises(ValueError, match="reference must be finite"):
      plotting.plot_bars(["a"], [1.0], str(tmp_path / "r.png"), reference=bad)


def test_learning_curve_of_one_point_has_whole_update_ticks(tmp_path, monkeypatch):
  """One point got ticks at fractional updates (-0.04 ... 0.04)."""
  figures = []
  real = plotting.save_figure
  monkeypatch.setattr(plotting, "save_figure", lambda fig, path: figures.append(fig) or
                      real(fig, path))
  plotting_curves.learning_curves([_curve_row(0, "all")], str(tmp_path / "lc.png"))
  for ax in figures[0].axes:
    lo, hi = ax.get_xlim()
    ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert ticks and all(float(t).is_integer() for t in ticks), ticks


def test_hundreds_of_devices_give_a_bounded_figure(tmp_path):
  """1100 devices drew a 96000-pixel-tall PNG (9 MB, 20 s): the Gantt rows share at most
  MAX_GANTT_INCHES, every k-th device is named, the legend names the highest peaks."""
  g = layered(n=30, width=6)
  d = 260
  topo = Topology.uniform(d, bandwidth=1e9, latency=1e-5)
  res = reference_simulate(g, topo, np.arange(30) % d, np.zeros(30))
  path = str(tmp_path / "many.png")
  plotting.plot_schedule(g, topo, res, path)
  gantt_in, legend_in = 64.0, 0.135 * (64 + 2)  # MAX_GANTT_INCHES, MAX_LEGEND_DEVICES lines
  assert _png_size(path)[1] <= (gantt_in + legend_in + 3) * plotting.DPI  # pylint: disable=protected-access


def test_a_very_long_name_is_cut_not_a_huge_png(tmp_path):
  """A 12000-character graph name in the title made the PNG 120000 pixels wide."""
  g = CompGraph(cost=[1.0, 2.0], senders=[0], receivers=[1], out_bytes=[1.0, 1.0],
                name="n" * 12000)
  topo = Topology.uniform(2, bandwidth=1.0)
  path = str(tmp_path / "long.png")
  plotting.plot_schedule(g, topo, reference_simulate(g, topo, [0, 1], np.zeros(2)), path)
  assert _png_size(path)[0] <= 3000, _png_size(path)


def test_many_families_keep_their_legend_beside_the_curves(tmp_path):
  """30 families' legend (inside the panel) covered the curves and ran below the figure, and
  families 10 apart shared a colour."""
  path = str(tmp_path / "lc.png")
  rows = [_curve_row(s, f"f{i:02d}", 1.0 + i / 100) for i in range(30) for s in range(2)]
  plotting_curves.learning_curves(rows, path)
  assert _png_size(path)[1] <= 4.4 * plotting.DPI  # pylint: disable=protected-access
