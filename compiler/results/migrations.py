"""The results store's versioned schema: the migrations that take a store from one version to the
next (PRAGMA user_version counts those applied), and the read indexes kept outside it."""

from __future__ import annotations

import sqlite3

from .queries import INDEXES

# Each migration takes the database from version i to i + 1. Never edit one that has shipped.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE runs (
        id            TEXT PRIMARY KEY,
        experiment    TEXT NOT NULL,
        target        TEXT NOT NULL,
        point         TEXT NOT NULL,
        point_values  TEXT NOT NULL,   -- JSON object
        smoke         INTEGER NOT NULL,
        spec_path     TEXT,
        spec_sha256   TEXT,
        build_path    TEXT,
        log_path      TEXT,
        status        TEXT NOT NULL,
        cause         TEXT,
        log_tail      TEXT,
        metrics       TEXT,            -- JSON, the program's metrics file
        environment   TEXT NOT NULL,   -- JSON: host, platform, benchc version
        plan          TEXT,            -- JSON, the resolved plan from the manifest
        series        TEXT NOT NULL,   -- the trials of one `run --repeat N` share it
        trial         INTEGER NOT NULL,
        source        TEXT NOT NULL,   -- run | ingest
        runner_pid    INTEGER,
        runner_host   TEXT,
        started_at    TEXT NOT NULL,   -- ISO 8601, UTC
        ended_at      TEXT
    );
    CREATE INDEX runs_by_point ON runs (experiment, target, point);
    CREATE INDEX runs_by_start ON runs (started_at);
    """,
    """
    ALTER TABLE runs ADD COLUMN job_id TEXT;          -- the scheduler's job id (submit, ingest)
    ALTER TABLE runs ADD COLUMN cluster TEXT;         -- the scheduler's cluster name
    ALTER TABLE runs ADD COLUMN job_state TEXT;       -- its state: PENDING, RUNNING, COMPLETED, TIMEOUT, ...
    ALTER TABLE runs ADD COLUMN exit_code TEXT;       -- its exit code, as "code:signal"
    ALTER TABLE runs ADD COLUMN run_dir TEXT;         -- where the run writes its log and metrics
    ALTER TABLE runs ADD COLUMN metrics_sha256 TEXT;  -- of the metrics file the run was stored from
    CREATE INDEX runs_by_job ON runs (job_id);
    CREATE INDEX runs_by_metrics_file ON runs (metrics_sha256);
    """,
    # One metrics file is stored once: its first run is copy 0, and only `ingest --force` (or a
    # submitted job's collection of a file already ingested) adds copies 1, 2, ... The unique
    # index makes a second copy 0 impossible, whichever processes write at once. A store made
    # by an earlier benchc may already hold the same file twice (two ingests at once could
    # store it so): every run is kept, numbered in the order it was stored, so the index can
    # be built without removing anything.
    """
    ALTER TABLE runs ADD COLUMN metrics_copy INTEGER;  -- 0: the first run stored from that file
    UPDATE runs SET metrics_copy = (SELECT count(*) FROM runs AS earlier
        WHERE earlier.metrics_sha256 = runs.metrics_sha256 AND earlier.rowid < runs.rowid)
        WHERE metrics_sha256 IS NOT NULL;
    CREATE UNIQUE INDEX runs_one_copy_number ON runs (metrics_sha256, metrics_copy);
    """,
    # `benchc calibrate`: what a target really reaches on a host (calibrations.py). Inserted as
    # "running" when the calibration starts and finished however it ends, as runs are.
    """
    CREATE TABLE calibrations (
        id            TEXT PRIMARY KEY,
        target        TEXT NOT NULL,
        host          TEXT NOT NULL,
        smoke         INTEGER NOT NULL,
        world_size    INTEGER NOT NULL,
        build_path    TEXT,
        status        TEXT NOT NULL,
        cause         TEXT,
        data          TEXT,            -- JSON, the calibration program's file (calibration.json)
        environment   TEXT NOT NULL,   -- JSON: host, platform, benchc version
        runner_pid    INTEGER,
        started_at    TEXT NOT NULL,   -- ISO 8601, UTC
        ended_at      TEXT
    );
    CREATE INDEX calibrations_by_target ON calibrations (target, status, started_at);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def create_indexes(db: sqlite3.Connection) -> None:
    """The read indexes (queries.INDEXES), each created if missing."""
    for statement in INDEXES:
        db.execute(statement)


def migrate(db: sqlite3.Connection) -> None:
    """Apply the migrations a store lacks, inside the caller's write transaction."""
    version = db.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise sqlite3.DatabaseError(
            f"schema version {version} is newer than this benchc knows ({SCHEMA_VERSION})"
        )
    if version == 0 and db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
        raise sqlite3.DatabaseError("it is another program's SQLite database")
    for script in MIGRATIONS[version:]:
        for statement in script.split(";"):
            if statement.strip():
                db.execute(statement)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    create_indexes(db)
