"""A run folder that the ATTENTION tab opens, written for a model trained elsewhere (``evaluate.py make-run
NAME DIR --tsv PAIRS``): one validation over the given pairs, logged by the callback that logs a
training run's validations, and a checkpoint of the usual kind.

    DIR/events.out.tfevents.*      what ``viz.logger.AttentionLogger`` logs at a validation (every head
                                   of the probe sentences, every explanation method's map and the logit
                                   lens, the head statistics) and the module's val/loss, val/bleu, at step 0
    DIR/checkpoints/last.ckpt      settings, weights and tokenizers (an imported SentencePiece tokenizer as
                                   ``data.sentencepiece_tokenizer``'s JSON), as ``training.checkpoints.
                                   load_run`` reads them: the tab translates typed sentences with it
    DIR/data/{train,val,test}.tsv  the pairs, as the run's ``tsv`` corpus: all three files hold them (the
                                   model was not trained on them; a ``tsv`` corpus has three files)
    DIR/data/gold.{src-tgt,links}  with a gold set: its pairs and links (0-based, in the model's direction),
                                   the run's gold set: the probes are its first pairs, read word by word,
                                   and every explanation method's AER on its words is logged, as a training
                                   run on KFTT logs it

Nothing here knows where the model came from: the caller gives a ``LoadedRun`` (``evaluation.loading.
imported_run``).
"""

import warnings
from pathlib import Path

import torch
from lightning.pytorch import Trainer
from lightning.pytorch.loggers import TensorBoardLogger

from data.datamodule import TranslationDataModule
from data.folders import staged_folder
from data.gold import GoldFiles, GoldSet, format_links
from data.pairs import Pair
from training.checkpoints import CHECKPOINT_FOLDER, LoadedRun
from viz.logger import AttentionLogger

PROBES = 4  # probe sentences shown in the tab, as a training run's default
EXPLAINED = 50  # gold pairs whose explanations are scored, as a training run's default
MAX_BYTES = 20_000_000  # the tab's data of the probes: one step only, so more than a training run's 1 MB


def check_run_folder(folder: Path) -> None:
    """Raises ``ValueError`` if ``folder`` is a file, or a folder that holds anything: a run is written into
    a new folder, never over another."""
    if folder.is_file():
        raise ValueError("is a file, not a folder")
    if folder.is_dir() and any(folder.iterdir()):
        raise ValueError("is not empty; a run is written into a new folder")


def write_gold(gold: GoldSet, data: Path) -> GoldFiles:
    """The gold set as the data module's files in ``data`` (sentences ``source ||| target``, links 0-based,
    ``ipj`` for possible ones); the data module's ``gold`` option for them."""
    sentences, links = data / "gold.src-tgt", data / "gold.links"
    sentences.write_text("".join(f"{p.source} ||| {p.target}\n" for p in gold.pairs), encoding="utf-8")
    possible = [" ".join(f"{s}p{t}" for s, t in sorted(p.possible or ())) for p in gold.pairs]
    lines = [" ".join(filter(None, (format_links(p.alignment or ()), more)))
             for p, more in zip(gold.pairs, possible)]
    links.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return GoldFiles(str(sentences.resolve()), str(links.resolve()), zero_based=True, direction="forward")


def write_run(
    run: LoadedRun, pairs: list[Pair], folder: Path, *, gold: GoldSet | None = None, probes: int = PROBES,
    explanation_sentences: int = EXPLAINED, device: torch.device | None = None, quiet: bool = False,
) -> Path:
    """Validate ``run``'s model on ``pairs`` (source and reference) with the attention logging of training, on
    ``device`` (default: the CPU), and write the run into ``folder`` (``check_run_folder``); the checkpoint's
    path. The first ``probes`` pairs are the tab's sentences; every pair counts in the head statistics.
    ``gold`` (in the model's direction; ``pairs`` are then its pairs): the run's gold set, the probes its
    first pairs and the explanation methods scored on the words of its first ``explanation_sentences``.

    The run is written into a hidden folder beside ``folder`` that takes its name at the end: an error or an
    interrupt (Ctrl-C) leaves nothing at ``folder``, and a second try is not blocked.

    Raises:
        ValueError: no pairs, or ``folder`` is not new (``check_run_folder``).
    """
    if not pairs:
        raise ValueError("no sentence pairs to validate on")
    folder = Path(folder)
    check_run_folder(folder)
    with staged_folder(folder) as staging:  # an interrupted run leaves nothing at ``folder``
        _validate_into(run, pairs, staging, folder, gold=gold, probes=probes,
                       explanation_sentences=explanation_sentences, device=device or torch.device("cpu"),
                       quiet=quiet)
    return folder / CHECKPOINT_FOLDER / "last.ckpt"


def _validate_into(run: LoadedRun, pairs: list[Pair], staging: Path, folder: Path, *, gold: GoldSet | None,
                   probes: int, explanation_sentences: int, device: torch.device, quiet: bool) -> None:
    """``write_run``'s work, written into ``staging``; the files the run records are named at ``folder``,
    where ``staging`` will be."""
    data = staging / "data"
    data.mkdir()
    lines = "".join(f"{pair.source}\t{pair.target}\n" for pair in pairs)
    for split in ("train", "val", "test"):
        (data / f"{split}.tsv").write_text(lines, encoding="utf-8")
    given = run.datamodule
    datamodule = TranslationDataModule(
        dataset="tsv", path=str(data.resolve()), source_lang=given.source_lang, target_lang=given.target_lang,
        num_workers=0, gold=write_gold(gold, data) if gold is not None else GoldFiles(),
    )
    datamodule.use_tokenizers(given.src_tokenizer, given.tgt_tokenizer)
    if gold is not None:  # the caller has said how it read the set: a second line would contradict it
        datamodule.use_gold(gold)
    logger = TensorBoardLogger(save_dir=str(staging.parent), name="", version=staging.name,
                               default_hp_metric=False)
    # The probes are the first pairs, however long: the caller chose them (training prefers short ones).
    callback = AttentionLogger(num_sentences=probes, num_images=min(2, probes), stats_sentences=len(pairs),
                               max_tokens=run.module.model.config.max_len, max_bytes=MAX_BYTES,
                               explanation_sentences=explanation_sentences)
    on_cpu = device.type == "cpu"
    trainer = Trainer(logger=logger, callbacks=[callback], accelerator=device.type,
                      devices=1 if on_cpu else [device.index or 0],
                      enable_checkpointing=False, enable_model_summary=False, enable_progress_bar=not quiet,
                      log_every_n_steps=1)
    with warnings.catch_warnings():
        # One process logs everything here; Lightning's advice for several does not apply.
        warnings.filterwarnings("ignore", message=r".*sync_dist=True.*")
        warnings.filterwarnings("ignore", message=r".*does not have many workers.*")
        trainer.validate(run.module, datamodule=datamodule, verbose=not quiet)
    # The data's files as they will be named once the staging folder is renamed, in the checkpoint and in
    # hparams.yaml (Lightning writes that file once, at the validation's start: it is written again).
    def at_folder(value: str | None) -> str | None:
        return value and str(folder.resolve() / Path(value).relative_to(staging.resolve()))

    gold_files = datamodule.hparams["gold"]
    moved = {"path": at_folder(datamodule.hparams["path"]),
             "gold": gold_files | {name: at_folder(gold_files[name]) for name in ("sentences", "alignments")}}
    datamodule.hparams.update(moved)
    logger.hparams.update(moved)
    (staging / logger.NAME_HPARAMS_FILE).unlink(missing_ok=True)
    logger.save()
    # the data module's tokenizers with the weights
    trainer.save_checkpoint(staging / CHECKPOINT_FOLDER / "last.ckpt", weights_only=False)
