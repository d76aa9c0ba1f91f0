"""Code generation: typed plans -> standalone benchmark programs, launchers and manifests."""
