"""A tiny Marian model and its tokenizer, saved as transformers saves them: a SentencePiece model trained on a
few German and English sentences and a small random MarianMTModel (no network). The models that the tests of
evaluate.py MODEL --hf import (test_import_marian*.py, test_full_disk_rerun.py); they need transformers and
sentencepiece, which those modules skip without."""

import io
import json

import torch

ENGLISH = ["the big dog sees a cat", "a cat runs home", "the small bird sings", "dogs and cats play",
           "a bird sees the dog", "the cat and the bird"]
GERMAN = ["der große hund sieht eine katze", "eine katze läuft nach hause", "der kleine vogel singt",
          "hunde und katzen spielen", "ein vogel sieht den hund", "die katze und der vogel"]
MARIAN_SPECIALS = ["</s>", "<unk>", "<pad>"]  # eos 0, unk 1, pad 2 (the decoder start) on both sides


def train_spm(texts: list[str], path) -> list[str]:
    """A tiny unigram SentencePiece model written to ``path``; its pieces."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts * 5), model_writer=model, vocab_size=40, model_type="unigram",
        hard_vocab_limit=False, minloglevel=2,
    )
    path.write_bytes(model.getvalue())
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    return [processor.id_to_piece(i) for i in range(processor.get_piece_size())]


def write_vocab(pieces: list[str], path) -> dict[str, int]:
    vocab = {token: i for i, token in enumerate(MARIAN_SPECIALS)}
    for piece in pieces:
        if piece != "<s>":  # Marian's vocabularies have no BOS
            vocab.setdefault(piece, len(vocab))
    path.write_text(json.dumps(vocab), encoding="utf-8")
    return vocab


def save_marian(folder, *, separate: bool = False, seed: int = 0, **overrides):
    """A random MarianMTModel and its MarianTokenizer saved in ``folder``; (model, tokenizer).

    The LayerNorms and the logits bias are moved off their initial values, so that a wrong feature order or
    a dropped bias shows; pad (the decoder start) is -inf in the bias, as this project never predicts it, so
    that transformers' beam search sees the same distribution (see export/marian.py).
    """
    from transformers import MarianConfig, MarianMTModel, MarianTokenizer

    folder.mkdir(parents=True)
    joint = GERMAN if separate else GERMAN + ENGLISH  # one vocabulary for both languages, as OPUS-MT's
    source = write_vocab(train_spm(joint, folder / "src.spm"), folder / "src_vocab.json")
    target = source
    if separate:
        target = write_vocab(train_spm(ENGLISH, folder / "tgt.spm"), folder / "tgt_vocab.json")
    target_vocab = str(folder / "tgt_vocab.json") if separate else None
    tokenizer = MarianTokenizer(
        str(folder / "src.spm"), str(folder / ("tgt.spm" if separate else "src.spm")),
        str(folder / "src_vocab.json"), target_vocab_file=target_vocab, separate_vocabs=separate,
    )
    settings = {
        "vocab_size": len(source), "decoder_vocab_size": len(target), "d_model": 16,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
        "encoder_ffn_dim": 32, "decoder_ffn_dim": 32, "max_position_embeddings": 64,
        "pad_token_id": 2, "decoder_start_token_id": 2, "eos_token_id": 0, "forced_eos_token_id": 0,
        "activation_function": "swish", "scale_embedding": True,
        "share_encoder_decoder_embeddings": not separate, "dropout": 0.0,
    }
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**{**settings, **overrides})).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name:
                parameter.add_(0.3 * torch.randn_like(parameter))
        model.final_logits_bias.normal_()
        model.final_logits_bias[0, 0] += 2.0  # EOS now and then: sentences end before the length limit
        model.final_logits_bias[0, 2] = float("-inf")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    for name in ("src.spm", "tgt.spm", "src_vocab.json", "tgt_vocab.json"):  # only what save_pretrained wrote
        (folder / name).unlink(missing_ok=True)
    return model, tokenizer
