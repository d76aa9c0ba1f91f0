"""The statuses a stored run can have (the commands' --status choices read them here, without
opening the store's module)."""

STATUSES = ("pending", "running", "ok", "failed", "timeout", "interrupted", "terminated", "cancelled",
            "unknown")  # fmt: skip
ENDED = ("ok", "failed", "timeout", "interrupted", "terminated", "cancelled", "unknown")
