"""Is the Hugging Face Hub usable, and the error raised when a dataset can be read neither from it nor locally.

Before a Hub download the loaders check, in a fraction of a second, whether it can work at all:

* offline mode (``HF_HUB_OFFLINE``, ``HF_DATASETS_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to a true value): only
  the local Hugging Face cache is tried (``datasets`` does that without touching the network);
* otherwise a TCP connection to the Hub endpoint (``HF_ENDPOINT``, default ``https://huggingface.co``) with a
  :data:`PROBE_TIMEOUT_S` limit; when it fails, :class:`DataUnavailableError` is raised at once instead of
  ``datasets`` retrying for about half a minute. Skipped when a proxy is configured (``HTTPS_PROXY`` and
  friends): a direct connection says nothing there.

:class:`DataUnavailableError` carries what a script needs for a one-line answer naming its own flags
(:meth:`DataUnavailableError.hint`).
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

__all__ = ["OFFLINE_ENV_VARS", "PROBE_TIMEOUT_S", "DataUnavailableError", "hub_unreachable", "offline_env_vars"]

#: environment variables that put the Hugging Face libraries in offline mode
OFFLINE_ENV_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")

#: seconds the connection probe of :func:`hub_unreachable` waits
PROBE_TIMEOUT_S = 3.0

_TRUE = {"1", "ON", "YES", "TRUE"}
_PROXY_ENV_VARS = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")


def offline_env_vars() -> list[str]:
    """The offline-mode variables of :data:`OFFLINE_ENV_VARS` set to a true value (``1``, ``ON``, ``YES``,
    ``TRUE``), as ``NAME=value`` strings; empty when the Hub may be used."""
    out = []
    for name in OFFLINE_ENV_VARS:
        value = os.environ.get(name)
        if value is not None and value.strip().upper() in _TRUE:
            out.append(f"{name}={value}")
    return out


def _endpoint() -> str:
    endpoint = os.environ.get("HF_ENDPOINT")
    if endpoint:
        return endpoint.rstrip("/")
    try:
        from huggingface_hub import constants

        return str(constants.ENDPOINT).rstrip("/")
    except (ImportError, AttributeError):  # pragma: no cover - huggingface_hub is a dependency of datasets
        return "https://huggingface.co"


def hub_unreachable(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the Hub cannot be reached (one line), or None when a connection to it opens (or a proxy is set).

    Parameters
    ----------
    timeout : float
        Seconds to wait for the name lookup plus the TCP connection.

    Returns
    -------
    str or None
        E.g. ``"cannot connect to https://huggingface.co ([Errno -2] Name or service not known)"``.
    """
    if any(os.environ.get(name) for name in _PROXY_ENV_VARS):
        return None
    endpoint = _endpoint()
    parts = urlsplit(endpoint)
    host = parts.hostname
    if not host:
        return None  # not a URL we understand: let the download report it
    port = parts.port or (80 if parts.scheme == "http" else 443)
    outcome: list[str | None] = []

    def probe() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as err:
            outcome.append(str(err) or type(err).__name__)

    # In a thread: the name lookup (getaddrinfo) has no timeout of its own and can hang far longer than `timeout`.
    worker = threading.Thread(target=probe, name="sara-hub-probe", daemon=True)
    worker.start()
    worker.join(timeout + 0.5)
    if not outcome:
        return f"cannot connect to {endpoint} (no answer within {timeout:g} s)"
    return None if outcome[0] is None else f"cannot connect to {endpoint} ({outcome[0]})"


def _one_line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class DataUnavailableError(ConnectionError):
    """A dataset split could not be read: no ``path=``/``data_dir=`` was given and the Hub cannot serve it
    (unreachable, offline mode without a cached copy, or a failed download).

    Attributes
    ----------
    dataset, split : str
        What was asked for (``"amc23"``, ``"test"``).
    repo_id : str or None
        The Hub dataset tried.
    reason : str
        Why the Hub could not serve it (one line).
    local_file : str or None
        The standard file name a ``data_dir`` would need (:data:`sara_trl.data.paths.LOCAL_FILES`), None where the
        split has none (then only a file path helps).
    name : str
        How the message names the data: the short name of :func:`sara_trl.data.load_dataset_by_name` where one
        names exactly this split (``"math500"``), else ``"<dataset> (<split>)"`` (``"amc23 (test)"``).
    """

    def __init__(self, dataset: str, split: str, repo_id: str | None, reason: str, local_file: str | None = None,
                 name: str | None = None):
        self.dataset = dataset
        self.split = split
        self.name = name or f"{dataset} ({split})"
        self.repo_id = repo_id
        self.reason = _one_line(reason)
        self.local_file = local_file
        super().__init__(self.hint("path= (a local JSONL/Parquet file)", "data_dir= (a folder holding {file})"))

    def hint(self, path_flag: str | None = "--dataset_path FILE", dir_flag: str | None = "--data_dir DIR") -> str:
        """The message, one line, with the ways to give the data named as a caller accepts them.

        Parameters
        ----------
        path_flag : str or None
            How the caller takes one data file (None: it does not).
        dir_flag : str or None
            How it takes a data folder (None: it does not); ``{file}`` is replaced by :attr:`local_file`, and
            `` (a folder holding <file>)`` is added when it has no placeholder.

        Returns
        -------
        str
            E.g. ``"amc23 (test) is not available: offline mode is on (HF_HUB_OFFLINE=1) and math-ai/amc23 is not
            in the Hugging Face cache; pass --data_dir DIR (a folder holding amc23.jsonl)"``.
        """
        options = []
        if dir_flag and self.local_file:
            options.append(dir_flag.format(file=self.local_file) if "{file}" in dir_flag
                           else f"{dir_flag} (a folder holding {self.local_file})")
        if path_flag:
            options.append(path_flag)
        what = f"{self.name} is not available: {self.reason}"
        if not options:
            return what
        return f"{what}; pass {' or '.join(options)}"
