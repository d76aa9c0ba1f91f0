"""JSON Schemas of what benchc writes and reads: the metrics file of a run."""
