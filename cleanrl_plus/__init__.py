"""cleanrl_plus: the shared core (config, run directories, logging, storage, evaluation, checkpoints)."""

__version__ = "0.1.0"
