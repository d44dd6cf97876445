"""Checkpoints saved with the old parameter names load on every path that loads weights."""

import re

import torch

from model import Transformer
from tests.conftest import tiny_config
from training.checkpoint_io import check_resume_checkpoint
from training.checkpoints import (
    OLD_NORM_NAMES,
    load_run,
    read_checkpoint,
    upgrade_data_settings,
    upgrade_state_dict,
)
from training.module import TranslationModule


def with_old_names(state_dict: dict) -> dict:
    """``state_dict`` as an earlier version saved it: a layer's norms under ``<block>.norm``."""
    old = {}
    for key, value in state_dict.items():
        for (stack, block), norm in OLD_NORM_NAMES.items():
            key = re.sub(rf"(^|\.){stack}\.(\d+)\.{norm}\.", rf"\g<1>{stack}.\g<2>.{block}.norm.", key)
        old[key] = value
    return old


def test_old_names_are_renamed_and_today_s_pass_unchanged():
    state = {
        "model.encoder_layers.0.attn_block.norm.weight": 1,
        "model.decoder_layers.11.cross_block.norm.bias": 2,
        "decoder_layers.1.ff_block.norm.weight": 3,
        "model.encoder_layers.1.self_attn_norm.weight": 4,
        "model.encoder_layers.0.cross_block.norm.weight": 5,  # never a name: the encoder has no cross block
        "model.my_encoder_layers.0.attn_block.norm.weight": 6,  # not the model's stack
    }
    assert list(upgrade_state_dict(state).items()) == [
        ("model.encoder_layers.0.self_attn_norm.weight", 1),
        ("model.decoder_layers.11.cross_attn_norm.bias", 2),
        ("decoder_layers.1.feed_forward_norm.weight", 3),
        ("model.encoder_layers.1.self_attn_norm.weight", 4),
        ("model.encoder_layers.0.cross_block.norm.weight", 5),
        ("model.my_encoder_layers.0.attn_block.norm.weight", 6),
    ]


def test_a_checkpoint_with_old_names_loads_for_evaluation_resume_and_lightning(tiny_run, tmp_path):
    """evaluate.py and the tab (``load_run``), ``--resume``'s check and Lightning's own restore
    (``on_load_checkpoint``) all load the old names into today's model, weights unchanged."""
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    old_state = with_old_names(saved["state_dict"])
    assert "model.decoder_layers.0.cross_block.norm.weight" in old_state
    assert not any("_attn_norm" in key or "feed_forward_norm" in key for key in old_state)
    old = tmp_path / "old.ckpt"
    torch.save({**saved, "state_dict": old_state}, old)
    expected = load_run(checkpoint).module.state_dict()

    assert set(read_checkpoint(old)["state_dict"]) == set(expected)
    for name, value in load_run(old).module.state_dict().items():
        assert torch.equal(value, expected[name]), name

    settings = {name: value for name, value in saved["hyper_parameters"].items() if not name.startswith("_")}
    resumed = TranslationModule(**settings)
    assert check_resume_checkpoint(old, resumed) == saved["global_step"]
    assert torch.equal(resumed.model.decoder_layers[0].cross_attn_norm.weight,
                       expected["model.decoder_layers.0.cross_attn_norm.weight"])

    restored = torch.load(old, map_location="cpu", weights_only=True)
    lightning = TranslationModule(**settings)
    lightning.on_load_checkpoint(restored)  # as Lightning calls it, before it loads the weights
    lightning.load_state_dict(restored["state_dict"])  # strict
    assert torch.equal(lightning.model.encoder_layers[1].feed_forward_norm.bias,
                       expected["model.encoder_layers.1.feed_forward_norm.bias"])


def test_today_s_model_has_no_old_names():
    names = Transformer(tiny_config()).state_dict()
    assert list(upgrade_state_dict(names)) == list(names)


def test_a_checkpoint_from_before_the_marian_fields_loads_as_today_s_model(tiny_run, tmp_path):
    """Hyperparameters saved before ``scale_embedding`` and ``logits_bias`` existed load with their defaults:
    the same model, the same weights, without a warning."""
    checkpoint = tiny_run / "checkpoints" / "last.ckpt"
    saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
    new_fields = ("scale_embedding", "logits_bias")
    older = {k: v for k, v in saved["hyper_parameters"].items() if k not in new_fields}
    old = tmp_path / "old.ckpt"
    torch.save({**saved, "hyper_parameters": older}, old)
    loaded = load_run(old).module
    assert (loaded.config.scale_embedding, loaded.config.logits_bias) == (True, False)
    expected = load_run(checkpoint).module.state_dict()
    assert set(loaded.state_dict()) == set(expected)
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, expected[name]), name


def test_the_flat_toy_and_gold_data_settings_of_earlier_versions_are_grouped():
    old = {"dataset": "toy", "toy_train_size": 2000, "toy_split": "length", "seed": 7, "gold_sentences": None,
           "gold_alignments": None, "gold_zero_based": True, "gold_direction": "forward"}
    assert upgrade_data_settings(old) == {
        "dataset": "toy", "seed": 7, "toy": {"train_size": 2000, "split": "length"},
        "gold": {"sentences": None, "alignments": None},  # ignored without links then, refused now: dropped
    }
    linked = {"gold_sentences": "s.txt", "gold_alignments": "a.txt", "gold_zero_based": True}
    assert upgrade_data_settings(linked) == {"gold": {"sentences": "s.txt", "alignments": "a.txt",
                                                      "zero_based": True}}
    today = {"dataset": "toy", "toy": {"train_size": 5}, "gold": {"sentences": None}}
    assert upgrade_data_settings(today) == today
