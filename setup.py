"""Packaging of go-jax: `pip install -e ".[test]"` (development) or `pip install .`.

Version ranges: the lower bounds are the oldest releases with the APIs the code uses; the upper
bounds stop at the next minor (0.x) or major release after the versions the project is tested
with (jax/jaxlib 0.10, flax 0.12, optax 0.2, chex 0.1, orbax-checkpoint 0.12, numpy 2), so a
breaking release upstream does not break a fresh install. JAX installs its CPU build; for a GPU
add e.g. `pip install -U "jax[cuda12]"` within the same range.
"""

import os

from setuptools import find_packages, setup

HERE = os.path.dirname(os.path.abspath(__file__))


def _long_description() -> str:
  path = os.path.join(HERE, "README.md")
  if not os.path.isfile(path):
    return ""
  with open(path, encoding="utf-8") as fh:
    return fh.read()


INSTALL_REQUIRES = [
    "jax>=0.4.30,<0.11",
    "jaxlib>=0.4.30,<0.11",
    "flax>=0.8.5,<0.13",
    "optax>=0.2.2,<0.3",
    "jraph>=0.0.6.dev0,<0.1",  # 0.0.6.dev0 is the newest release on PyPI
    "chex>=0.1.86,<0.2",
    "numpy>=1.26,<3",
    "absl-py>=1.4,<3",
    "ml-collections>=0.1.1,<2",
    "matplotlib>=3.7,<4",
    "tqdm>=4.64,<5",
    "orbax-checkpoint>=0.5.20,<0.13",
    "tensorboardX>=2.6,<3",  # TensorBoard event files of training runs, without TensorFlow
    # Baselines (go_jax/methods): CP-SAT, METIS partitioning, the LP of Baechi's m-SCT.
    "ortools>=9.8,<10",
    "pymetis>=2023.1,<2027",  # calendar-versioned
    "scipy>=1.11,<2",
]

EXTRAS_REQUIRE = {
    "test": [
        "pytest>=7.4,<10",
        "hypothesis>=6.80,<7",
        "pytest-xdist>=3.3,<4",  # `pytest -n 2`, as the CI command runs the tests
        # tests/test_package.py builds a wheel with `pip wheel --no-build-isolation`, for which
        # setuptools before 70.1 (e.g. the one Python 3.11's venv installs) needs `wheel`.
        "wheel>=0.40,<1",
        "optuna>=3.6,<6",  # tests/test_regal_baselines.py runs the BRKGA tuner end to end
        "ray>=2.9,<3",  # tests/test_executors.py runs a tiny sweep on a local Ray instance
    ],
    # experiments/tune_brkga.py (go_jax.methods.tuned.tune): tunes BRKGA's hyper-parameters for
    # `brkga_tuned`, which itself only reads the shipped JSON and needs no optuna.
    "tune": ["optuna>=3.6,<6"],
    # --executor=ray of the sweep launchers (go_jax/executors.py): cells as Ray tasks on a local
    # Ray instance or a cluster. Plain `ray` (core): the executor needs no dashboard or
    # autoscaler; a cluster's nodes install what their own setup needs (e.g. "ray[default]").
    "cluster": ["ray>=2.9,<3"],
}

setup(
    name="go-jax",
    version="0.1.0",
    description=("Learned and classic device placement and op scheduling of ML computation "
                 "graphs on a fast, exact JAX simulator (GO, GDP and classic baselines)."),
    long_description=_long_description(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["simulator*", "go_jax*", "experiments*"]),
    package_data={
        # The pretrained GO policies go-jax-place starts from (go_jax/pretrained/<name>/).
        "go_jax": ["pretrained/*/config.json", "pretrained/*/params.msgpack",
                   # brkga_tuned's hyper-parameters (go_jax/methods/tuned.py)
                   "methods/data/*.json"],
        # Profiled graphs (PipeDream, Piper) with their MIT license texts, and example topology
        # files: simulator/sources/datafiles.py finds them here. Plain globs, no "**", so that
        # any setuptools builds the same wheel; tests/test_package.py checks the wheel holds
        # every file under simulator/data.
        "simulator": [
            "data/README.md",
            "data/*/README.md",
            "data/*/LICENSE",
            "data/pipedream/profiler/*/profiles/*/*.txt",
            "data/pipedream/graph/test_graphs/*.txt",
            "data/piper/inputs/*.json",
            "data/topologies/*.json",
        ],
    },
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
    entry_points={
        "console_scripts": [
            "go-jax-simulate = experiments.simulate:run",
            "go-jax-evaluate = experiments.evaluate:run",
            "go-jax-bench-simulator = experiments.bench_simulator:run",
            "go-jax-train = experiments.train:run",
            "go-jax-calibrate = experiments.calibrate_cost_model:run",
            "go-jax-validate-cost-model = experiments.validate_cost_model:run",
            "go-jax-place = experiments.place:run",
            "go-jax-transfer = experiments.transfer:run",
        ],
    },
    classifiers=[
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
