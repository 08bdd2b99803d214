#!/usr/bin/env python3
"""Builds the cache guard's lexicon from WordNet 3.0 (Debian's wordnet-base).

Usage: lexicon.py WORDNET_DIR OUT [MIN_SHARE]

WordNet's dictionary files are 28 MB; the guard needs only which words can stand for one
another, which are opposites, and which words are joined phrases. The table written here is
what `crates/core/src/cache/lexicon.rs` reads, one relation per line:

    s word word ...   the members of one synset (numbered from 0 in file order) that are
                      common in that sense (below)
    > i j             verb synset j is a way to do i ("send" / "transfer": a direct
                      hypernym), or adjective j is similar to i
    ! word word       an antonym pair, in any of the two words' senses
    + word word       a derivational link (pay / payment), in senses as for `s`
    x form lemma      an irregular form (WordNet's *.exc: "paid" -> "pay")

Multi-word lemmas keep WordNet's underscores ("call_off"). A word is a member of a synset
here only when that sense is common enough for the word: at least MIN_SHARE of the word's
tagged uses in WordNet's sense-tagged corpus (cntlist.rev), or its first sense when the word
was never tagged. This is the sense decision: "lift" and "raise" share a sense (elevate)
that is only a fifth of "raise"'s uses, so "lift my limit" (remove it) does not stand for
"raise my limit"; "miss" / "lose" and "charge" / "bill" are cut the same way. Antonyms veto
in every sense, however rare.
"""
import collections
import os
import re
import sys

MIN_SHARE = 0.25
POS = {"n": "noun", "v": "verb", "a": "adj", "r": "adv"}
POS_NUMBER = {"1": "n", "2": "v", "3": "a", "4": "r", "5": "a"}


def word(w):
    # "big(p)" -> "big": adjective position markers are not part of the word.
    return re.sub(r"\(.*\)$", "", w).lower()


def read_senses(src):
    """(lemma, pos) -> its synsets' offsets ("v" + offset) in WordNet's order (most
    frequent first)."""
    senses = {}
    for pos, name in POS.items():
        for line in open(os.path.join(src, "index." + name)):
            if line.startswith(" "):
                continue
            f = line.split()
            synsets, pointers = int(f[2]), int(f[3])
            offsets = f[4 + pointers + 2:4 + pointers + 2 + synsets]
            senses[(f[0], pos)] = [pos + o for o in offsets]
    return senses


def read_synsets(src):
    """Every synset: (offset, members, pointers, gloss); a pointer is (symbol, target
    offset, source member number, target member number), 0 for the whole synset."""
    for pos, name in POS.items():
        for line in open(os.path.join(src, "data." + name)):
            if line.startswith(" "):
                continue
            head, gloss = line.split("|", 1)
            f = head.split()
            members = [word(f[4 + 2 * i]) for i in range(int(f[3], 16))]
            at = 4 + 2 * len(members)
            pointers = []
            for j in range(int(f[at])):
                symbol, target, target_pos, st = f[at + 1 + 4 * j:at + 5 + 4 * j]
                target_pos = "a" if target_pos == "s" else target_pos
                pointers.append((symbol, target_pos + target, int(st[:2], 16), int(st[2:], 16)))
            yield pos + f[0], members, pointers, gloss.strip()


def main(src, out):
    counts = collections.defaultdict(dict)
    for line in open(os.path.join(src, "cntlist.rev")):
        key, number, count = line.split()
        lemma, rest = key.split("%")
        counts[(lemma, POS_NUMBER[rest[0]])][int(number) - 1] = int(count)

    senses = read_senses(src)

    def common(lemma, pos, offset):
        ranked = senses.get((lemma, pos), [])
        if offset not in ranked:
            return False
        rank = ranked.index(offset)
        tagged = counts.get((lemma, pos), {})
        total = sum(tagged.values())
        if total == 0:
            return rank == 0
        return tagged.get(rank, 0) / total >= MIN_SHARE

    synsets, antonyms, derived, links, words_of = {}, set(), set(), [], {}
    for offset, members, pointers, _gloss in read_synsets(src):
        pos = offset[0]
        words_of[offset] = members  # a pointer's target word is resolved below
        kept = sorted({m for m in members if common(m, pos, offset)})
        if kept:
            synsets[offset] = kept
        for symbol, target, source, dest in pointers:
            if source == 0 and (symbol == "@" and pos == "v" or symbol == "&"):
                # A verb's manner ("send" is a way to "transfer") and an adjective's
                # near-synonym ("safe" / "secure"). Not nouns: a kind of a thing is
                # another question ("husband" / "partner", "debit card" / "card").
                links.append((target, offset))
            if symbol not in ("!", "+") or source == 0:
                continue  # antonymy and derivation are lexical: between two words
            a = members[source - 1]
            pair = (a, target, dest)
            if symbol == "!":
                antonyms.add(pair)
            elif common(a, pos, offset):
                derived.add(pair)

    def pairs(links, sense_filter):
        out = set()
        for a, target, dest in links:
            b = words_of[target][dest - 1]
            if a != b and sense_filter(b, target):
                out.add(tuple(sorted((a, b))))
        return sorted(out)

    exceptions = set()
    for name in ("noun", "verb", "adj", "adv"):
        for line in open(os.path.join(src, name + ".exc")):
            form, *lemmas = line.split()
            for lemma in lemmas:
                if lemma != form:
                    exceptions.add((form, lemma))

    tmp = out + ".part"
    with open(tmp, "w") as f:
        f.write("# Sluice cache guard lexicon v1, built by scripts/lexicon.py from WordNet 3.0\n")
        f.write("# WordNet 3.0 Copyright 2006 by Princeton University. All rights reserved.\n")
        f.write("# Licence: https://wordnet.princeton.edu/license-and-commercial-use\n")
        number = {}
        for offset, members in sorted(synsets.items()):
            number[offset] = len(number)
            f.write("s " + " ".join(members) + "\n")
        for general, specific in sorted(set(links)):
            if general in number and specific in number:
                f.write(f"> {number[general]} {number[specific]}\n")
        for a, b in pairs(antonyms, lambda b, t: True):
            f.write(f"! {a} {b}\n")
        for a, b in pairs(derived, lambda b, t: common(b, t[0], t)):
            f.write(f"+ {a} {b}\n")
        for form, lemma in sorted(exceptions):
            f.write(f"x {form} {lemma}\n")
    os.replace(tmp, out)


if __name__ == "__main__":
    if len(sys.argv) > 3:  # for measuring the cut-off: lexicon.py SRC OUT MIN_SHARE
        MIN_SHARE = float(sys.argv[3])
    main(sys.argv[1], sys.argv[2])
