"""wmrl: post-train VLA policies with reinforcement learning inside learned video world models."""

__version__ = "0.1.0"
