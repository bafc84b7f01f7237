"""ddptui: find why a multi-node PyTorch DDP job will not start, hangs or crawls."""

__version__ = "0.1.0"
