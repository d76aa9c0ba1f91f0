"""The SQL a report reads through: the indexes that keep it cheap and the query of each row's
latest series. A report's cost grows with what it shows, not with the whole store: with the
indexes, each row's latest series is found in a few index pages and only its trials are read
(see benchmarks/store_speed.py for the figures)."""

from __future__ import annotations

# Indexes outside the versioned schema: they only make queries faster, and every benchc reads
# and writes a store with or without them (SQLite keeps them up to date), so they are made
# where missing when a store is opened, not by a migration.
INDEXES: tuple[str, ...] = (
    # a report's latest series: the latest run of each (experiment, smoke, point, target) ...
    "CREATE INDEX IF NOT EXISTS runs_latest ON runs (experiment, smoke, point, target, started_at, id)",
    # ... and the trials of its series
    "CREATE INDEX IF NOT EXISTS runs_by_series ON runs (series)",
    # runs left running or pending, without reading every run
    "CREATE INDEX IF NOT EXISTS runs_by_status ON runs (status)",
)
INDEX_NAMES = tuple(statement.split()[5] for statement in INDEXES)

ENDED = "status NOT IN ('running', 'pending')"


def latest_series_query(where: str, *, indexed: bool) -> str:
    """For each (experiment, smoke, point, target) of the runs matching `where` (empty, or
    "WHERE experiment = ?"), every run of the series of its latest ended run (latest by start
    time, then id), in start order. `indexed`: the store has INDEXES; a read-only store made
    by an earlier benchc without them is read in one pass over every run instead."""
    if indexed:  # the latest series of each key, then its trials by series (+: not by key)
        return (
            f"WITH keys AS (SELECT DISTINCT experiment, smoke, point, target FROM runs {where}),"
            " latest AS (SELECT keys.*, (SELECT series FROM runs"
            "  WHERE runs.experiment = keys.experiment AND runs.smoke = keys.smoke"
            f"  AND runs.point = keys.point AND runs.target = keys.target AND runs.{ENDED}"
            "  ORDER BY runs.started_at DESC, runs.id DESC LIMIT 1) AS series FROM keys)"
            " SELECT runs.* FROM latest CROSS JOIN runs ON runs.series = latest.series"
            " AND +runs.experiment = latest.experiment AND +runs.smoke = latest.smoke"
            " AND +runs.point = latest.point AND +runs.target = latest.target"
            " ORDER BY runs.started_at, runs.id"
        )
    return (
        "WITH ended AS (SELECT experiment, smoke, point, target, series, row_number() OVER ("
        "  PARTITION BY experiment, smoke, point, target ORDER BY started_at DESC, id DESC) AS n"
        f" FROM runs WHERE {ENDED} {where.replace('WHERE', 'AND')})"
        " SELECT runs.* FROM ended JOIN runs ON runs.experiment = ended.experiment"
        " AND runs.target = ended.target AND runs.point = ended.point"
        " AND runs.smoke = ended.smoke AND runs.series = ended.series"
        " WHERE ended.n = 1 ORDER BY runs.started_at, runs.id"
    )
