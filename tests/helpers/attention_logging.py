"""The attention logger's hand-made inputs, shared by the tests of what it logs
(tests/viz/test_attention_logging.py) and of the explanations it logs beside
(tests/viz/test_explain_logging.py): three pairs with gold links, an untrained module to match, a recording
stand-in for TensorBoard's writer, and the default run's model and data."""

from types import SimpleNamespace

import pytest
import torch

from data.pairs import Pair
from data.tokenizer import Tokenizer
from tests.conftest import REPO
from training.module import TranslationModule
from viz import logger as attention_logging
from viz.logger import AttentionLogger

# Source and target lengths differ, so that source padding and target padding fall on different positions.
PAIRS = [
    Pair("a b c d e", "x y z", ((0, 0), (2, 1), (4, 2))),
    Pair("a b", "x y z w", ((0, 0), (1, 1), (1, 2), (0, 3))),
    Pair("c d e", "z w", ((2, 0), (1, 1))),
]


@pytest.fixture(scope="module")
def hand_made():
    """A stand-in for the data module serving PAIRS, and an untrained module (2 layers, 2 heads) to match."""
    src = Tokenizer.train([p.source for p in PAIRS])
    tgt = Tokenizer.train([p.target for p in PAIRS])
    datamodule = SimpleNamespace(pairs=lambda split: PAIRS, src_tokenizer=src, tgt_tokenizer=tgt,
                                 gold_set=lambda: None)
    torch.manual_seed(0)
    module = TranslationModule(
        src_vocab_size=src.vocab_size, tgt_vocab_size=tgt.vocab_size, d_model=16, num_heads=2,
        num_encoder_layers=2, num_decoder_layers=2, d_ff=32,
    ).eval()
    return datamodule, module


@pytest.fixture
def recorded(monkeypatch):
    """Tag -> what would be drawn: (weights, row tokens, column tokens), or the layers × heads values."""
    drawn = {}
    monkeypatch.setattr(attention_logging, "attention_heatmap", lambda w, rows, cols, title: (w, rows, cols))
    monkeypatch.setattr(attention_logging, "attention_grid", lambda w, rows, cols, title: (w, rows, cols))
    monkeypatch.setattr(attention_logging, "layer_head_matrix", lambda values, title, **kwargs: values)
    summaries = {}  # tag -> what the ATTENTION tab would read
    writer = SimpleNamespace(add_summary=lambda summary, step: summaries.update(
        {value.tag: value for value in summary.value}))
    experiment = SimpleNamespace(
        add_figure=lambda tag, figure, step: drawn.update({tag: figure}), file_writer=writer,
        summaries=summaries,
    )
    return experiment, drawn


def default_run(**attention) -> tuple[TranslationModule, object, AttentionLogger]:
    """The default model (configs/default.yaml, untrained, in eval mode), its toy data with the default run's
    validation pairs, and its AttentionLogger with ``attention`` overriding the config's options."""
    import yaml

    from data.datamodule import TranslationDataModule
    from data.reader import ToyOptions

    defaults = yaml.safe_load((REPO / "configs" / "default.yaml").read_text())
    toy = ToyOptions(**{**defaults["data"].pop("toy"), "train_size": 100})  # validation pairs as by default
    datamodule = TranslationDataModule(toy=toy, **defaults["data"])
    module = TranslationModule(
        src_vocab_size=datamodule.src_vocab_size, tgt_vocab_size=datamodule.tgt_vocab_size, **{
            k: v for k, v in defaults["model"].items() if k in ("d_model", "num_heads", "num_encoder_layers",
                                                                "num_decoder_layers", "d_ff")
        },
    ).eval()
    return module, datamodule, AttentionLogger(**{**defaults["attention"], **attention})
