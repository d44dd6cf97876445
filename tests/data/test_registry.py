"""The corpus registry: every dataset name is one reader, and a new reader plus its row is a dataset."""

import json
from pathlib import Path
from typing import get_args

import pytest

from data.datamodule import TranslationDataModule
from data.pairs import Pair
from data.reader import SPLITS, CorpusReader, SplitName, TextSide
from data.registry import CORPORA, DatasetName


class JsonLines(CorpusReader):
    """The reader of docs/architecture.md's walk-through: ``<split>.jsonl`` of {"source", "target"} lines."""

    def read(self) -> dict[SplitName, list[Pair]]:
        return {split: [Pair(**json.loads(line)) for line in self.file(split).read_text().splitlines()]
                for split in SPLITS}

    def file(self, split: SplitName, side: TextSide = "source") -> Path:
        return Path(self.options.path or "") / f"{split}.jsonl"


def test_the_command_lines_choices_are_the_registrys_names():
    assert get_args(DatasetName) == tuple(CORPORA)
    assert set(CORPORA) == {"toy", "copy", "reverse", "multi30k", "parallel", "tsv", "tatoeba", "scan"}


def test_a_reader_and_its_row_make_a_dataset(tmp_path, monkeypatch):
    for split in SPLITS:
        lines = [{"source": f"ein {split} {i}", "target": f"one {split} {i}"} for i in range(3)]
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    monkeypatch.setitem(CORPORA, "jsonl", JsonLines)
    data = TranslationDataModule(dataset="jsonl", path=str(tmp_path))  # type: ignore[arg-type]
    assert data.tokenizer_kind == "bpe" and (data.source_lang, data.target_lang) == ("de", "en")
    assert data.pairs("val")[2] == Pair("ein val 2", "one val 2")
    assert data.origin("test", 1) == (str(tmp_path / "test.jsonl"), 2)
    with pytest.raises(ValueError, match="dataset='jsonl' reads files: give the corpus folder as path"):
        TranslationDataModule(dataset="jsonl")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="val_split is an option of dataset multi30k, parallel, tsv only"):
        TranslationDataModule(dataset="jsonl", path=str(tmp_path), val_split="dev")  # type: ignore[arg-type]


def test_an_unknown_dataset_is_answered_with_every_registered_name(monkeypatch):
    monkeypatch.setitem(CORPORA, "jsonl", JsonLines)
    names = "toy, copy, reverse, multi30k, parallel, tsv, tatoeba, scan, jsonl"
    with pytest.raises(ValueError, match=f"dataset must be one of {names}; got 'wmt'"):
        TranslationDataModule(dataset="wmt")  # type: ignore[arg-type]
