"""The part of the Marian comparison that imports pymarian: run with the Python of Marian's virtual
environment (``bench/peers/marian_baseline.py`` creates it), never with the project's own.

    VENV/bin/python bench/peers/marian_venv.py translate MODEL VOCAB SOURCES HYPS --threads 1

``translate`` decodes ``SOURCES`` (raw text, one sentence a line) with ``pymarian.Translator`` (Marian's own
beam search, on the CPU) and writes one detokenized translation a line to ``HYPS``: Marian's built-in
SentencePiece both splits the input and joins the output. Training needs no code here: the ``pymarian``
command of the venv is Marian's trainer.
"""

import argparse
from pathlib import Path

# The decoding of marian-examples' transformer/run-me.sh (`marian-decoder -b 12 -n`: length-normalised
# scores), at this comparison's beam of 5.
DECODING = {"beam_size": 5, "normalize": 1.0, "mini_batch": 64, "maxi_batch": 100}


def translate(model: Path, vocab: Path, sources: Path, hyps: Path, threads: int) -> int:
    """Translate ``sources`` into ``hyps``; returns the number of sentences."""
    from pymarian import Translator

    translator = Translator(models=str(model), vocabs=[str(vocab), str(vocab)], cpu_threads=threads,
                            quiet="", **DECODING)  # "": a flag without a value  # fmt: skip
    lines = sources.read_text(encoding="utf-8").splitlines()
    outputs = translator.translate(lines)
    if len(outputs) != len(lines):
        raise RuntimeError(f"Marian translated {len(outputs)} of the {len(lines)} sentences of {sources}")
    hyps.write_text("".join(line.replace("\n", " ") + "\n" for line in outputs), encoding="utf-8")
    return len(outputs)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("translate", help="Marian's beam search of a file, detokenized")
    t.add_argument("model", type=Path)
    t.add_argument("vocab", type=Path)
    t.add_argument("sources", type=Path)
    t.add_argument("hyps", type=Path)
    t.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    print(f"translated {translate(args.model, args.vocab, args.sources, args.hyps, args.threads)} sentences")


if __name__ == "__main__":
    main()
