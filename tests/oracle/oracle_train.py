# The training run and fixture writer shared by gen_gpt2_oracle.py,
# gen_llama_oracle.py and gen_moe_oracle.py: the batch, optimizer and
# schedule constants, Megatron's AdamW semantics (no decay on 1-D parameters, global-norm clipping, linear
# warmup then cosine decay, the first iteration at lr_at(0)), and the records
# the C++ test reads (see gen_gpt2_oracle.py for the format).
import math
import struct

import torch

MAGIC = 20261202
T, V, VP, B_MICRO, N_MICRO, STEPS = 32, 500, 512, 2, 2, 3  # VP: 500 padded to a multiple of 128
GBS = B_MICRO * N_MICRO
LR, MIN_LR, WARMUP, DECAY_ITERS = 1e-3, 1e-4, 1, 3
WD, CLIP, BETA1, BETA2, EPS = 0.1, 0.5, 0.9, 0.95, 1e-4


def lr_at(n):  # Megatron OptimizerParamScheduler.get_lr, counted in iterations
    if WARMUP > 0 and n <= WARMUP:
        return LR * n / WARMUP
    if n > DECAY_ITERS:
        return MIN_LR
    ratio = (n - WARMUP) / (DECAY_ITERS - WARMUP)
    return MIN_LR + 0.5 * (math.cos(math.pi * ratio) + 1.0) * (LR - MIN_LR)


def train_and_write(out_path, P, forward, config, version):
    """Trains P for STEPS steps from the RNG's current state and writes the fixture:
    config is the model's int32 header fields (after magic and version)."""
    init = {n: t.detach().clone() for n, t in P.items()}
    batches = [torch.randint(0, V, (GBS, T + 1), dtype=torch.int32) for _ in range(STEPS)]
    m = {n: torch.zeros_like(t) for n, t in P.items()}
    v = {n: torch.zeros_like(t) for n, t in P.items()}
    records, losses, norms, grads0 = [], [], [], None
    def run(tokens):  # forward may also return a loss to add to the objective (the MoE losses)
        out = forward(P, tokens)
        return out if isinstance(out, tuple) else (out, 0.0)

    with torch.no_grad():
        logits0 = run(batches[0][:B_MICRO, :T].long())[0]
    for step in range(STEPS):
        for t in P.values():
            t.grad = None
        tok = batches[step].long()
        logits, extra = run(tok[:, :T])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VP), tok[:, 1:].reshape(-1))
        (loss + extra).backward()
        norm = math.sqrt(sum(float((t.grad ** 2).sum()) for t in P.values()))
        losses.append(float(loss))
        norms.append(norm)
        if step == 0:
            grads0 = {n: t.grad.detach().clone() for n, t in P.items()}
        clip = CLIP / (norm + 1e-6) if CLIP / (norm + 1e-6) < 1.0 else 1.0
        lr = lr_at(step)
        with torch.no_grad():
            for n, p in P.items():
                g = p.grad * clip
                decay = WD if (p.dim() > 1) else 0.0
                m[n].mul_(BETA1).add_((1 - BETA1) * g)
                v[n].mul_(BETA2).add_((1 - BETA2) * g * g)
                mhat = m[n] / (1 - BETA1 ** (step + 1))
                vhat = v[n] / (1 - BETA2 ** (step + 1))
                p.sub_(lr * (mhat / (vhat.sqrt() + EPS) + decay * p))

    def rec(name, t):
        t = t.detach().contiguous()
        dt = 1 if t.dtype == torch.int32 else 0
        data = t.numpy().astype("<i4" if dt else "<f8").tobytes()
        nb = name.encode()
        return (struct.pack("<i", len(nb)) + nb + struct.pack("<ii", dt, t.dim()) +
                struct.pack(f"<{t.dim()}q", *t.shape) + data)

    for s, b in enumerate(batches):
        records.append(rec(f"tokens.{s}", b))
    for n, t in init.items():
        records.append(rec("init." + n, t))
    records.append(rec("logits0", logits0))
    for n, t in grads0.items():
        records.append(rec("grad." + n, t))
    for n, t in P.items():
        records.append(rec("final." + n, t))
    records.append(rec("losses", torch.tensor(losses)))
    records.append(rec("grad_norms", torch.tensor(norms)))
    header = struct.pack("<ii", MAGIC, version)
    header += struct.pack(f"<{len(config)}i", *config)
    header += struct.pack("<9d", LR, MIN_LR, WARMUP, DECAY_ITERS, WD, CLIP, BETA1, BETA2, EPS)
    with open(out_path, "wb") as f:
        f.write(header + b"".join(records))
    print(f"wrote {out_path}: losses {losses}, grad norms {norms}")

