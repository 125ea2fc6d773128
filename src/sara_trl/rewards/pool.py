"""Verifier worker pool: persistent worker processes that run tasks under a hard wall-clock limit per task.

This is the public machinery behind :func:`sara_trl.rewards.math_reward`, for any verifier whose check may hang or
take unbounded time (symbolic math, running generated code). A new verifier writes a module-level check function
(importable by a fresh interpreter), sends its tasks through a shared pool and maps each outcome to a
:class:`~sara_trl.rewards.verdict.Verdict`::

    from sara_trl.rewards import Status, Verdict, get_pool
    from sara_trl.rewards.pool import OK, TIMEOUT

    def check_program(code: str, tests: str) -> str:      # module level; runs in a worker
        ...
        return "correct"                                 # or "wrong"

    pool = get_pool(num_workers=2, timeout_s=10.0)
    outcomes = pool.run(check_program, [(code, tests) for code, tests in zip(codes, tests)])
    verdicts = [Verdict(Status(value)) if status == OK else
                Verdict(Status.TIMEOUT if status == TIMEOUT else Status.ERROR, reason=str(value))
                for status, value in outcomes]

The pool's kills, restarts, timeouts and errors are reported by :func:`sara_trl.rewards.stats` under ``pool/...``.

Why not ``concurrent.futures.ProcessPoolExecutor``: its workers pre-fetch queued calls, so when a result is late the
parent cannot tell which call is stuck or kill only that one. Here every worker holds at most one task, so the parent
knows when each task started, kills exactly the worker that overran (SIGKILL, which also stops C-level loops that a
signal handler cannot interrupt) and starts a replacement. This works from any thread, from code driven by an asyncio
loop, and in every process (each process gets its own pool; a forked child never reuses its parent's workers).

Two limits apply to each task:

* a *soft* limit (``timeout_s``) inside the worker: ``signal.setitimer`` raises :class:`_SoftTimeout` (a
  ``BaseException``, so library code that catches ``Exception`` does not swallow it) in the worker's main thread;
  the worker survives and reports ``"timeout"``;
* a *hard* limit (``timeout_s + grace_s``; ``n * timeout_s + grace_s`` for ``n`` items sent together as a group)
  enforced by the parent, which kills the worker. It counts from the moment the task is sent, so it includes
  loading the task (importing the module of a function the worker's initializer did not import).

Workers are fresh interpreters started with :class:`subprocess.Popen` (``python -c ...``), not with
``multiprocessing``: nothing of the parent is inherited (safe with CUDA, threads and open files), the parent's
``__main__`` script is never re-imported (a training script without an ``if __name__ == "__main__":`` guard stays
safe), and daemonic processes such as ``multiprocessing.Pool`` workers may use the pool too. Tasks and results travel
as pickles over a socket pair wrapped in :class:`multiprocessing.connection.Connection`. A worker ignores SIGINT, and
exits when the parent goes away (end of file on its socket). ``num_workers=0`` runs tasks inline in the calling
thread instead (for debugging): the soft limit then applies only on the main thread, and there is no hard limit.
"""

from __future__ import annotations

import atexit
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as _wait
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "WorkerPool",
    "get_pool",
    "shutdown_pools",
    "pool_counters",
    "reset_pool_counters",
    "OK",
    "TIMEOUT",
    "ERROR",
]

#: the status of one task's outcome ``(status, value)`` returned by :meth:`WorkerPool.run`
OK, TIMEOUT, ERROR = "ok", "timeout", "error"


class _SoftTimeout(BaseException):
    """Raised inside a worker when a task exceeds its soft time limit."""


class _SoftAlarm:
    """Context manager arming ``SIGALRM`` via ``setitimer`` (main thread of a POSIX process only)."""

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        self.active = (
            seconds is not None
            and seconds > 0
            and hasattr(signal, "setitimer")
            and threading.current_thread() is threading.main_thread()
        )

    def _handler(self, signum, frame):
        raise _SoftTimeout()

    def __enter__(self):
        if self.active:
            self._old = signal.signal(signal.SIGALRM, self._handler)
            signal.setitimer(signal.ITIMER_REAL, float(self.seconds))
        return self

    def __exit__(self, *exc):
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0.0)
            signal.signal(signal.SIGALRM, self._old)
        return False


def _run_task(func: Callable, args: tuple, soft_timeout_s: float | None) -> tuple[str, Any]:
    try:
        with _SoftAlarm(soft_timeout_s):
            value = func(*args)
        return OK, value
    except _SoftTimeout:
        return TIMEOUT, None
    except MemoryError:
        return ERROR, "MemoryError"
    except RecursionError:
        return ERROR, "RecursionError"
    except Exception as e:  # reported to the parent, which counts it as an ERROR verdict
        return ERROR, f"{type(e).__name__}: {e}"[:500]


def _worker_main(fd: int) -> None:  # pragma: no cover - runs in a child interpreter
    """Entry point of a worker interpreter: serve tasks from the socket ``fd`` until end of file."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = Connection(fd)
    try:
        initializer, soft_timeout_s, memory_limit_mb = conn.recv()
        if memory_limit_mb:
            try:
                import resource

                limit = int(memory_limit_mb) * 1024 * 1024
                resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
            except (ImportError, ValueError, OSError):
                pass
        if initializer is not None:
            initializer()
    except BaseException as e:
        try:
            conn.send(("init_error", f"{type(e).__name__}: {e}"[:500]))
        except Exception:
            pass
        return
    conn.send(("ready", None))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        except Exception as e:  # unpicklable task (e.g. a function the worker cannot import)
            conn.send((None, ERROR, f"cannot load task: {type(e).__name__}: {e}"[:500]))
            continue
        if msg is None:
            return
        task_id, func, items = msg
        results = [_run_task(func, args, soft_timeout_s) for args in items]
        try:
            conn.send((task_id, results))
        except Exception as e:  # unpicklable result
            conn.send((task_id, [(ERROR, f"unpicklable result: {e}"[:500])] * len(items)))


_WORKER_CODE = "import sys; from sara_trl.rewards.pool import _worker_main; _worker_main(int(sys.argv[1]))"


class _Worker:
    __slots__ = ("proc", "conn", "ready", "task", "deadline", "started")

    def __init__(self, proc: subprocess.Popen, conn: Connection):
        self.proc = proc
        self.conn = conn
        self.ready = False
        self.task: int | None = None
        self.deadline = 0.0
        self.started = time.monotonic()

    def kill(self):
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # already gone
            pass
        try:
            self.conn.close()
        except Exception:
            pass


class WorkerPool:
    """Persistent worker processes that run ``func(*args)`` tasks under a hard time limit.

    Parameters
    ----------
    num_workers : int, default 1
        Number of worker processes (>= 1), or 0 to run tasks inline in the calling thread (soft limit on the main
        thread only, no hard limit; for debugging).
    timeout_s : float, default 5.0
        Soft per-task limit in seconds (raised inside the worker).
    grace_s : float, default 2.0
        Extra seconds after ``timeout_s`` before the parent kills the worker (hard limit).
    initializer : callable or None, default None
        Module-level callable run once in every worker before it accepts tasks (e.g. imports, warm-up); its time
        does not count against any task.
    memory_limit_mb : int or None, default 4096
        Address-space limit of each worker in MiB (``RLIMIT_AS``, POSIX), or ``None`` for no limit.
    startup_timeout_s : float, default 120.0
        Seconds a new worker may take to become ready before :meth:`run` raises.

    Raises
    ------
    ValueError
        On a negative ``num_workers``, a non-positive ``timeout_s`` or a negative ``grace_s``.
    """

    def __init__(
        self,
        num_workers: int = 1,
        timeout_s: float = 5.0,
        grace_s: float = 2.0,
        initializer: Callable[[], None] | None = None,
        memory_limit_mb: int | None = 4096,
        startup_timeout_s: float = 120.0,
    ):
        if int(num_workers) < 0:
            raise ValueError(f"num_workers must be >= 0, got {num_workers}")
        if timeout_s is None or not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if grace_s is None or grace_s < 0:
            raise ValueError(f"grace_s must be >= 0, got {grace_s}")
        self.num_workers = int(num_workers)
        self.timeout_s = float(timeout_s)
        self.grace_s = float(grace_s)
        self.initializer = initializer
        self.memory_limit_mb = memory_limit_mb
        self.startup_timeout_s = float(startup_timeout_s)
        self._lock = threading.Lock()
        self._workers: list[_Worker] = []
        self._pid = os.getpid()
        self._initialized_inline = False
        self.counters = {"tasks": 0, "timeouts": 0, "kills": 0, "errors": 0, "restarts": 0, "inline_calls": 0}

    # -- lifecycle -------------------------------------------------------------------------------------------
    def _check_pid(self):
        if self._pid != os.getpid():  # forked child: the workers belong to the parent, forget them
            self._workers = []
            self._pid = os.getpid()

    def _spawn(self) -> _Worker:
        parent_sock, child_sock = socket.socketpair()
        child_fd = child_sock.fileno()
        env = dict(os.environ)
        # the worker must be able to import whatever the parent can (functions travel by reference)
        paths = [p for p in sys.path if p] + [os.getcwd()]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        try:
            proc = subprocess.Popen(
                [sys.executable, "-c", _WORKER_CODE, str(child_fd)],
                pass_fds=(child_fd,),
                stdin=subprocess.DEVNULL,
                env=env,
                close_fds=True,
            )
        finally:
            child_sock.close()
        conn = Connection(parent_sock.detach())
        conn.send((self.initializer, self.timeout_s, self.memory_limit_mb))
        return _Worker(proc, conn)

    def close(self):
        """Stop all workers (idempotent). The pool restarts them on the next :meth:`run`."""
        with self._lock:
            self._check_pid()
            for w in self._workers:
                try:
                    w.conn.send(None)
                except Exception:
                    pass
            for w in self._workers:
                try:
                    w.proc.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
                w.kill()
            self._workers = []

    # -- execution -------------------------------------------------------------------------------------------
    def run(
        self, func: Callable, args_list: Sequence[tuple], groups: Sequence[Sequence[int]] | None = None
    ) -> list[tuple[str, Any]]:
        """Run ``func(*args)`` for every ``args`` in ``args_list`` on the workers.

        ``func`` and the arguments must be picklable (``func`` module-level). Results come back in input order.
        Concurrent callers (threads) are served one after the other.

        Parameters
        ----------
        func : callable
            Module-level callable.
        args_list : sequence of tuple, shape (N,)
            The argument tuples, one per task.
        groups : sequence of sequence of int, optional
            A partition of ``range(N)`` into lists of indices that travel to one worker together (e.g. all
            completions that share a gold answer, so the worker parses it once). Each item still gets its own soft
            limit; the hard limit of a group is ``len(group) * timeout_s + grace_s`` seconds, and a hard kill marks
            the whole group as timed out. Default: one item per message.

        Returns
        -------
        list of (str, object), shape (N,)
            One ``(status, value)`` per task: ``("ok", result)``, ``("timeout", None)`` (soft or hard limit hit) or
            ``("error", message)`` (the task raised, or its worker died).

        Raises
        ------
        ValueError
            ``groups`` is not a partition of ``range(N)``.
        RuntimeError
            A worker could not be started (its initializer failed or it did not become ready within
            ``startup_timeout_s``).
        """
        n = len(args_list)
        if groups is None:
            groups = [[i] for i in range(n)]
        else:
            groups = [list(g) for g in groups if len(g)]
            if sorted(i for g in groups for i in g) != list(range(n)):
                raise ValueError("groups must partition range(len(args_list))")
        if n == 0:
            return []
        with self._lock:
            self._check_pid()
            self.counters["tasks"] += n
            if self.num_workers == 0:
                return self._run_inline(func, args_list)
            return self._run_workers(func, args_list, groups)

    def _run_inline(self, func, args_list):
        if not self._initialized_inline and self.initializer is not None:
            self.initializer()
            self._initialized_inline = True
        out = []
        for args in args_list:
            self.counters["inline_calls"] += 1
            status, value = _run_task(func, tuple(args), self.timeout_s)
            self._count(status)
            out.append((status, value))
        return out

    def _count(self, status):
        if status == TIMEOUT:
            self.counters["timeouts"] += 1
        elif status == ERROR:
            self.counters["errors"] += 1

    def _finish(self, results, group, outcome):
        for i, (status, value) in zip(group, outcome):
            results[i] = (status, value)
            self._count(status)

    def _run_workers(self, func, args_list, groups):
        n_groups = len(groups)
        results: list[tuple[str, Any] | None] = [None] * len(args_list)
        pending = deque(range(n_groups))
        # start workers lazily, never more than there are messages to send
        while len(self._workers) < min(self.num_workers, n_groups):
            self._workers.append(self._spawn())
        done = 0
        while done < n_groups:
            now = time.monotonic()
            for w in list(self._workers):
                if w.ready and w.task is None and pending:
                    gi = pending.popleft()
                    group = groups[gi]
                    try:
                        payload = pickle.dumps((gi, func, [tuple(args_list[i]) for i in group]))
                    except Exception as e:  # unpicklable task: report, do not kill anything
                        msg = f"cannot pickle task: {type(e).__name__}: {e}"[:500]
                        self._finish(results, group, [(ERROR, msg)] * len(group))
                        done += 1
                        continue
                    try:
                        w.conn.send_bytes(payload)
                    except OSError:  # the worker is gone: retry the task on a fresh one
                        pending.appendleft(gi)
                        self._replace(w)
                        continue
                    w.task = gi
                    w.deadline = now + len(group) * self.timeout_s + self.grace_s
            if done >= n_groups:
                break
            # wait for a message or the nearest deadline
            deadlines = [w.deadline for w in self._workers if w.task is not None]
            deadlines += [w.started + self.startup_timeout_s for w in self._workers if not w.ready]
            wait_s = max(0.0, min(deadlines) - time.monotonic()) if deadlines else 0.05
            for conn in _wait([w.conn for w in self._workers], timeout=wait_s):
                w = next(w for w in self._workers if w.conn is conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    if w.task is not None:
                        group = groups[w.task]
                        self._finish(results, group, [(ERROR, "worker process died")] * len(group))
                        done += 1
                    elif not w.ready:
                        self._workers.remove(w)
                        w.kill()
                        raise RuntimeError("a verifier worker process exited during start-up") from None
                    self._replace(w)
                    continue
                if msg[0] == "ready":
                    w.ready = True
                elif msg[0] == "init_error":
                    self._workers.remove(w)
                    w.kill()
                    raise RuntimeError(f"verifier worker initialization failed: {msg[1]}")
                elif w.task is not None:
                    group = groups[w.task]
                    if len(msg) == 3:  # (None, ERROR, message): the worker could not load the task
                        outcome = [(msg[1], msg[2])] * len(group)
                    else:
                        outcome = msg[1]
                    self._finish(results, group, outcome)
                    done += 1
                    w.task = None
            now = time.monotonic()
            for w in list(self._workers):
                if w.task is not None and now > w.deadline:
                    group = groups[w.task]
                    self._finish(results, group, [(TIMEOUT, None)] * len(group))
                    self.counters["kills"] += 1
                    done += 1
                    w.task = None
                    self._replace(w)
                elif not w.ready and now > w.started + self.startup_timeout_s:
                    self._workers.remove(w)
                    w.kill()
                    raise RuntimeError(f"a verifier worker did not start within {self.startup_timeout_s:.0f} s")
        return results  # type: ignore[return-value]

    def _replace(self, w: _Worker):
        if w in self._workers:
            self._workers.remove(w)
        w.kill()
        self.counters["restarts"] += 1
        self._workers.append(self._spawn())


_POOLS: dict[tuple, WorkerPool] = {}
_POOLS_LOCK = threading.Lock()


def get_pool(
    num_workers: int,
    timeout_s: float,
    grace_s: float = 2.0,
    initializer: Callable[[], None] | None = None,
    memory_limit_mb: int | None = 4096,
) -> WorkerPool:
    """The process-wide shared :class:`WorkerPool` for one configuration, created on first use.

    Verifiers with the same configuration share one pool (and its workers) in a process; each process, including a
    forked child, has its own. The arguments are those of :class:`WorkerPool`.

    Parameters
    ----------
    num_workers, timeout_s, grace_s, initializer, memory_limit_mb
        As for :class:`WorkerPool`; together they are the key of the shared pool.

    Returns
    -------
    WorkerPool
        The shared pool for this configuration in this process.

    Raises
    ------
    ValueError
        Invalid arguments (see :class:`WorkerPool`).
    """
    key = (int(num_workers), float(timeout_s), float(grace_s), initializer, memory_limit_mb)
    with _POOLS_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = WorkerPool(num_workers, timeout_s, grace_s, initializer, memory_limit_mb)
            _POOLS[key] = pool
        return pool


def pool_counters() -> dict[str, int]:
    """Counters ``tasks``, ``timeouts``, ``kills``, ``errors`` and ``restarts``, summed over this process's pools."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    keys = ("kills", "restarts", "timeouts", "errors", "tasks")
    return {k: sum(p.counters[k] for p in pools) for k in keys}


def reset_pool_counters() -> None:
    """Zero the counters of this process's shared pools."""
    with _POOLS_LOCK:
        for p in _POOLS.values():
            for k in p.counters:
                p.counters[k] = 0


def shutdown_pools():
    """Stop the workers of every shared pool in this process (they restart on demand)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
    for p in pools:
        p.close()


def _after_fork_in_child():  # pragma: no cover - runs in forked children
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    for p in _POOLS.values():
        p._workers = []
        p._pid = os.getpid()
        p._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(shutdown_pools)
