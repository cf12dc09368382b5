"""Issue 28: location attention inside a Transformer — the recipe that joins its sweeps' tables."""
