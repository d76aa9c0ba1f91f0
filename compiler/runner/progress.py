"""Live progress of a run: step n of N, current throughput, elapsed time.

On a terminal, a rich progress bar; elsewhere (CI, a pipe), one plain line per step.
The program prints `step N/TOTAL loss L time Ts` in warmup and, at most once a second in the
measured window, `step N/TOTAL time Ts` with the host's mean step time since its last line (it
reads nothing from the device there); the throughput shown is the samples of one step over
that time.
"""

from __future__ import annotations

import re
import sys
import time

from ..console import raw
from ..diagnostics import printable

STEP_LINE = re.compile(r"step (\d+)/(\d+)(?: loss (\S+))? time ([0-9.]+)s(.*)")


class Progress:
    def __init__(self, label: str, samples_per_step: int | None, unit: str, tty: bool | None = None):
        self.label = label
        self.samples = samples_per_step
        self.unit = unit
        self.started = time.monotonic()
        self.tty = sys.stdout.isatty() if tty is None else tty
        self._rich = None
        self._task = None
        self._escape = str

    def __enter__(self) -> Progress:
        if self.tty:
            try:  # rich comes with the run extra; plain lines without it
                from rich.console import Console
                from rich.markup import escape
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
            except ImportError:
                self.tty = False
        if self.tty:
            # the bar's own codes go past the terminal writer; the label is escaped for it:
            # control characters (printable) and rich's markup both
            self._rich = Progress(
                TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(), transient=False, console=Console(file=raw(sys.stdout)),
            )  # fmt: skip
            self._rich.start()
            self._escape = escape
            self._task = self._rich.add_task(escape(printable(self.label)), total=None, status="starting")
        else:
            print(f"  {self.label}: starting", flush=True)
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.stop()

    def line(self, text: str) -> None:
        match = STEP_LINE.search(text)
        if not match:
            return
        step, total, loss, seconds, rest = match.groups()
        rate = (
            f"{self.samples / float(seconds):,.1f} {self.unit}" if self.samples and float(seconds) > 0 else ""
        )
        phase = " warmup" if "warmup" in rest else ""
        status = f"step {step}/{total}{phase}  {rate}" + (f"  loss {loss}" if loss else "")
        if self._rich is not None:
            shown = self._escape(printable(status))
            self._rich.update(self._task, total=int(total), completed=int(step), status=shown)
        else:
            elapsed = time.monotonic() - self.started
            print(f"  {self.label}: {status}  ({elapsed:.1f} s)", flush=True)
