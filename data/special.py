"""The special tokens: one object shared by data, model, loss and decoding."""

from dataclasses import dataclass


@dataclass(frozen=True)
class SpecialTokens:
    """Strings and ids of the special tokens.

    Every tokenizer of the project puts them first, in this order.
    """

    pad: str = "<pad>"
    bos: str = "<s>"
    eos: str = "</s>"
    unk: str = "<unk>"
    pad_id: int = 0
    bos_id: int = 1
    eos_id: int = 2
    unk_id: int = 3

    @property
    def ids(self) -> dict[str, int]:
        """Pad, BOS and EOS by name, the ids that frame a sentence, as ``collate`` and a model's config take
        them: ``TransformerConfig(..., **SPECIALS.ids)``."""
        return {"pad_id": self.pad_id, "bos_id": self.bos_id, "eos_id": self.eos_id}

    @property
    def tokens(self) -> list[str]:
        """The special token strings in id order."""
        return [self.pad, self.bos, self.eos, self.unk]


SPECIALS = SpecialTokens()
