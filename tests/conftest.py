"""Shared pytest fixtures: the path of ../shared/data, and small graphs with known answers."""

import os

import numpy as np
import pytest

from simulator import CompGraph, Topology

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def shared_data():
  """Path of ../shared/data; skips the test with a reason where it is absent."""
  path = os.environ.get("GO_JAX_DATA", os.path.join(REPO, "..", "shared", "data"))
  if not os.path.isdir(path):
    pytest.skip(f"../shared/data not found at {os.path.abspath(path)}: real-graph tests need "
                "the shared profiled graphs (CI always has them)")
  return path


@pytest.fixture
def diamond():
  """DESIGN section 4's worked example: graph, topology, placement, priority."""
  g = CompGraph(cost=[1, 2, 3, 1], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[1, 1, 1, 1], name="diamond")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.5)
  return g, topo, np.array([0, 0, 1, 0]), np.zeros(4)
