"""``evaluate.py export-ctranslate2 CKPT DIR``: the checkpoint's model (averaged, if asked) as a CTranslate2
model folder (docs/ctranslate2.md); ``evaluate.py export-hf CKPT DIR``: as a transformers MarianMTModel folder
with its tokenizer (docs/huggingface.md). Both are written from the CPU.
"""

import argparse
from pathlib import Path

import torch

from commands.shared import checkpoint_of, load_model, model_parent, say, whole
from evaluation.inputs import check_new
from export.ctranslate2 import export as export_ctranslate2
from export.ctranslate2 import import_ctranslate2
from export.huggingface import check_out_folder, import_transformers
from export.huggingface import export as export_hf
from model.decoding import MAX_BEAM_SIZE


def add_to(subparsers) -> None:
    ct2 = subparsers.add_parser(
        "export-ctranslate2", parents=[model_parent(hf=False)], description=__doc__,
        help="write a CTranslate2 model folder (pip install ctranslate2)",
    )
    ct2.add_argument("folder", metavar="DIR", help="the model folder to write")
    ct2.add_argument("--compute-type", choices=("float32", "int8"), default="float32",
                     help="CTranslate2 weights: float32 (default) or int8")
    ct2.add_argument("--overwrite", action="store_true",
                     help="replace CTranslate2's files in an existing DIR (other files stay)")
    ct2.set_defaults(run=run_ctranslate2)

    hf = subparsers.add_parser(
        "export-hf", parents=[model_parent(hf=False)], description=__doc__,
        help="write a transformers MarianMTModel folder with its tokenizer (pip install -e .[hf])",
    )
    hf.add_argument("folder", metavar="DIR",
                    help="the model folder to write (post-LN models with sinusoidal positions)")
    hf.add_argument("--beam-size", type=whole(1, MAX_BEAM_SIZE), default=1,
                    help="the beams its generate() decodes with (default: 1, greedy), with length_penalty 0, "
                         "where transformers' rule (length ** penalty) and GNMT's agree")
    hf.add_argument("--max-len", type=whole(1), default=None,
                    help="most tokens its generate() produces (default: twice the source length + 10, as "
                         "evaluate.py decodes)")
    hf.add_argument("--overwrite", action="store_true",
                    help="replace the whole folder of an earlier export; none of its files stay")
    hf.set_defaults(run=run_hf)


def run_ctranslate2(args: argparse.Namespace) -> int:
    import_ctranslate2()  # before anything is loaded
    checkpoint = checkpoint_of(args)
    check_new(Path(args.folder), args.overwrite)
    loaded = load_model(args, checkpoint, torch.device("cpu"))
    dm = loaded.datamodule
    written = export_ctranslate2(loaded.module.model, dm.src_tokenizer, dm.tgt_tokenizer, args.folder,
                                 quantization=args.compute_type, overwrite=args.overwrite)
    say(f"wrote a CTranslate2 model to {written}")
    return 0


def run_hf(args: argparse.Namespace) -> int:
    import_transformers()  # before anything is loaded
    checkpoint = checkpoint_of(args)
    check_new(Path(args.folder), args.overwrite)
    check_out_folder(args.folder, overwrite=args.overwrite)  # before the checkpoint loads
    loaded = load_model(args, checkpoint, torch.device("cpu"))
    dm = loaded.datamodule
    written = export_hf(loaded.module.model, dm.src_tokenizer, dm.tgt_tokenizer, args.folder,
                        overwrite=args.overwrite, num_beams=args.beam_size, max_len=args.max_len)
    say(f"wrote a transformers model to {written}")
    return 0
