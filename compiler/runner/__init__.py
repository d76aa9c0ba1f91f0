"""Running build points: launching, watching, timing out, recording."""
