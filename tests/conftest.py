"""Shared pytest fixtures: the package data folder, and small graphs with known answers."""

import os

import numpy as np
import pytest

from simulator import CompGraph, Topology
from simulator.sources import data_root


def pytest_configure(config):
  """Registers the markers the tests use (`pytest -m "not slow"` leaves the slow ones out)."""
  config.addinivalue_line("markers", "slow: takes a minute or more (builds and installs a wheel)")


@pytest.fixture
def shared_data():
  """The folder of the profiled graphs (PipeDream, Piper) that the sources read.

  The package's own data folder (simulator/data), or $GO_JAX_DATA where that is set. The data
  ships with the package, so this never skips: a missing folder fails the test that asks for it.
  """
  path = data_root()
  assert os.path.isdir(os.path.join(path, "pipedream")), f"no pipedream/ in {path}"
  return path


@pytest.fixture
def diamond():
  """The worked example of docs/design.md section 4: graph, topology, placement, priority."""
  g = CompGraph(cost=[1, 2, 3, 1], senders=[0, 0, 1, 2], receivers=[1, 2, 3, 3],
                out_bytes=[1, 1, 1, 1], name="diamond")
  topo = Topology.uniform(2, bandwidth=1.0, latency=0.5)
  return g, topo, np.array([0, 0, 1, 0]), np.zeros(4)
