"""Results: the SQLite store of runs and the metrics files programs write."""
