"""Train the Transformer. With no options: the default model on the built-in toy translation data.

    python train.py                                   # toy data, default model
    python train.py --config configs/multi30k.yaml    # a real corpus
    python train.py --model.num_heads 8 --trainer.max_epochs 3
    python train.py --resume runs/toy/version_0       # continue a run from its newest checkpoint
    python train.py --help                            # every option
"""

from training.cli import main

if __name__ == "__main__":
    main()
