"""Static reports built from run directories alone (``attnlab report RUNS_DIR``)."""
