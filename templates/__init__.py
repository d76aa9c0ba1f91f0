"""Jinja templates of generated programs, shipped as package data."""
