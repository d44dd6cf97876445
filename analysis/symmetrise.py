"""One word alignment from two directional ones: intersection, union and grow-diag-final-and.

A directional aligner links each target word to at most one source word (forward) or each source word to at
most one target word (reverse). Both come in as sets of ``(source word, target word)`` links. The
intersection is precise, the union complete; grow-diag-final-and (Koehn et al. 2005, "Edinburgh System
Description for the 2005 IWSLT Speech Translation Evaluation") starts from the intersection and adds union
links next to it, then any remaining directional link between two words both still unaligned. It is written
here as fast_align's ``atools -c grow-diag-final-and -i forward -j reverse`` computes it.
"""

from collections.abc import Callable, Iterable

Link = tuple[int, int]

# The eight neighbours of a link: left, right, above, below and the diagonals ("diag").
_NEIGHBOURS = ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))


def intersection(forward: Iterable[Link], reverse: Iterable[Link]) -> set[Link]:
    return set(forward) & set(reverse)


def union(forward: Iterable[Link], reverse: Iterable[Link]) -> set[Link]:
    return set(forward) | set(reverse)


def grow_diag_final_and(forward: Iterable[Link], reverse: Iterable[Link]) -> set[Link]:
    """The intersection, grown as ``atools`` grows it.

    1. grow-diag: sweep the union's other links in (source, target) order, adding a link when one of its
       eight neighbours is already in and its source word or its target word (or both) is still unaligned;
       sweep again until a sweep adds nothing.
    2. final-and: then each forward link, then each reverse link, in (source, target) order, whose source
       and target words are both still unaligned.
    """
    forward, reverse = set(forward), set(reverse)
    links = forward & reverse
    aligned_source = {source for source, _ in links}
    aligned_target = {target for _, target in links}

    def add(link: Link) -> None:
        links.add(link)
        aligned_source.add(link[0])
        aligned_target.add(link[1])

    candidates = sorted((forward | reverse) - links)
    grew = True
    while grew:
        grew = False
        for source, target in candidates:
            if (source, target) in links or (source in aligned_source and target in aligned_target):
                continue
            if any((source + ds, target + dt) in links for ds, dt in _NEIGHBOURS):
                add((source, target))
                grew = True
    for source, target in [*sorted(forward), *sorted(reverse)]:
        if source not in aligned_source and target not in aligned_target:
            add((source, target))
    return links


# The symmetrisations by the names atools and the literature give them.
SYMMETRISATIONS: dict[str, Callable[[Iterable[Link], Iterable[Link]], set[Link]]] = {
    "intersection": intersection,
    "union": union,
    "grow-diag-final-and": grow_diag_final_and,
}
