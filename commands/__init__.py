"""evaluate.py's subcommands, one module each: its options (``add_to``, from the parents in ``shared``) beside
its runner. A runner reads the parsed options, prints, shows progress and draws; what it computes comes from
evaluation/ and export/, which take plain values."""
