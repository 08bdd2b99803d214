#!/usr/bin/env python3
"""What the cache guard's labelled pairs say about deciding word senses from context, and how
far any word-level guard can get at a threshold. A measurement, not part of the service:
its figures are in docs/cache.md ("What limits recall").

Usage: guard_senses.py MODEL_DIR WORDNET_DIR
  (MODEL_DIR as `scripts/setup.sh model` writes it; WORDNET_DIR the unpacked wordnet-base's
  usr/share/wordnet; numpy, onnxruntime and tokenizers from the setup's venv)

It prints three tables, from the hand-written pairs (tests/fixtures/cache_pairs.jsonl) and
both halves of the templated ones (cache_guard_pairs.jsonl):

1. The ceiling: how many paraphrases (and non-paraphrases) have a cosine at or above each
   threshold. No guard can hit a paraphrase the threshold already lost.
2. Sense choice by gloss: for each pair whose questions differ by one word on each side and
   whose words share a WordNet synset, the rank of that shared synset among each word's
   senses when the senses' glosses are ordered by cosine to the whole question (embedding
   Lesk). A working choice ranks the shared sense first for paraphrases only.
3. Sense choice by contextual vectors: for the same pairs, the cosine of the two differing
   words' own vectors (the encoder's last hidden states over the word's tokens, before
   pooling), paraphrases beside sense traps.
"""
import collections
import json
import os
import pathlib
import re
import sys

import numpy as np
import onnxruntime as ort
import tokenizers

sys.path.insert(0, os.path.dirname(__file__))
from lexicon import POS, read_senses, read_synsets  # noqa: E402

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures"
THRESHOLDS = (0.95, 0.9, 0.85, 0.8)


class Encoder:
    """all-MiniLM-L6-v2 as Sluice runs it: model.onnx fed the tokens' rows of the table."""

    def __init__(self, model_dir):
        self.tok = tokenizers.Tokenizer.from_file(f"{model_dir}/tokenizer.json")
        self.tok.no_padding()
        self.tok.no_truncation()
        self.table = np.fromfile(f"{model_dir}/word_embeddings.f32", dtype="<f4").reshape(-1, 384)
        self.session = ort.InferenceSession(f"{model_dir}/model.onnx")
        self.memo = {}

    def states(self, text):
        if text not in self.memo:
            enc = self.tok.encode(text)
            ids = enc.ids[:256]
            h = self.session.run(None, {"inputs_embeds": self.table[ids][None]})[0][0]
            self.memo[text] = (h, enc.offsets[: len(ids)])
        return self.memo[text]

    def sentence(self, text):
        v = self.states(text)[0].mean(0)
        return v / np.linalg.norm(v)

    def word(self, text, w):
        """The mean of the last hidden states of `w`'s tokens in `text`."""
        h, offsets = self.states(text)
        start = re.search(r"\b" + re.escape(w) + r"\b", text.lower()).start()
        end = start + len(w)
        rows = [i for i, (s, e) in enumerate(offsets) if s >= start and e <= end and e > s]
        v = h[rows].mean(0)
        return v / np.linalg.norm(v)


def words(q):
    return re.findall(r"[a-z']+", q.lower())


def one_word_apart(p):
    a, b = collections.Counter(words(p["cached"])), collections.Counter(words(p["asked"]))
    da, db = list((a - b).elements()), list((b - a).elements())
    return (da[0], db[0]) if len(da) == 1 and len(db) == 1 else None


def main(model_dir, wordnet):
    enc = Encoder(model_dir)
    ranked = read_senses(wordnet)
    senses = collections.defaultdict(list)
    for (lemma, _pos), offsets in ranked.items():
        senses[lemma] += offsets
    glosses = {o: " ".join(m).replace("_", " ") + ": " + g for o, m, _p, g in read_synsets(wordnet)}
    exceptions = {}
    for name in POS.values():
        for line in open(os.path.join(wordnet, name + ".exc")):
            form, *lemmas = line.split()
            exceptions.setdefault(form, lemmas[0])

    def lemmas(w):
        out = [w, exceptions.get(w, w)]
        for suffix, repl in [("ies", "y"), ("es", ""), ("s", ""), ("ed", ""), ("ed", "e"),
                             ("ing", ""), ("ing", "e"), ("ly", "")]:
            if w.endswith(suffix):
                out.append(w[: -len(suffix)] + repl)
        return [x for x in dict.fromkeys(out) if x in senses]

    def synsets_of(w):
        return [o for x in lemmas(w) for o in senses[x]]

    sets = {"hand-written": [json.loads(l) for l in open(FIXTURES / "cache_pairs.jsonl")]}
    templated = [json.loads(l) for l in open(FIXTURES / "cache_guard_pairs.jsonl")]
    for split in ("held-out", "tune"):
        sets["templated " + split] = [p for p in templated if p["split"] == split]

    print("| set | pairs | " + " | ".join(f"≥ {t}" for t in THRESHOLDS) + " |")
    print("|---|---|" + "---|" * len(THRESHOLDS))
    for name, pairs in sets.items():
        for label, chosen in (("paraphrases", True), ("others", False)):
            cos = [float(enc.sentence(p["cached"]) @ enc.sentence(p["asked"]))
                   for p in pairs if (p["label"] == "paraphrase") == chosen]
            cells = " | ".join(str(sum(c >= t for c in cos)) for t in THRESHOLDS)
            print(f"| {name}, {label} | {len(cos)} | {cells} |")

    print("\n| pair | words | gloss rank of the shared sense | contextual cosine |")
    print("|---|---|---|---|")
    for pairs in sets.values():
        for p in pairs:
            apart = one_word_apart(p)
            if not apart:
                continue
            a, b = apart
            shared = set(synsets_of(a)) & set(synsets_of(b))
            if not shared:
                continue
            ranks = []
            for q, w in ((p["cached"], a), (p["asked"], b)):
                v = enc.sentence(q)
                order = sorted(synsets_of(w), key=lambda o: -float(v @ enc.sentence(glosses[o])))
                ranks.append(min(order.index(o) for o in shared) + 1)
            context = float(enc.word(p["cached"], a) @ enc.word(p["asked"], b))
            kind = "paraphrase" if p["label"] == "paraphrase" else "trap: " + p["label"]
            print(f"| {kind} | {a} / {b} | {ranks[0]} / {ranks[1]} | {context:.3f} |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
