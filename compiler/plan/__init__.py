"""Lowering: defaults, presets, overrides, sweeps and smoke shrink into typed, frozen plans."""
