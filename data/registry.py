"""Every dataset the data module reads, by the name ``--data.dataset`` gives it: one reader (``data.reader``)
a row. Adding a corpus is a reader in a file of its own and a row here (docs/architecture.md).
"""

from typing import Literal

from data.corpora import Multi30k, ParallelFiles, Scan, TsvFiles
from data.reader import CorpusOptions, CorpusReader, refused_variant
from data.tatoeba import Tatoeba
from data.toy import CopyTask, ReverseTask, ToyTranslation

CORPORA: dict[str, type[CorpusReader]] = {
    "toy": ToyTranslation,
    "copy": CopyTask,
    "reverse": ReverseTask,
    "multi30k": Multi30k,
    "parallel": ParallelFiles,
    "tsv": TsvFiles,
    "tatoeba": Tatoeba,
    "scan": Scan,
}

# The names as a type, for the command line's choices and its --help (jsonargparse reads the annotation).
DatasetName = Literal[tuple(CORPORA)]  # type: ignore[valid-type]


def open_corpus(dataset: str, options: CorpusOptions) -> CorpusReader:
    """The reader of ``dataset`` for ``options``, which it has checked.

    Raises:
        ValueError: ``dataset`` is not a name of :data:`CORPORA` (the message lists them), an option is set
            that the dataset does not read (the message names the datasets that do), or the reader refuses
            its options.
    """
    if dataset not in CORPORA:
        raise ValueError(f"dataset must be one of {', '.join(CORPORA)}; got {dataset!r}")
    reader = CORPORA[dataset]
    option = refused_variant(options, reader.reads)
    if option is not None:
        readers = [name for name, other in CORPORA.items() if option in other.reads]
        raise ValueError(f"{option} is an option of dataset {', '.join(readers)} only; {dataset!r} has none")
    return reader(dataset, options)
