"""attnlab: attention mechanisms that generalize beyond their training data."""

__version__ = "0.1.0"
