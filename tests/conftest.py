"""Shared fixtures: tiny models that run in milliseconds on a CPU."""

import os
import zipfile
from pathlib import Path

import pytest
import torch

from data.special import SPECIALS
from model import Transformer, TransformerConfig

PAD, BOS, EOS = SPECIALS.pad_id, SPECIALS.bos_id, SPECIALS.eos_id

# Under pytest-xdist (`-n auto`: a worker a core) each worker keeps its share of the cores, and so do the
# train.py and evaluate.py processes its tests start, rather than every worker's torch taking them all.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, torch.get_num_threads() // _WORKERS))
    os.environ["OMP_NUM_THREADS"] = str(torch.get_num_threads())


def tiny_config(**overrides) -> TransformerConfig:
    settings = {
        "src_vocab_size": 13,
        "tgt_vocab_size": 11,
        "d_model": 16,
        "num_heads": 4,
        "num_encoder_layers": 2,
        "num_decoder_layers": 2,
        "d_ff": 32,
        "dropout": 0.0,
        "max_len": 64,
        **SPECIALS.ids,
    }
    settings.update(overrides)
    return TransformerConfig(**settings)


@pytest.fixture
def tiny_model() -> Transformer:
    torch.manual_seed(0)
    return Transformer(tiny_config()).eval()


def random_ids(batch: int, length: int, vocab: int, *, generator=None) -> torch.Tensor:
    """Ids of ordinary tokens (no pad, bos or eos), shape (batch, length)."""
    return torch.randint(3, vocab, (batch, length), generator=generator)


@pytest.fixture
def src() -> torch.Tensor:
    """(4, 7) source ids for models of ``tiny_config()``; rows 1 and 3 are padded after 4 and 2 tokens."""
    src = random_ids(4, 7, 13, generator=torch.Generator().manual_seed(3))
    src[1, 4:] = PAD
    src[3, 2:] = PAD
    return src


# -- runs of train.py, shared by the training and evaluation tests -------------------------------------------

REPO = __import__("pathlib").Path(__file__).resolve().parent.parent
TINY_CONFIG = str(REPO / "configs" / "tiny.yaml")
# The real corpora (Multi30k, SCAN, KFTT, Tatoeba) that some tests read; they skip where these are absent.
CORPORA = Path(os.environ.get("CORPORA_DIR", REPO.parent / "shared" / "corpora"))


def train_tiny(save_dir, *extra: str):
    """Run ``train.py --config configs/tiny.yaml`` in this process, logging under ``save_dir``; the run
    dir."""
    from train import main

    main([
        "--config", TINY_CONFIG, "--trainer.logger.init_args.save_dir", str(save_dir),
        "--trainer.default_root_dir", str(save_dir), *extra,
    ])
    versions = sorted((p for p in (save_dir / "tiny").iterdir()), key=lambda p: p.stat().st_mtime)
    return versions[-1]


def short_tsv_corpus(folder, **files: list[str]):
    """A tsv corpus folder of short word pairs (train, val, test), plus or instead ``files``: name → lines."""
    short = [f"w{i} w{i + 1}\tv{i} v{i + 1}" for i in range(20)]
    for name, lines in {"train": short, "val": short[:4], "test": short[4:8], **files}.items():
        (folder / f"{name}.tsv").parent.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


# English and Chinese as learners pair them (Tatoeba's cmn.txt style): full-width punctuation, no spaces.
CHINESE_PAIRS = [
    ("I like cats.", "我喜欢猫。"),
    ("I like dogs.", "我喜欢狗。"),
    ("He likes tea.", "他喜欢茶。"),
    ("She likes books.", "她喜欢书。"),
    ("We drink tea.", "我们喝茶。"),
    ("They read books.", "他们看书。"),
    ("I see a cat.", "我看见一只猫。"),
    ("He sees a dog.", "他看见一只狗。"),
    ("Is this your book?", "这是你的书吗？"),
    ("This is my cat.", "这是我的猫。"),
    ("Where is the dog?", "狗在哪里？"),
    ("The tea is hot.", "茶很热。"),
]


def chinese_tsv_corpus(folder, *, chinese_source: bool = False):
    """A tsv corpus folder of ``CHINESE_PAIRS`` (train, val and test alike): English to Chinese, or with
    ``chinese_source`` Chinese to English."""
    lines = [f"{zh}\t{en}" if chinese_source else f"{en}\t{zh}" for en, zh in CHINESE_PAIRS]
    return short_tsv_corpus(folder, train=lines * 4, val=lines[:6], test=lines[6:])


def train_chinese(save_dir, *extra: str, chinese_source: bool = False):
    """``train_tiny`` for one epoch on ``chinese_tsv_corpus`` (seconds): the run dir."""
    data = chinese_tsv_corpus(save_dir / "data", chinese_source=chinese_source)
    languages = ("zh", "en") if chinese_source else ("en", "zh")
    return train_tiny(
        save_dir / "runs", "--data.dataset", "tsv", "--data.path", str(data), "--data.tokenizer", "bpe",
        "--data.vocab_size", "120", "--data.source_lang", languages[0], "--data.target_lang", languages[1],
        "--trainer.max_epochs", "1", "--attention.every_n_epochs", "0", *extra,
    )


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """A finished two-epoch run of the tiny config (seconds on a CPU)."""
    return train_tiny(tmp_path_factory.mktemp("runs"))


def read_events(run_dir):
    """TensorBoard's own reader over every event file of a run directory."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    accumulator = EventAccumulator(str(run_dir), size_guidance={"images": 0, "scalars": 0, "tensors": 0})
    accumulator.Reload()
    return accumulator


def run_evaluate(capsys, *args):
    """``evaluate.py ARGS`` in this process: (exit code, stdout, stderr)."""
    import evaluate

    code = evaluate.main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def last_json(out):
    """The JSON object evaluate.py prints as its last line."""
    import json

    return json.loads(out.strip().splitlines()[-1])


def larger_tokenizer(tokenizer_json: str, extra: int = 50) -> str:
    """A word tokenizer (as JSON) of ``extra`` more words than ``tokenizer_json``'s, trained so that each of
    its words takes an id past the old vocabulary: the tokenizer of another, larger run."""
    from data.tokenizer import Tokenizer

    old = Tokenizer.from_json(tokenizer_json)
    words = old.tokens(range(len(SPECIALS.tokens), old.vocab_size))
    frequent = " ".join(f"extra{i}" for i in range(extra))
    return Tokenizer.train([frequent] * 3 + [" ".join(words)], kind="word").to_json()


# A three-pair English–Chinese gold set (1-based links, a possible link, one past its sentence's end).
GOLD = {
    "sentences": ["He sees a big dog . ||| 他 看见 一只 大 狗 。",
                  "I like teapots . ||| 我 喜欢 茶壶 。",
                  "Where is my book ? ||| 我的 书 在 哪里 ？"],
    "links": ["1-1 2-2 3-3 4-4 5-5 6-6", "1-1 2-2 3-3 4-4 3p2", "1-4 2-3 3-1 4-2 5-5 9-9"],
}


def bomb(path, *, inflated: int, name: str = "archive/data.pkl"):
    """A checkpoint-shaped zip of a few hundred KB whose entry ``name`` is deflated zeros declaring
    ``inflated`` bytes."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        with archive.open(name, "w", force_zip64=True) as entry:
            for _ in range(inflated // 2**20):
                entry.write(bytes(2**20))
        archive.writestr("archive/version", "3\n")
    return path
