"""A folder written whole or not at all: staged beside its final name and renamed into place at the end, so
that an error or an interrupt (Ctrl-C) leaves nothing at that name, and a re-run is not blocked by half of
one."""

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A new hidden folder beside ``out`` to write into. On leaving without an error it takes ``out``'s name,
    replacing what was there (the caller decides whether it may: an old folder's contents are deleted); on an
    error or an interrupt it is deleted and ``out`` is left as it was."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    old = staging.with_name(staging.name + ".old")
    try:
        mask = os.umask(0)
        os.umask(mask)
        staging.chmod(0o777 & ~mask)  # mkdtemp's folder is private; the result should be as mkdir makes it
        yield staging
        if out.exists():
            os.replace(out, old)
        os.replace(staging, out)
    except BaseException:
        if old.exists() and not out.exists():  # interrupted between the two renames: the old folder back
            os.replace(old, out)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
