"""The results store: one SQLite database of runs, WAL mode, a versioned schema with migrations.

Location: --db PATH, else $BENCHC_RESULTS, else the first .benchc/results.db in the working
folder or above it (as git finds a repository), else .benchc/results.db in the working folder.
Several benchc processes may write at once (WAL plus a busy timeout). A run is inserted as
"running" when it starts and finished when it ends; a run whose benchc process died without
finishing it (killed with SIGKILL, a lost machine) is shown as "unknown" afterwards. A run
submitted to a scheduler is inserted as "pending" with its job id and follows the job's state
(`benchc status`) until its metrics are collected. A metrics file is stored once: its runs
are numbered copies of it, and a unique index allows one first copy (see migrations.py).
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from ..diagnostics import error
from ..pids import alive
from .migrations import MIGRATIONS, SCHEMA_VERSION, create_indexes, migrate
from .queries import INDEX_NAMES, latest_series_query
from .run_record import RunRecord, record_of
from .statuses import ENDED

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "RunRecord", "Store", "new_id", "now", "open_existing",
           "store_path"]  # fmt: skip

DEFAULT_PATH = Path(".benchc") / "results.db"
ENVIRONMENT_VARIABLE = "BENCHC_RESULTS"


def default_path() -> Path:
    """$BENCHC_RESULTS, else the project's store as git finds its repository: the first
    .benchc/results.db in the working folder or a folder above it (a by-hand recipe run from
    a build point stores where the project's report looks), else .benchc/results.db here.
    A store found above is named on stderr, once."""
    if os.environ.get(ENVIRONMENT_VARIABLE):
        return Path(os.environ[ENVIRONMENT_VARIABLE])
    here = Path.cwd()
    for folder in (here, *here.parents):
        candidate = folder / DEFAULT_PATH
        if candidate.is_file():
            if folder != here:
                _say_once(f"benchc: using the results store {candidate} (found above the working folder)")
            return candidate
    return DEFAULT_PATH


_SAID: set[str] = set()
LOCK_WAIT_VARIABLE = "BENCHC_STORE_WAIT_S"  # how long a write waits for another process's lock
LOCK_WAIT_S = 120.0  # ... unless that variable says otherwise
LOCK_NOTICE_S = 10.0  # a line on stderr this often while it waits


def _lock_wait_s() -> float:
    try:
        value = float(os.environ.get(LOCK_WAIT_VARIABLE, ""))
    except ValueError:
        return LOCK_WAIT_S
    return value if 0 <= value < float("inf") else LOCK_WAIT_S


class StoreLocked(Exception):
    """The store stayed locked by another process for longer than benchc waits: nothing was
    written (the caller keeps what it was storing elsewhere, and says where)."""

    def __init__(self, path: Path, waited: float, kept: str | None = None) -> None:
        said = f"the results store {path} stayed locked by another process for {waited:.0f} s"
        super().__init__(said + (f"; {kept}" if kept else ""))
        self.path, self.waited = path, waited


def _say_once(text: str) -> None:
    if text not in _SAID:
        _SAID.add(text)
        print(text, file=sys.stderr)


def store_path(path: Path | str | None) -> Path:
    """--db PATH, else $BENCHC_RESULTS, else .benchc/results.db."""
    return Path(path) if path else default_path()


def open_existing(path: Path | str | None) -> Store | None:
    """The store for a command that only reads: None where there is none (nothing is created)."""
    where = store_path(path)
    return Store(where) if where.is_file() else None


def damaged(path: Path, detail: str):
    """The error for a store SQLite finds damaged: name it, say how to recover, write nothing."""
    return error(
        f"the results store {path} is damaged ({detail[:120]}); benchc will not read or write it",
        None,
        hint=f"recover what is readable into a new file with `sqlite3 {path} .recover | sqlite3 "
        f"{path}.recovered`, then use --db {path}.recovered (or move it into place); "
        "or point --db at another file",
    )


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def new_id() -> str:
    return uuid.uuid4().hex[:12]


class Store:
    def __init__(self, path: Path | str | None = None):
        self.path = store_path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # SQLite's own wait for a lock is short: longer waits are Python's loop below, so
            # that Ctrl-C and SIGTERM are seen while another benchc holds the store.
            self._db = sqlite3.connect(self.path, timeout=0.2, isolation_level=None)
            self.read_only = False  # a store this process may only read (see _read_only)
        except (OSError, sqlite3.Error) as exc:
            raise error(f"cannot open the results store {self.path}: {exc}", None) from None
        self._db.row_factory = sqlite3.Row
        self._depth = 0  # open transactions (batch() nests start/finish into one)
        self._checked = False  # PRAGMA quick_check has passed on this connection
        self._indexed = True  # the store has INDEXES (see _add_indexes)
        try:
            self._read_only()
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA busy_timeout=200")
            if self.read_only:
                pass  # read as it is: no journal mode to set, nothing to write
            elif self._db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                self._check_intact()  # switching to WAL writes the file's header
                self._retry_while_locked(lambda: self._db.execute("PRAGMA journal_mode=WAL"))
            # In WAL mode NORMAL keeps every transaction atomic and the file consistent, also
            # when a process is killed mid-write; it skips the fsync at each commit (a power
            # cut may lose the last commits, never half of one).
            if not self.read_only:
                self._db.execute("PRAGMA synchronous=NORMAL")
            self._retry_while_locked(self._migrate)
        except sqlite3.DatabaseError as exc:
            if type(exc) is sqlite3.DatabaseError and "malformed" in str(exc):
                self._db.close()
                raise damaged(self.path, str(exc)) from None
            raise error(
                f"{self.path} is not a benchc results store ({exc})",
                None,
                hint="point --db (or BENCHC_RESULTS) at another file",
            ) from None

    def _read_only(self) -> None:
        """A store this process cannot write (a read-only file, or a WAL store in a folder it
        cannot write, where SQLite cannot even read without making its -shm file) is opened
        read-only and immutable: the read commands work on it, and a command that writes is
        refused saying so (_transaction)."""
        try:
            self._db.execute("PRAGMA journal_mode").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "readonly" not in str(exc) or not self.path.is_file():
                raise
        self._db.close()
        where = urllib.parse.quote(str(self.path.resolve()))
        self._db = sqlite3.connect(f"file:{where}?mode=ro&immutable=1", uri=True, isolation_level=None)
        self.read_only = True

    def _check_intact(self) -> None:
        """A damaged file is refused before anything writes to it: SQLite would go on writing
        into the pages it can still reach. PRAGMA quick_check reads the whole file (about
        80 ms for 10,000 runs, 60 MiB), so it runs before the first write of a connection,
        not at every open: what only reads is told of damage by SQLite itself, on the pages
        it reads (see _reading)."""
        if self._checked:
            return
        try:
            found = self._retry_while_locked(lambda: self._db.execute("PRAGMA quick_check(1)").fetchone())
        except sqlite3.DatabaseError as exc:
            if "not a database" in str(exc):
                raise  # foreign or truncated: told as such below
            found = (str(exc),)
        if found and found[0] != "ok":
            self._db.close()
            raise damaged(self.path, found[0])
        self._checked = True

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Damage SQLite meets while reading is told as a damaged store, as the check would."""
        try:
            yield
        except sqlite3.DatabaseError as exc:
            if type(exc) is not sqlite3.DatabaseError:  # locked, closed, a misuse: not damage
                raise
            self._db.close()
            raise damaged(self.path, str(exc)) from None

    def _retry_while_locked(self, action, seconds: float | None = None):
        """Wait out another process's write lock (another benchc, a user's sqlite3; creating
        the same store, where switching to WAL mode needs a moment alone with the file): a line
        on stderr every LOCK_NOTICE_S while it lasts, then StoreLocked after `seconds`
        (LOCK_WAIT_S), with nothing written."""
        seconds = _lock_wait_s() if seconds is None else seconds
        started = time.monotonic()
        said = started
        while True:
            try:
                return action()
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                now = time.monotonic()
                if now - started > seconds:
                    raise StoreLocked(self.path, now - started) from None
                if now - said >= LOCK_NOTICE_S:
                    said = now
                    print(f"benchc: waiting for the results store {self.path}: another process holds its "
                          f"write lock ({now - started:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
                time.sleep(0.05)

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        if self._depth:  # inside batch(): part of the enclosing transaction
            yield self._db
            return
        if self.read_only:
            raise error(f"the results store {self.path} can only be read here (its file or folder is "
                        "read-only): this command writes to it", None,
                        hint="give --db a copy you can write (cp the file), or ask its owner")  # fmt: skip
        self._check_intact()  # once per connection, before its first write
        self._retry_while_locked(lambda: self._db.execute("BEGIN IMMEDIATE"))
        self._depth = 1
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        finally:
            self._depth = 0
        self._db.execute("COMMIT")

    def batch(self):
        """One transaction around several writes: all of them are stored, or none."""
        return self._transaction()

    def _migrate(self) -> None:
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        if version == SCHEMA_VERSION:
            self._add_indexes()
            return  # the usual case: no write lock to take (versions only ever go up)
        try:
            with self._transaction() as db:
                migrate(db)
        except sqlite3.OperationalError as exc:
            # A read-only store of an earlier benchc is read as it is: every column a read
            # needs is there since version 1; only writing needs the later ones.
            if "readonly" not in str(exc) or not 0 < version < SCHEMA_VERSION:
                raise
            self._add_indexes()

    def _add_indexes(self) -> None:
        """INDEXES missing from a store made by an earlier benchc; where the store cannot be
        written (a read-only file), it is read without them."""
        found = {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        if all(name in found for name in INDEX_NAMES):
            return
        try:
            with self._transaction() as db:
                create_indexes(db)
        except sqlite3.OperationalError as exc:
            if "readonly" not in str(exc):
                raise
            self._indexed = False

    @property
    def schema_version(self) -> int:
        return self._db.execute("PRAGMA user_version").fetchone()[0]

    # -- writing

    def start(self, *, experiment: str, target: str, point: str, point_values: dict, smoke: bool,
              spec_path: str | None, spec_sha256: str | None, build_path: str | None,
              log_path: str | None, environment: dict, plan: dict | None, series: str,
              trial: int, source: str = "run", status: str = "running",
              run_id: str | None = None, job_id: str | None = None, cluster: str | None = None,
              job_state: str | None = None, run_dir: str | None = None,
              started_at: str | None = None) -> str:  # fmt: skip
        run_id = run_id or new_id()
        with self._transaction() as db:
            db.execute(
                "INSERT INTO runs (id, experiment, target, point, point_values, smoke, spec_path,"
                " spec_sha256, build_path, log_path, status, environment, plan, series, trial,"
                " source, runner_pid, runner_host, started_at, job_id, cluster, job_state, run_dir)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, experiment, target, point, json.dumps(point_values), int(smoke),
                 spec_path, spec_sha256, build_path, log_path, status, json.dumps(environment),
                 json.dumps(plan) if plan is not None else None, series, trial, source,
                 os.getpid(), socket.gethostname(), started_at or now(), job_id, cluster,
                 job_state, run_dir),
            )  # fmt: skip
        return run_id

    def finish(self, run_id: str, status: str, cause: str | None, metrics: dict | None,
               log_tail: str | None = None, ended_at: str | None = None, *,
               job_state: str | None = None, exit_code: str | None = None,
               metrics_sha256: str | None = None, started_at: str | None = None,
               first_copy: bool = False) -> None:  # fmt: skip
        """Record how a run ended. The job and start fields are kept where not given. A run
        stored from a metrics file (metrics_sha256) is numbered as a copy of that file: with
        first_copy it must be the first (sqlite3.IntegrityError where the file is stored)."""
        if status not in ENDED:
            raise ValueError(status)
        with self._transaction() as db:
            copy = None
            if metrics_sha256 is not None:
                copy = 0 if first_copy else db.execute(
                    "SELECT coalesce(max(metrics_copy) + 1, 0) FROM runs"
                    " WHERE metrics_sha256 = ? AND id != ?", (metrics_sha256, run_id),
                ).fetchone()[0]  # fmt: skip
            db.execute(
                "UPDATE runs SET status = ?, cause = ?, metrics = ?, log_tail = ?, ended_at = ?,"
                " job_state = coalesce(?, job_state), exit_code = coalesce(?, exit_code),"
                " metrics_sha256 = ?, metrics_copy = ?, started_at = coalesce(?, started_at) WHERE id = ?",
                (status, cause, json.dumps(metrics) if metrics is not None else None, log_tail,
                 ended_at or now(), job_state, exit_code, metrics_sha256, copy, started_at, run_id),
            )  # fmt: skip

    def query(self, sql: str, parameters: tuple = ()) -> list[sqlite3.Row]:
        """Rows of a read of another table of the store (calibrations.py); damage is told as
        a damaged store."""
        with self._reading():
            return self._db.execute(sql, parameters).fetchall()

    def follow_job(self, run_id: str, status: str, job_state: str) -> None:
        """A submitted run that has not ended: its job's state (pending or running)."""
        if status not in ("pending", "running"):
            raise ValueError(status)
        with self._transaction() as db:
            db.execute(
                "UPDATE runs SET status = ?, job_state = ? WHERE id = ? AND status IN ('pending', 'running')",
                (status, job_state, run_id),
            )

    def stored_metrics(self, sha256: str) -> RunRecord | None:
        """The run stored from a metrics file with this content hash, if any."""
        with self._reading():
            row = self._db.execute(
                "SELECT * FROM runs WHERE metrics_sha256 = ? ORDER BY started_at LIMIT 1", (sha256,)
            ).fetchone()
        return record_of(row) if row else None

    def series_runs(self, series: str) -> list[RunRecord]:
        """Every run of one series (the trials of a `run --repeat`, or of one scheduler job)."""
        with self._reading():
            rows = self._db.execute(
                "SELECT * FROM runs WHERE series = ? ORDER BY trial, started_at, rowid", (series,)
            ).fetchall()
        return [record_of(row) for row in rows]

    def submitted(self, active_only: bool = False) -> list[RunRecord]:
        """Runs submitted to a scheduler, oldest first; only those not ended with active_only."""
        where = " AND status IN ('pending', 'running')" if active_only else ""
        with self._reading():
            rows = self._db.execute(
                f"SELECT * FROM runs WHERE source = 'submit'{where} ORDER BY started_at, trial, rowid"
            ).fetchall()
        return [record_of(row) for row in rows]

    # -- reading

    def _reconcile(self) -> None:
        """Runs left 'running' by a benchc process of this host that no longer exists."""
        host = socket.gethostname()
        query = (
            "SELECT id, runner_pid FROM runs WHERE status = 'running' AND source = 'run' AND runner_host = ?"
        )
        with self._reading():
            rows = self._db.execute(query, (host,)).fetchall()
        for row in rows:
            if row["runner_pid"] and not alive(row["runner_pid"]):
                with self._transaction() as db:
                    db.execute(
                        "UPDATE runs SET status = 'unknown', cause = ? WHERE id = ? AND status = 'running'",
                        ("the benchc process running it ended without recording a result "
                         "(killed, or the machine went down)", row["id"]),
                    )  # fmt: skip

    def runs(self, experiment: str | None = None, target: str | None = None,
             status: str | None = None, smoke: bool | None = None) -> list[RunRecord]:  # fmt: skip
        self._reconcile()
        clauses, values = [], []
        for column, value in (("experiment", experiment), ("target", target), ("status", status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                values.append(value)
        if smoke is not None:
            clauses.append("smoke = ?")
            values.append(int(smoke))
        where = f" WHERE {' AND '.join(clauses)}" if clauses else ""
        with self._reading():
            query = f"SELECT * FROM runs{where} ORDER BY started_at, rowid"  # ties: as stored
            rows = self._db.execute(query, values).fetchall()
        return [record_of(row) for row in rows]

    def latest_runs(self, experiment: str | None = None) -> list[RunRecord]:
        """What a report shows: for each (experiment, smoke, point, target), every run of its
        latest series that ended (latest by start time, then id), in start order: the runs
        report.collect.sections() keeps of runs(), read without the older series (through
        INDEXES, a few pages whatever the store holds)."""
        self._reconcile()
        where, values = ("WHERE experiment = ?", [experiment]) if experiment is not None else ("", [])
        query = latest_series_query(where, indexed=self._indexed)
        with self._reading():
            rows = self._db.execute(query, values).fetchall()
        return [record_of(row) for row in rows]

    def targets(self, experiment: str | None = None) -> set[str]:
        """The targets with any run (of `experiment`), whatever their status."""
        where, values = (" WHERE experiment = ?", [experiment]) if experiment is not None else ("", [])
        with self._reading():
            return {row[0] for row in self._db.execute(f"SELECT DISTINCT target FROM runs{where}", values)}

    def get(self, run_id: str) -> RunRecord | None:
        self._reconcile()
        if not run_id:
            return None
        with self._reading():
            found = self._db.execute(
                "SELECT * FROM runs WHERE substr(id, 1, ?) = ? ORDER BY started_at", (len(run_id), run_id)
            ).fetchall()
        if len(found) > 1:
            raise error(f"run id '{run_id}' is ambiguous: {len(found)} runs start with it", None,
                        hint="give more characters of the id")  # fmt: skip
        return record_of(found[0]) if found else None
