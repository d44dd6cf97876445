"""``evaluate.py translate MODEL TEXT``: each sentence read as the run reads its data (the pieces it cannot
read named in one line), translated and printed one per line, and with --attention-out its maps drawn
(``viz/export.py``): one PNG per layer and head of each kind, and an HTML head view.
"""

import argparse
from pathlib import Path

from commands.shared import (
    checkpoint_of,
    decoding,
    decoding_parent,
    device_parent,
    load_model,
    model_parent,
    say,
)
from evaluation.inputs import (
    check_folder,
    check_sentence_folders,
    check_sentences_fit,
    read_sentences,
    resolve_device,
)
from evaluation.translate import translate_hypotheses, unknown_pieces_line


def add_to(subparsers) -> None:
    command = subparsers.add_parser(
        "translate", parents=[model_parent(), decoding_parent(), device_parent()],
        help="translate sentences, and draw their attention", description=__doc__,
    )
    command.add_argument("text", metavar="TEXT", help="the sentence, or '-': one sentence per line on stdin")
    command.add_argument("--attention-out", metavar="DIR",
                         help="write attention PNGs and an HTML head view of each sentence into "
                              "DIR/sentence_K")
    command.add_argument("--overwrite", action="store_true", help="replace sentence folders drawn before")
    command.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    checkpoint = checkpoint_of(args)
    out = Path(args.attention_out) if args.attention_out else None
    if out is not None:
        check_folder(out, "--attention-out", out)
    device = resolve_device(args.device)
    sentences = read_sentences(args.text)
    loaded = load_model(args, checkpoint, device)
    dm, model = loaded.datamodule, loaded.module.model
    sentences = [dm.read_text(sentence) for sentence in sentences]
    check_sentences_fit(sentences, dm.src_tokenizer, model.config.max_len, from_stdin=args.text == "-")
    if out is not None:  # before translating: nothing printed, then refused
        check_sentence_folders(out, len(sentences), args.overwrite)
    if (unknown := unknown_pieces_line(dm, sentences)) is not None:
        say(unknown)
    hypotheses = translate_hypotheses(model, dm.src_tokenizer, dm.tgt_tokenizer, sentences,
                                      **decoding(args, loaded).options())
    for hypothesis in hypotheses:
        print(dm.tgt_tokenizer.decode(hypothesis.ids))
    if out is not None:
        from viz.export import export_sentences  # matplotlib only when needed

        written = export_sentences(
            model, dm.src_tokenizer, dm.tgt_tokenizer, sentences, hypotheses, out, overwrite=args.overwrite
        )
        for folder, files in written.items():  # all written, or none: a failed write leaves nothing
            say(f"wrote {len(files)} files to {folder}")
    return 0
