"""Running on clusters: the Slurm client and the runs submitted through it."""
