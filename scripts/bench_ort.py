#!/usr/bin/env python3
"""onnxruntime beside tract in the embedding benchmark (functions/embed/benches/embed.rs),
which starts this script and sends it work between its own rounds, so that both engines meet
the same noise. One JSON request per line on stdin, one JSON answer per line on stdout:

  {"op": "query", "ids": [...], "runs": N}
      N embeddings of one sequence on model.onnx (the file tract runs), one thread:
      {"ns": [...]} per run (the word embeddings' rows taken from word_embeddings.f32, the
      forward pass, mean pooling, normalisation; tokenising is not counted here, where
      tract's figure counts it)
  {"op": "batch", "chunks": [[...], ...], "batch": B, "threads": T}
      every chunk embedded once, sorted by length and run B at a time, padded, with an
      attention mask (model-batched.onnx), on T threads: {"seconds": s}

Both sessions have onnxruntime's graph optimisations all on (ORT_ENABLE_ALL): its own best.
Usage: bench_ort.py MODEL_DIR"""
import json
import sys
import time

import numpy as np
import onnxruntime as ort


def session(path, threads):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def main(model_dir):
    one = session(f"{model_dir}/model.onnx", 1)
    # The graph's input is the tokens' rows of the word embedding table (as tract is fed).
    table = np.fromfile(f"{model_dir}/word_embeddings.f32", dtype="<f4").reshape(-1, 384)
    batched = {}
    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "query":
            ids = np.array(req["ids"], dtype=np.int64)
            samples = []
            for _ in range(req["runs"]):
                t = time.perf_counter_ns()
                h = one.run(None, {"inputs_embeds": table[ids][None]})[0][0]
                v = h.mean(0)
                v = v / np.linalg.norm(v)
                samples.append(time.perf_counter_ns() - t)
            out = {"ns": samples}
        elif req["op"] == "batch":
            threads = req["threads"]
            if threads not in batched:
                batched[threads] = session(f"{model_dir}/model-batched.onnx", threads)
            s = batched[threads]
            chunks = sorted(req["chunks"], key=len)
            t = time.perf_counter()
            for i in range(0, len(chunks), req["batch"]):
                group = chunks[i : i + req["batch"]]
                width = max(len(c) for c in group)
                ids = np.zeros((len(group), width), dtype=np.int64)
                mask = np.zeros((len(group), width), dtype=np.int64)
                for row, c in enumerate(group):
                    ids[row, : len(c)] = c
                    mask[row, : len(c)] = 1
                h = s.run(None, {"inputs_embeds": table[ids], "attention_mask": mask})[0]
                m = mask[:, :, None].astype(np.float32)
                v = (h * m).sum(1) / m.sum(1)
                v = v / np.linalg.norm(v, axis=1, keepdims=True)
            out = {"seconds": time.perf_counter() - t}
        else:
            out = {"error": f"unknown op {req['op']}"}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
