"""Data tables: target capabilities and model presets."""
