#!/usr/bin/env python3
"""The PyTorch side of `zshard bench step --device cuda`: one GPT-2 training step (forward,
backward, AdamW) at the same size, batch and sequence, timed the same way (median of --steps
after --warmup), so scripts/gpu-check.sh can put the two side by side.

The model is GPT-2 as zshard builds it (learned positions, pre-LayerNorm blocks, GELU(tanh)
MLP, tied embeddings, vocab padded to a multiple of 128), attention through
scaled_dot_product_attention (FlashAttention on a recent GPU). --dtype bf16 runs the matrix
products under bf16 autocast with fp32 master weights; tf32 keeps fp32 with TF32 matmuls.
No download: weights are random, tokens are random below GPT-2's 50257."""
import argparse
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {"gpt2-124m": (12, 12, 768), "gpt2-355m": (24, 16, 1024), "gpt2-774m": (36, 20, 1280)}


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.qkv, self.proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.fc, self.out = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers, heads, c, seq, vocab):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(seq, c)
        self.blocks = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS))
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--dtype", choices=["bf16", "tf32", "fp32"], default="bf16")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_step.py: no CUDA device visible to PyTorch")
    torch.backends.cuda.matmul.allow_tf32 = a.dtype == "tf32"
    torch.manual_seed(0)
    layers, heads, c = PRESETS[a.model]
    vocab = (50257 + 127) // 128 * 128
    model = GPT2(layers, heads, c, a.seq, vocab).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1, fused=True)
    x = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    y = torch.randint(0, 50257, (a.batch, a.seq), device="cuda")
    ms = []
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= a.warmup:
            ms.append((time.perf_counter() - t0) * 1e3)
    med = statistics.median(ms)
    params = sum(p.numel() for p in model.parameters())
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {a.model} {a.dtype}, "
          f"batch {a.batch} x seq {a.seq}, {params / 1e6:.1f} M parameters")
    print("| metric | value |\n|---|---|")
    print(f"| PyTorch {a.dtype} ms/step (median) | {med:.1f} |")
    print(f"| PyTorch {a.dtype} tokens/s | {a.batch * a.seq / (med * 1e-3):.0f} |")
    print(f"| PyTorch peak memory | {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB |")


if __name__ == "__main__":
    main()
