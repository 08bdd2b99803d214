#!/usr/bin/env python3
"""onnxruntime beside tract in the embedding benchmark (crates/embed/benches/embed.rs),
which starts this script and sends it work between its own rounds, so that both engines meet
the same noise. One JSON request per line on stdin, one JSON answer per line on stdout:

  {"op": "query", "ids": [...], "runs": N}
      N embeddings of one sequence on one thread, on onnxruntime's faster form of the encoder
      (query_graph: the same weights as the model.onnx tract runs):
      {"ns": [...]} per run (the word embeddings' rows taken from word_embeddings.f32, the
      forward pass, mean pooling, normalisation; tokenising is not counted here, where
      tract's figure counts it)
  {"op": "batch", "chunks": [[...], ...], "batch": B, "threads": T}
      every chunk embedded once, sorted by length and run B at a time, padded, with an
      attention mask (model-batched.onnx), on T threads: {"seconds": s}

Both sessions have onnxruntime's graph optimisations all on (ORT_ENABLE_ALL): its own best.
Usage: bench_ort.py MODEL_DIR

       bench_ort.py --profile MODEL_DIR
           onnxruntime's side of crates/embed/examples/profile.rs: for a query of 12, 64
           and 128 tokens (the same text), p50 of the whole run and the time per operator
           type per run from onnxruntime's own profiler (its nodes after its fusions).

       bench_ort.py --matmul THREADS
           onnxruntime's side of crates/embed/examples/matmul.rs: each of the encoder's
           dense projections alone (x[T,K]·W[K,M], W a constant, the example's values), p50
           per length on THREADS threads."""
import json
import os
import sys
import time

import numpy as np
import onnxruntime as ort


def session(path, threads, profile_prefix=None):
    """onnxruntime at its best on `threads` threads; with `profile_prefix`, its own profiler on
    (per-node times in the file `end_profiling()` names)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def query_graph(model_dir):
    """The graph a query runs on here: the encoder with its attention written out
    (model-unfused.onnx, from `scripts/setup.sh model-batched`), which onnxruntime runs faster
    at short lengths than model.onnx's MultiHeadAttention nodes (2.7 against 3.2 ms at 12
    tokens, even at 64 and 128); model.onnx where it is missing."""
    unfused = f"{model_dir}/model-unfused.onnx"
    return unfused if os.path.exists(unfused) else f"{model_dir}/model.onnx"


def main(model_dir):
    one = session(query_graph(model_dir), 1)
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


WORDS = ("the bank sends international payments over the swift network and a transfer costs a "
         "flat fee plus any fees charged by correspondent banks along the way").split()


def profile(model_dir, runs=200):
    import collections
    import tempfile

    import tokenizers

    tok = tokenizers.Tokenizer.from_file(f"{model_dir}/tokenizer.json")
    tok.no_padding()
    tok.no_truncation()
    table = np.fromfile(f"{model_dir}/word_embeddings.f32", dtype="<f4").reshape(-1, 384)
    plain = session(query_graph(model_dir), 1)
    for tokens in (12, 64, 128):
        text = " ".join((WORDS * 20)[: tokens - 2])
        ids = tok.encode(text).ids[:tokens]
        x = table[ids][None]
        times = []
        for _ in range(runs):
            t = time.perf_counter()
            plain.run(None, {"inputs_embeds": x})
            times.append((time.perf_counter() - t) * 1e3)
        s = session(query_graph(model_dir), 1, os.path.join(tempfile.mkdtemp(), "ort"))
        for _ in range(runs):
            s.run(None, {"inputs_embeds": x})
        by_op = collections.Counter()
        for event in json.load(open(s.end_profiling())):
            if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
                by_op[event["args"]["op_name"]] += event["dur"] / 1e3 / runs
        print(f"{len(ids)} tokens: onnxruntime p50 {np.median(times):.2f} ms")
        total = sum(by_op.values())
        for op, ms in by_op.most_common():
            print(f"  {ms:>7.3f} ms {ms / total * 100:>5.1f} %  {op}")


def matmul(threads, lengths=(12, 24, 64, 128)):
    import tempfile

    import onnx
    from onnx import TensorProto, helper, numpy_helper

    for k, m in ((384, 384), (384, 1536), (1536, 384)):
        w = ((np.arange(k * m) * 7919 % 1000) / 1000.0 - 0.5).astype(np.float32).reshape(k, m)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["y"])], "projection",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", k])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", m])],
            [numpy_helper.from_array(w, "w")])
        path = os.path.join(tempfile.mkdtemp(), "projection.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
        s = session(path, threads)
        for t in lengths:
            x = ((np.arange(t * k) * 31 % 97) / 97.0 - 0.5).astype(np.float32).reshape(t, k)
            reps = max(5, min(500, 400_000_000 // (t * k * m)))
            times = []
            for _ in range(41):
                start = time.perf_counter()
                for _ in range(reps):
                    s.run(None, {"x": x})
                times.append((time.perf_counter() - start) / reps * 1e6)
            print(f"K {k:4} M {m:4}, {t:3} tokens: onnxruntime ({threads} thread(s)) p50 "
                  f"{np.median(times):7.1f} µs")


if __name__ == "__main__":
    if sys.argv[1] == "--profile":
        profile(sys.argv[2])
    elif sys.argv[1] == "--matmul":
        matmul(int(sys.argv[2]))
    else:
        main(sys.argv[1])
