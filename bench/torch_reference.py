#!/usr/bin/env python3
# PyTorch eager reference of the model pipeld runs: the same Llama decoder read from the same
# Hugging Face directory, timed on the same jobs as pl-cuda-bench, and a greedy generation to
# compare with pl-cuda-parity's. Runs on the GPU machine (PyTorch is not a project dependency).
"""Usage: torch_reference.py --model DIR [--bench] [--gen N --prompt 1,2,3] [--dtype auto]"""

import argparse
import json
import math
import mmap
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F

ST_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


def load_tensors(model_dir):
    """Every tensor of the model's safetensors shard(s), as CPU tensors over mmapped files."""
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        with open(os.path.join(model_dir, name), "rb") as f:
            mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)  # writable view
        n = struct.unpack("<Q", mm[:8])[0]
        header = json.loads(mm[8:8 + n])
        base = 8 + n
        for key, meta in header.items():
            if key == "__metadata__":
                continue
            a, b = meta["data_offsets"]
            dt = ST_DTYPES[meta["dtype"]]
            buf = memoryview(mm)[base + a:base + b]
            t = torch.frombuffer(buf, dtype=dt) if b > a else torch.empty(0, dtype=dt)
            out[key] = t.reshape(meta["shape"])
    return out


def rope_inv_freq(cfg, head_dim):
    """theta^(-2i/d) with llama3 scaling as Hugging Face's _compute_llama3_parameters (float64)."""
    theta = float(cfg.get("rope_theta", 10000.0))
    inv = [theta ** (-2.0 * i / head_dim) for i in range(head_dim // 2)]
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type", rs.get("type")) == "llama3":
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        orig = rs["original_max_position_embeddings"]
        lw, hw = orig / low, orig / high
        for i, f in enumerate(inv):
            w = 2 * math.pi / f
            if w > lw:
                inv[i] = f / factor
            elif w >= hw:
                s = (orig / w - low) / (high - low)
                inv[i] = (1 - s) * f / factor + s * f
    return torch.tensor(inv, dtype=torch.float64)


class Llama:
    def __init__(self, model_dir, device, dtype, max_batch, max_ctx):
        with open(os.path.join(model_dir, "config.json")) as f:
            self.cfg = cfg = json.load(f)
        self.H = cfg["hidden_size"]
        self.nh = cfg["num_attention_heads"]
        self.nkv = cfg.get("num_key_value_heads") or self.nh
        self.hd = cfg.get("head_dim") or self.H // self.nh
        self.L = cfg["num_hidden_layers"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.device = device
        raw = load_tensors(model_dir)
        if dtype is None:
            dtype = raw["model.embed_tokens.weight"].dtype
        self.dtype = dtype

        def get(name):
            return raw[name].to(device=device, dtype=dtype)

        self.embed = get("model.embed_tokens.weight")
        self.lm = self.embed if cfg.get("tie_word_embeddings") else get("lm_head.weight")
        self.norm = get("model.norm.weight")
        self.layers = []
        for i in range(self.L):
            p = f"model.layers.{i}."
            self.layers.append({k: get(p + n) for k, n in [
                ("ln1", "input_layernorm.weight"), ("ln2", "post_attention_layernorm.weight"),
                ("q", "self_attn.q_proj.weight"), ("k", "self_attn.k_proj.weight"),
                ("v", "self_attn.v_proj.weight"), ("o", "self_attn.o_proj.weight"),
                ("gate", "mlp.gate_proj.weight"), ("up", "mlp.up_proj.weight"),
                ("down", "mlp.down_proj.weight")]})
        del raw
        self.inv_freq = rope_inv_freq(cfg, self.hd).to(device)
        shape = (self.L, max_batch, self.nkv, max_ctx, self.hd)
        self.kc = torch.zeros(shape, device=device, dtype=dtype)
        self.vc = torch.zeros(shape, device=device, dtype=dtype)

    def weight_bytes(self):
        n = sum(t.numel() for layer in self.layers for k, t in layer.items() if k[:2] != "ln")
        return (n + self.lm.numel()) * self.lm.element_size()

    def rmsnorm(self, x, w):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * xf.to(x.dtype)

    def rope(self, x, cos, sin):
        half = self.hd // 2
        x1, x2 = x[..., :half], x[..., half:]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    @torch.inference_mode()
    def forward(self, ids, pos0):
        """ids [B, T] on slots 0..B-1, all at positions pos0..pos0+T-1; logits of the last."""
        B, T = ids.shape
        x = self.embed[ids]
        pos = torch.arange(pos0, pos0 + T, device=self.device, dtype=torch.float64)
        ang = pos[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos().to(self.dtype), ang.sin().to(self.dtype)
        end = pos0 + T
        mask = None
        if T > 1:
            qpos = torch.arange(pos0, end, device=self.device)[:, None]
            mask = torch.arange(end, device=self.device)[None, :] <= qpos
        for i, w in enumerate(self.layers):
            h = self.rmsnorm(x, w["ln1"])
            q = (h @ w["q"].T).view(B, T, self.nh, self.hd).transpose(1, 2)
            k = (h @ w["k"].T).view(B, T, self.nkv, self.hd).transpose(1, 2)
            v = (h @ w["v"].T).view(B, T, self.nkv, self.hd).transpose(1, 2)
            q, k = self.rope(q, cos, sin), self.rope(k, cos, sin)
            self.kc[i, :B, :, pos0:end] = k
            self.vc[i, :B, :, pos0:end] = v
            a = F.scaled_dot_product_attention(q, self.kc[i, :B, :, :end],
                                               self.vc[i, :B, :, :end], attn_mask=mask,
                                               enable_gqa=self.nkv != self.nh)
            x = x + a.transpose(1, 2).reshape(B, T, self.nh * self.hd) @ w["o"].T
            h = self.rmsnorm(x, w["ln2"])
            x = x + (F.silu(h @ w["gate"].T) * (h @ w["up"].T)) @ w["down"].T
        return (self.rmsnorm(x[:, -1], self.norm) @ self.lm.T).float()


def sync():
    torch.cuda.synchronize()


def bench(m, args):
    V = m.cfg["vocab_size"]
    g = torch.Generator(device="cpu").manual_seed(7)
    wb = m.weight_bytes()
    print(f"| decode (context {args.fill}) | tok/s | ms/step | weight GB/s |\n|---|---|---|---|")
    for B in args.batches:
        ids = torch.randint(0, V, (B, args.fill), generator=g).to(m.device)
        m.forward(ids, 0)
        step = torch.randint(0, V, (B, 1), generator=g).to(m.device)
        for k in range(3):
            m.forward(step, args.fill + k)
        sync()
        t0 = time.perf_counter()
        for k in range(args.steps):
            m.forward(step, args.fill + 3 + k)
        sync()
        t = (time.perf_counter() - t0) / args.steps
        print(f"| batch {B} | {B / t:.1f} | {t * 1e3:.3f} | {wb / t / 1e9:.0f} |")
    print(f"\n| prefill | tokens | tok/s | ms |\n|---|---|---|---|")
    for B in (1, 4):
        if B > max(args.batches):
            break
        ids = torch.randint(0, V, (B, args.prompt), generator=g).to(m.device)
        m.forward(ids, 0)
        sync()
        t0 = time.perf_counter()
        m.forward(ids, 0)
        sync()
        t = time.perf_counter() - t0
        print(f"| {B} x {args.prompt} | {B * args.prompt} | {B * args.prompt / t:.0f} | "
              f"{t * 1e3:.1f} |")


def generate(m, prompt, n):
    ids = torch.tensor([prompt], device=m.device)
    out = []
    logits = m.forward(ids, 0)
    pos = len(prompt)
    for _ in range(n):
        tok = int(torch.argmax(logits[0]))  # lowest id wins ties, as pl_sample's greedy
        out.append(tok)
        logits = m.forward(torch.tensor([[tok]], device=m.device), pos)
        pos += 1
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--dtype", default="auto", choices=["auto", "f32", "f16", "bf16"])
    ap.add_argument("--bench", action="store_true")
    ap.add_argument("--batches", default="1,8,32,128")
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--fill", type=int, default=128)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=0)
    ap.add_argument("--prompt-ids", default="")
    args = ap.parse_args()
    args.batches = [int(b) for b in args.batches.split(",")]
    if not torch.cuda.is_available():
        print("torch_reference: no CUDA device", file=sys.stderr)
        return 3
    torch.backends.cuda.matmul.allow_tf32 = False  # f32 models: plain f32 products
    torch.backends.cudnn.allow_tf32 = False
    dtype = {"auto": None, "f32": torch.float32, "f16": torch.float16,
             "bf16": torch.bfloat16}[args.dtype]
    max_batch = max(args.batches) if args.bench else 1
    t0 = time.perf_counter()
    m = Llama(args.model, "cuda", dtype, max_batch, args.ctx)
    print(f"# torch {torch.__version__} eager, {torch.cuda.get_device_name()}, model "
          f"{args.model} ({m.L} layers, hidden {m.H}, {str(m.dtype).split('.')[-1]}), "
          f"loaded in {time.perf_counter() - t0:.1f} s\n")
    if args.gen > 0:
        prompt = [int(t) for t in args.prompt_ids.split(",") if t]
        if not prompt:
            print("torch_reference: --gen needs --prompt-ids", file=sys.stderr)
            return 2
        print("GEN torch: " + " ".join(str(t) for t in generate(m, prompt, args.gen)))
    if args.bench:
        bench(m, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
