"""A test instrument, not part of benchc: the warm process behind tests/warm_python/python and
tests/warm_launch.py.

One per test worker (tests/conftest.py starts it and names it in the tests' environment). It
imports torch once, listens on a Unix socket, and for each connection (a warm `python`
command: [-u] -m MODULE ARGS or [-u] SCRIPT ARGS) imports what the script imports at its top, or
the module, here (it stays imported for every later command), then forks a process that becomes
the command: a session of its own, the client's standard streams (its descriptors), resource
limits (ulimit), environment and working directory, the client's path as sys.executable, the
start-up instruments of its PYTHONPATH run as Python runs sitecustomize, the module or script as
__main__, then what the interpreter does at its end (non-daemon threads joined, exit functions).
The client learns the process's id (to forward signals to its group) and then its wait status.
A client that goes away first (killed) takes its process group with it: SIGKILL. A connection
may instead ask for programs' imports only ({"preload": [paths]}), answered once they are made.
Nothing here runs an operator before a fork, so no thread pool is inherited. It ends when its
stdin closes.
"""

from __future__ import annotations

import ast
import atexit
import importlib.util
import io
import json
import os
import resource
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from pathlib import Path

ARMED = {p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}  # ran at this start-up
RESET = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGCHLD)


def preload(program: Path) -> None:
    """Import what the program imports at its top, here, so that its processes find it imported."""
    tree = ast.parse(program.read_text())
    imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    for node in imports:
        try:
            exec(compile(ast.Module(body=[node], type_ignores=[]), str(program), "exec"), {})
        except Exception:  # noqa: BLE001 - the program meets the same error and reports it
            pass


def command_of(argv: list) -> tuple[str | None, str, list, bool]:
    """(module or None, script, arguments, unbuffered) of a warm `python` command line."""
    unbuffered = False
    while argv[0] == "-u":
        unbuffered, argv = True, argv[1:]
    if argv[0] == "-m":
        return argv[1], "", argv[2:], unbuffered
    return None, argv[0], argv[1:], unbuffered


def stream(fd: int, mode: str, unbuffered: bool) -> io.TextIOWrapper:
    """sys.stdin/stdout/stderr as a fresh interpreter makes them on descriptor fd."""
    raw = io.FileIO(fd, mode, closefd=False)
    interactive = raw.isatty()
    if mode == "r":
        return io.TextIOWrapper(io.BufferedReader(raw), line_buffering=interactive)
    if unbuffered or fd == 2:
        return io.TextIOWrapper(
            raw, write_through=True, line_buffering=interactive, errors="backslashreplace"
        )
    return io.TextIOWrapper(io.BufferedWriter(raw), line_buffering=interactive)


def become(request: dict, fds: list, module: str | None, script: str, args: list, unbuffered: bool) -> None:
    """In the forked child: the client's command, then exit with its status."""
    os.setsid()
    for number in RESET:
        signal.signal(number, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in zip(request["streams"], fds):
        os.dup2(fd, target)
    for fd in fds:
        if fd not in (0, 1, 2):
            os.close(fd)
    for name, (soft, hard) in request["limits"].items():  # the client's ulimits: an address space...
        resource.setrlimit(getattr(resource, name), (soft, hard))
    env = request["env"]
    unbuffered = unbuffered or bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin, sys.stdout, sys.stderr = (stream(0, "r", False), stream(1, "w", unbuffered),
                                         stream(2, "w", unbuffered))  # fmt: skip
    sys.executable = request["executable"]
    os.chdir(request["cwd"])
    if module is not None:
        sys.argv = ["-m", *args]
        sys.path[0] = request["cwd"]
    else:
        sys.argv = [script, *args]
        sys.path[0] = str(Path(script).resolve().parent)
    os.environ.clear()
    os.environ.update(env)
    code = 0
    try:
        for entry in [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p not in ARMED]:
            sys.path.insert(1, entry)
            if (Path(entry) / "sitecustomize.py").exists():
                runpy.run_path(str(Path(entry) / "sitecustomize.py"), run_name="sitecustomize")
        if env.get("OMP_NUM_THREADS"):
            import torch

            torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
        if module is None:
            runpy.run_path(script, run_name="__main__")
        else:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as end:
        if end.code is None or isinstance(end.code, int):
            code = end.code or 0
        else:
            print(end.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:  # as the interpreter: the traceback, then killed by SIGINT
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # noqa: BLE001 - as the interpreter does: the traceback, status 1
        traceback.print_exc()
        code = 1
    try:
        threading._shutdown()  # non-daemon threads, as the interpreter waits for them
        atexit._run_exitfuncs()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        if code < 0:
            signal.signal(-code, signal.SIG_DFL)
            os.kill(os.getpid(), -code)
        os._exit(code)


def serve_one(connection: socket.socket) -> int | None:
    """Read a client's command and fork the process that runs it (its pid), or make the imports
    a preload asks for (None)."""
    _, fds, _, _ = socket.recv_fds(connection, 1, 3)
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(1 << 16)
        if not chunk:
            raise ConnectionError("the client went away before its command")
        data += chunk
    request = json.loads(data)
    if "preload" in request:
        for path in request["preload"]:
            preload(Path(path))
        connection.sendall(b'{"preloaded": true}\n')
        return None
    module, script, args, unbuffered = command_of(request["argv"])
    try:
        if module is not None:  # its imports, not the module: runpy runs it afresh as __main__
            preload(Path(importlib.util.find_spec(module).origin))
        else:
            preload(Path(request["cwd"], script))
    except BaseException:  # noqa: BLE001 - the command meets the same error and reports it
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        become(request, fds, module, script, args, unbuffered)
    for fd in fds:
        os.close(fd)
    connection.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    return pid


def main() -> None:
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(sys.argv[1])  # first: a client that comes during the imports below waits
    listener.listen(64)
    import torch  # noqa: F401 - every program's first import; each command adds its own

    os.dup2(2, 1)  # what libraries print goes to the worker's stderr
    waiting = selectors.DefaultSelector()
    waiting.register(listener, selectors.EVENT_READ)
    waiting.register(sys.stdin, selectors.EVENT_READ)
    running: dict[socket.socket, int] = {}  # client -> the pid of the process running its command
    while True:
        for key, _ in waiting.select(timeout=0.05):
            if key.fileobj is sys.stdin:  # the worker ended: so do the commands left
                for pid in running.values():
                    os.killpg(pid, signal.SIGKILL)
                return
            if key.fileobj is listener:
                connection, _ = listener.accept()
                try:
                    pid = serve_one(connection)
                except (OSError, ValueError):
                    pid = None
                if pid is None:
                    connection.close()
                    continue
                running[connection] = pid
                waiting.register(connection, selectors.EVENT_READ)
            elif not key.fileobj.recv(1):  # the client went away: its command goes too
                waiting.unregister(key.fileobj)
                try:
                    os.killpg(running[key.fileobj], signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for connection, pid in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done:
                continue
            try:
                os.killpg(pid, signal.SIGKILL)  # what it left running in its session
            except ProcessLookupError:
                pass
            try:
                connection.sendall(json.dumps({"status": status}).encode() + b"\n")
                waiting.unregister(connection)
            except (OSError, KeyError):  # a client gone away is no longer watched
                pass
            connection.close()
            del running[connection]


if __name__ == "__main__":
    main()
