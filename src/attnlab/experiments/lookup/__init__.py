"""Lookup Tables (Dubois et al. 2020, location attention): ``experiment`` (config ``experiment:
lookup``), ``plots`` (``attnlab plot``) and ``recipe`` (``attnlab reproduce dubois2020``)."""
