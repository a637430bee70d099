#!/usr/bin/env python3
"""Writes a synthetic Megatron-LM legacy checkpoint of a tiny GPT, and the
tensors tripod must import from it.

  make_megatron_checkpoint.py OUT --tp 2 --pp 2 [--vpp 1] [--writer pickle|torch]
  make_megatron_checkpoint.py OUT --malicious

OUT/megatron/latest_checkpointed_iteration.txt, OUT/megatron/iter_0000007/
mp_rank_TT[_PPP]/model_optim_rng.pt as Megatron's legacy checkpointing
writes them (a dict with "args", "iteration", "model" or "model0.." per
virtual stage, "rng_state", ...), and OUT/expected.safetensors: every
parameter in tripod's layout (full tensors, fused QKV as [Q | K | V]).

--writer pickle (default, needs only Python) emits the pickle opcodes that
torch.save writes (protocol 2, persistent ids for storages) by hand, with
some tensors as bf16, one as a strided view and one carrying Python
attributes (_rebuild_from_type_v2); --writer torch uses torch.save
itself and exits 77 when PyTorch is not installed. The Megatron-side layout
(per-head [q, k, v] rows per TP rank, column- and row-parallel slices, local
layer numbers per pipeline stage) is written out here independently of
tripod's importer. --malicious writes a file whose pickle calls os.system.
"""
import argparse
import json
import os
import struct
import sys
import zipfile

L, C, HEADS, F, SEQ, VOCAB, DIVISIBLE = 4, 8, 2, 32, 16, 50, 8
HN = C // HEADS
ITERATION = 7


def value(seed, k, bf16):
    """Deterministic weights, exact in float32 (and in bfloat16 when asked)."""
    if bf16:
        return ((seed * 7 + k * 13) % 61 - 30) / 32.0
    return ((seed * 131 + k * 17) % 997 - 498) / 1024.0


class T:
    """A row-major float tensor: shape and flat list."""

    def __init__(self, shape, data, bf16=False):
        self.shape, self.data, self.bf16 = list(shape), list(data), bf16

    def rows(self, a, b):
        w = self.shape[1] if len(self.shape) == 2 else 1
        return T([b - a] + self.shape[1:], self.data[a * w:b * w], self.bf16)

    def cols(self, a, b):
        r, w = self.shape
        return T([r, b - a], [self.data[i * w + j] for i in range(r) for j in range(a, b)], self.bf16)


def tripod_params(tp):
    """name -> (full tensor in tripod's layout, sharding kind)."""
    padded = -(-VOCAB // (DIVISIBLE * tp)) * DIVISIBLE * tp  # Megatron pads to a multiple of divisible x TP
    shapes = [("embedding.word_embeddings.weight", [padded, C], "rows"),
              ("embedding.position_embeddings.weight", [SEQ, C], "none")]
    for i in range(L):
        p = "decoder.layers.%d." % i
        shapes += [(p + "input_layernorm.weight", [C], "norm"), (p + "input_layernorm.bias", [C], "norm"),
                   (p + "self_attention.linear_qkv.weight", [3 * C, C], "qkv"),
                   (p + "self_attention.linear_qkv.bias", [3 * C], "qkv"),
                   (p + "self_attention.linear_proj.weight", [C, C], "cols"),
                   (p + "self_attention.linear_proj.bias", [C], "none"),
                   (p + "pre_mlp_layernorm.weight", [C], "norm"), (p + "pre_mlp_layernorm.bias", [C], "norm"),
                   (p + "mlp.linear_fc1.weight", [F, C], "rows"), (p + "mlp.linear_fc1.bias", [F], "rows"),
                   (p + "mlp.linear_fc2.weight", [C, F], "cols"), (p + "mlp.linear_fc2.bias", [C], "none")]
    shapes += [("decoder.final_layernorm.weight", [C], "norm"), ("decoder.final_layernorm.bias", [C], "norm")]
    out = {}
    for seed, (name, shape, kind) in enumerate(shapes):
        n = 1
        for d in shape:
            n *= d
        bf16 = kind == "norm"
        out[name] = (T(shape, [value(seed + 1, k, bf16) for k in range(n)], bf16), kind)
    return out, padded


def megatron_qkv(t):
    """tripod [Q | K | V] (heads contiguous in each) -> Megatron's per-head [q_h, k_h, v_h]."""
    w = t.shape[1] if len(t.shape) == 2 else 1
    data = []
    for h in range(HEADS):
        for part in range(3):
            for j in range(HN):
                r = part * C + h * HN + j
                data += t.data[r * w:(r + 1) * w]
    return T(t.shape, data, t.bf16)


def shard(t, kind, rank, tp):
    if kind == "qkv":
        m = megatron_qkv(t)
        n = m.shape[0] // tp  # whole heads per rank: each head's q, k, v rows are contiguous
        return m.rows(rank * n, (rank + 1) * n)
    if kind == "rows":
        n = t.shape[0] // tp
        return t.rows(rank * n, (rank + 1) * n)
    if kind == "cols":
        n = t.shape[1] // tp
        return t.cols(rank * n, (rank + 1) * n)
    return t


def stage_state(params, tp_rank, tp, pp_rank, pp, v, vpp):
    """Megatron-core's state dict of one (tp, pp, virtual) model chunk: local layer numbers."""
    per_chunk = L // (pp * vpp)
    offset = v * (L // vpp) + pp_rank * per_chunk
    first, last = pp_rank == 0 and v == 0, pp_rank == pp - 1 and v == vpp - 1
    out = []
    for name, (t, kind) in params.items():
        if name.startswith("embedding."):
            if first:
                out.append((name, shard(t, kind, tp_rank, tp)))
        elif name.startswith("decoder.final_layernorm."):
            if last:
                out.append((name, shard(t, kind, tp_rank, tp)))
        else:
            i = int(name.split(".")[2])
            if offset <= i < offset + per_chunk:
                local = "decoder.layers.%d.%s" % (i - offset, name.split(".", 3)[3])
                out.append((local, shard(t, kind, tp_rank, tp)))
                if name.endswith("linear_proj.weight"):
                    out.append((local.replace(".weight", "._extra_state"), None))
    if last and pp > 1:  # the last stage's copy of the tied word embeddings
        w, kind = params["embedding.word_embeddings.weight"]
        out.append(("output_layer.weight", shard(w, kind, tp_rank, tp)))
    return out


def args_dict(tp, pp, vpp, padded):
    return {"num_layers": L, "hidden_size": C, "num_attention_heads": HEADS, "ffn_hidden_size": F,
            "seq_length": SEQ, "max_position_embeddings": SEQ, "padded_vocab_size": padded, "vocab_size": VOCAB,
            "make_vocab_size_divisible_by": DIVISIBLE, "tensor_model_parallel_size": tp,
            "pipeline_model_parallel_size": pp, "virtual_pipeline_model_parallel_size": vpp if vpp > 1 else None,
            "norm_epsilon": 1e-5, "init_method_std": 0.02, "normalization": "LayerNorm",
            "position_embedding_type": "learned_absolute", "swiglu": False, "add_bias_linear": True,
            "untie_embeddings_and_output_weights": False, "group_query_attention": False, "num_query_groups": None,
            "kv_channels": HN, "bias_gelu_fusion": True, "consumed_train_samples": 112, "lr": 3.0e-4,
            "data_path": ["1.0", "corpus_text_document"], "micro_batch_size": 2}


# ---- torch.save by hand: protocol 2 opcodes, stored zip entries ----

class Pickler:
    def __init__(self):
        self.out = bytearray(b"\x80\x02")
        self.storages = []  # (key, bytes)

    def glob(self, module, name):
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def obj(self, v):
        o = self.out
        if v is None:
            o += b"N"
        elif v is True or v is False:
            o += b"\x88" if v else b"\x89"
        elif isinstance(v, int):
            o += b"J" + struct.pack("<i", v)
        elif isinstance(v, float):
            o += b"G" + struct.pack(">d", v)
        elif isinstance(v, str):
            b = v.encode()
            o += b"X" + struct.pack("<I", len(b)) + b
        elif isinstance(v, bytes):  # protocol 2: _codecs.encode(latin-1 text, 'latin1')
            self.glob("_codecs", "encode")
            self.obj((v.decode("latin-1"), "latin1"))
            o += b"R"
        elif isinstance(v, tuple):
            o += b"("
            for x in v:
                self.obj(x)
            o += b"t"
        elif isinstance(v, list):
            o += b"]("
            for x in v:
                self.obj(x)
            o += b"e"
        elif isinstance(v, dict):
            o += b"}("
            for k, x in v.items():
                self.obj(k)
                self.obj(x)
            o += b"u"
        elif isinstance(v, T):
            self.tensor(v)
        elif callable(v):
            v(self)
        else:
            raise TypeError(type(v))

    def ordered(self, items):
        self.glob("collections", "OrderedDict")
        self.out += b")R("
        for k, x in items:
            self.obj(k)
            self.obj(x)
        self.out += b"u"

    def tensor_with_attributes(self, t):
        """A tensor carrying Python attributes (as Megatron's main params): _rebuild_from_type_v2."""
        self.glob("torch._tensor", "_rebuild_from_type_v2")
        self.out += b"("
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.glob("torch", "Tensor")
        mark = len(self.out)
        self.tensor(t)
        # self.tensor wrote GLOBAL _rebuild_tensor_v2 ( args t R: keep only "( args t" as the args tuple.
        head = b"ctorch._utils\n_rebuild_tensor_v2\n"
        assert self.out[mark:mark + len(head)] == head and self.out[-1:] == b"R"
        del self.out[mark:mark + len(head)]
        del self.out[-1:]
        self.obj({"tensor_model_parallel": False, "partition_dim": -1})
        self.out += b"tR"

    def tensor(self, t, transposed_view=False):
        key = str(len(self.storages))
        if t.bf16:
            raw = b"".join(struct.pack("<f", x)[2:] for x in t.data)  # exact: the low half is zero
        else:
            raw = struct.pack("<%df" % len(t.data), *t.data)
        shape, stride = t.shape, ([t.shape[1], 1] if len(t.shape) == 2 else [1])
        if transposed_view and len(t.shape) == 2:
            # Store the transpose and describe t as a strided view of it.
            r, c = t.shape
            raw = struct.pack("<%df" % (r * c), *[t.data[i * c + j] for j in range(c) for i in range(r)])
            stride = [1, r]
        self.storages.append((key, raw))
        self.glob("torch._utils", "_rebuild_tensor_v2")
        self.out += b"("
        self.out += b"("  # persistent id tuple
        self.obj("storage")
        self.glob("torch", "BFloat16Storage" if t.bf16 else "FloatStorage")
        self.obj(key)
        self.obj("cpu")
        self.obj(len(raw) // (2 if t.bf16 else 4))
        self.out += b"tQ"
        self.obj(0)
        self.obj(tuple(shape))
        self.obj(tuple(stride))
        self.obj(False)
        self.ordered([])
        self.out += b"tR"


def namespace(d):
    def write(p):
        p.glob("argparse", "Namespace")
        p.out += b")\x81"
        p.obj(dict(d))
        p.out += b"b"
    return write


def inert_extras(p):
    """What real files also hold: a dtype, a Megatron enum, numpy's RNG state array."""
    p.out += b"}("
    p.obj("params_dtype")
    p.glob("torch", "float32")
    p.obj("model_type")
    p.glob("megatron.core.enums", "ModelType")
    p.obj((1,))
    p.out += b"R"
    p.obj("np_rng_state")
    p.glob("numpy.core.multiarray", "_reconstruct")
    p.out += b"("
    p.glob("numpy", "ndarray")
    p.obj((0,))
    p.obj(b"b")
    p.out += b"tR"
    p.obj((1, (624,), None, False, b"\x00" * 16))
    p.out += b"b"
    p.out += b"u"


def write_pt(path, root_writer):
    p = Pickler()
    root_writer(p)
    p.out += b"."
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
        z.writestr("model_optim_rng/data.pkl", bytes(p.out))
        z.writestr("model_optim_rng/byteorder", "little")
        for key, raw in p.storages:
            z.writestr("model_optim_rng/data/" + key, raw)
        z.writestr("model_optim_rng/version", "3\n")


def write_safetensors(path, tensors):
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        raw = struct.pack("<%df" % len(t.data), *t.data)
        header[name] = {"dtype": "F32", "shape": t.shape, "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--vpp", type=int, default=1)
    ap.add_argument("--writer", choices=["pickle", "torch"], default="pickle")
    ap.add_argument("--malicious", action="store_true")
    ap.add_argument("--swiglu", action="store_true", help="record args.swiglu = True (not importable)")
    ap.add_argument("--apply-layernorm-1p", action="store_true",
                    help="record args.apply_layernorm_1p = True: the files' LayerNorm weights are zero-centered, "
                         "so tripod's are 1 + them")
    a = ap.parse_args()
    root = os.path.join(a.out, "megatron")
    it_dir = os.path.join(root, "iter_%07d" % ITERATION)
    os.makedirs(it_dir, exist_ok=True)
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write(str(ITERATION))
    if a.malicious:
        def evil(p):
            p.out += b"}("
            p.obj("model")
            p.glob("os", "system")
            p.obj(("touch " + os.path.join(a.out, "pwned"),))
            p.out += b"R"
            p.out += b"u"
        write_pt(os.path.join(it_dir, "mp_rank_00", "model_optim_rng.pt"), evil)
        return 0
    torch = None
    if a.writer == "torch":
        try:
            import torch  # noqa: F401
        except ImportError:
            print("PyTorch is not installed", file=sys.stderr)
            return 77
    params, padded = tripod_params(a.tp)
    for t in range(a.tp):
        for p in range(a.pp):
            rank_dir = "mp_rank_%02d" % t if a.pp == 1 else "mp_rank_%02d_%03d" % (t, p)
            path = os.path.join(it_dir, rank_dir, "model_optim_rng.pt")
            chunks = {("model" if a.vpp == 1 else "model%d" % v): stage_state(params, t, a.tp, p, a.pp, v, a.vpp)
                      for v in range(a.vpp)}
            args = args_dict(a.tp, a.pp, a.vpp, padded)
            args.update(tensor_model_parallel_rank=t, pipeline_model_parallel_rank=p, swiglu=a.swiglu,
                        apply_layernorm_1p=a.apply_layernorm_1p)
            if torch is not None:
                def tt(x):
                    if x is None:
                        return None
                    r = torch.tensor(x.data, dtype=torch.float32).reshape(x.shape)
                    return r.to(torch.bfloat16) if x.bf16 else r
                from collections import OrderedDict
                state = {"args": argparse.Namespace(**args), "checkpoint_version": 3.0, "iteration": ITERATION}
                for k, items in chunks.items():
                    state[k] = OrderedDict((n, tt(x)) for n, x in items)
                    pos = state[k].get("embedding.position_embeddings.weight")
                    if pos is not None:  # a Python attribute, as Megatron's main params carry
                        pos.tensor_model_parallel = False
                os.makedirs(os.path.dirname(path), exist_ok=True)
                torch.save(state, path)
                continue

            def root_writer(pk, chunks=chunks, args=args):
                pk.out += b"}("
                pk.obj("args")
                namespace(args)(pk)
                pk.obj("checkpoint_version")
                pk.obj(3.0)
                pk.obj("iteration")
                pk.obj(ITERATION)
                for k, items in chunks.items():
                    pk.obj(k)
                    pk.glob("collections", "OrderedDict")
                    pk.out += b")R("
                    for n, x in items:
                        pk.obj(n)
                        if x is not None and n.endswith("linear_fc2.weight"):
                            pk.tensor(x, transposed_view=True)
                        elif n == "embedding.position_embeddings.weight":
                            pk.tensor_with_attributes(x)
                        else:
                            pk.obj(x)
                    pk.out += b"u"
                pk.obj("rng_state")
                pk.obj([inert_extras])
                pk.out += b"u"
            write_pt(path, root_writer)
    # tripod keeps the vocabulary padded at TP 1: rows past it are Megatron's padding.
    tripod_padded = -(-VOCAB // DIVISIBLE) * DIVISIBLE
    expected = []
    for name, (t, kind) in params.items():
        if name == "embedding.word_embeddings.weight":
            t = t.rows(0, tripod_padded)
        if a.apply_layernorm_1p and name.endswith("layernorm.weight"):  # exact: multiples of 1/32 below 1
            t = T(t.shape, [x + 1.0 for x in t.data], t.bf16)
        expected.append(("model." + name, t))
    write_safetensors(os.path.join(a.out, "expected.safetensors"), expected)
    return 0


if __name__ == "__main__":
    sys.exit(main())
