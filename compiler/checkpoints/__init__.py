"""Local weights folders: what they hold, read without torch."""
