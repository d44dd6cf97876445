"""Lightning glue: the training system, its callbacks and the command line of train.py."""
