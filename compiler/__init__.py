"""benchc: compile one declarative .bench spec into benchmark programs for Gaudi, CUDA and CPU."""

__version__ = "0.1.0"
