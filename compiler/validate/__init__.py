"""Validation: the JSON Schema layer and the semantic rules."""
