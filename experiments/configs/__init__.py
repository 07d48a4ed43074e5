"""ml_collections configs of the experiment launchers (`--config=experiments/configs/NAME.py`)."""
