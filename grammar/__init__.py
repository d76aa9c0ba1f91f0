"""The .bench grammar (bench.lark), shipped as package data."""
