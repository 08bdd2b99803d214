#!/usr/bin/env python3
"""onnxruntime baseline for the embedding benchmark: the same ONNX file, the same inputs
(12, 64 and 128 tokens, built as in functions/embed/benches/embed.rs), one thread.
Prints one JSON object: {"12": median_ns, ...}."""
import json
import statistics
import sys
import time

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

WORDS = ("the bank sends international payments over the swift network and a transfer costs "
         "a flat fee plus any fees charged by correspondent banks along the way").split(" ")


def text_of(tok, tokens):
    text, i = "", 0
    while True:
        w = WORDS[i % len(WORDS)]
        candidate = w if not text else f"{text} {w}"
        if len(tok.encode(candidate).ids) > tokens:
            return text
        text, i = candidate, i + 1


def main(model_dir):
    tok = Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.no_padding()
    tok.no_truncation()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    session = ort.InferenceSession(f"{model_dir}/model.onnx", opts, providers=["CPUExecutionProvider"])
    out = {}
    for tokens in (12, 64, 128):
        ids = np.array([tok.encode(text_of(tok, tokens)).ids], dtype=np.int64)

        def once():
            h = session.run(None, {"input_ids": ids})[0][0]
            v = h.mean(0)
            return v / np.linalg.norm(v)

        for _ in range(20):
            once()
        samples = []
        deadline = time.perf_counter() + 5.0
        while time.perf_counter() < deadline or len(samples) < 50:
            t = time.perf_counter_ns()
            once()
            samples.append(time.perf_counter_ns() - t)
        out[str(tokens)] = statistics.median(samples)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
