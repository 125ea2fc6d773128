"""The repository is self-contained: no code reads a data folder outside it.

The library takes data from the Hugging Face Hub or from a path / folder the user passes (``path=``, ``data_dir=``,
``--data_dir``, ``--dataset_path``); the tests use ``tests/fixtures/data``. A lookup of a ``shared`` folder beside the
checkout (or of an environment variable naming one) made a fresh clone fail where the developers' machines passed, so
the source text is scanned for one, and the loaders are checked to ignore such a folder when it exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import datasets
import pytest

from sara_trl.data import DataUnavailableError, load_dataset_by_name

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("src", "tests", "examples", "benchmarks", "scripts")
SUFFIXES = {".py", ".sh", ".toml", ".cfg", ".ini", ".yaml", ".yml", ".md", ".txt"}

# Built from pieces so that this file does not match itself.
_S = "shar" + "ed"
FORBIDDEN = {
    "a path through a folder named shared": re.compile(_S + r"\s*[/\\]+\s*data|\.\.[/\\]+" + _S),
    "a path component 'shared'": re.compile(r"""(?:/|\bjoin\(|\bPath\()\s*[^\n)]*["']""" + _S + r"""["']"""
                                            r"""|["']""" + _S + r"""["']\s*/"""),
    "the old environment variable": re.compile(r"SARA_" + _S.upper()),
    "the old lookup functions": re.compile(r"find_" + _S + r"_data_dir|" + _S + r"_data_file"),
}


def _scanned_files() -> list[Path]:
    files = []
    for top in SCANNED:
        base = ROOT / top
        if not base.is_dir():
            continue
        for p in base.rglob("*"):
            if (p.is_file() and p.suffix in SUFFIXES and p.resolve() != Path(__file__).resolve()
                    and not any(part.endswith(".egg-info") or part == "__pycache__" for part in p.parts)):
                files.append(p)
    return sorted(files)


def test_the_scan_sees_the_code_and_catches_each_pattern():
    files = {p.relative_to(ROOT).as_posix() for p in _scanned_files()}
    assert {"src/sara_trl/data/loaders.py", "src/sara_trl/evaluate.py", "examples/math_1p5b.py",
            "tests/conftest.py"} <= files
    samples = {
        "a path through a folder named shared": ["ROOT.parent / '" + _S + "/data'", "../" + _S + "/data"],
        "a path component 'shared'": ['repo.parent / "' + _S + '" / "data"', 'os.path.join(here, "' + _S + '")',
                                      "Path('" + _S + "') / 'data'"],
        "the old environment variable": ["os.environ['SARA_" + _S.upper() + "_DATA']"],
        "the old lookup functions": ["find_" + _S + "_data_dir(required=False)"],
    }
    for what, texts in samples.items():
        for text in texts:
            assert FORBIDDEN[what].search(text), (what, text)
    for harmless in ['"shared memory"', "a shared pool", "torch.multiprocessing shared tensors"]:
        assert not any(rx.search(harmless) for rx in FORBIDDEN.values()), harmless


def test_no_code_reads_a_shared_folder_outside_the_repository():
    hits = []
    for p in _scanned_files():
        text = p.read_text(encoding="utf-8", errors="replace")
        for what, rx in FORBIDDEN.items():
            for m in rx.finditer(text):
                line = text.count("\n", 0, m.start()) + 1
                hits.append(f"{p.relative_to(ROOT)}:{line}: {what}: {m.group(0)!r}")
    assert not hits, "data must come from the Hub or a path the user gives, not a folder beside the checkout:\n" + (
        "\n".join(hits))


def test_a_shared_folder_beside_the_working_directory_is_ignored(tmp_path, monkeypatch):
    """Offline with no data_dir, a sibling ``shared`` folder whose ``data`` holds the file (under the working directory
    and beside it) does not help: the loader answers with DataUnavailableError instead of reading it."""
    row = '{"problem": "1 + 1?", "answer": "2", "id": "x"}\n'
    for folder in (tmp_path / "work" / _S / "data", tmp_path / _S / "data"):
        folder.mkdir(parents=True)
        (folder / "amc23.jsonl").write_text(row)
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("SARA_" + _S.upper() + "_DATA", str(tmp_path / _S / "data"))
    real = datasets.load_dataset

    def no_hub(name, *args, **kwargs):
        if name in ("json", "parquet"):
            files = str(kwargs.get("data_files"))
            assert f"/{_S}/data/" not in files.replace("\\", "/"), f"read {files}"
            return real(name, *args, **kwargs)
        raise ConnectionError(f"offline: {name}")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    with pytest.raises(DataUnavailableError, match=r"^amc23 \(test\) is not available"):
        load_dataset_by_name("amc23")
    mine = tmp_path / "my_data"
    mine.mkdir()
    (mine / "amc23.jsonl").write_text(row)
    assert len(load_dataset_by_name("amc23", data_dir=mine)) == 1  # a folder given explicitly is read
