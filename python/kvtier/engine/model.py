"""A small decoder-only transformer on the CPU, with a paged KV cache.

The architecture of today's open models, at toy size: RMSNorm, rotary
positions, grouped-query attention and a SwiGLU MLP, weights drawn from a
fixed seed (nothing is downloaded). The KV cache is paged as in vLLM: per
layer one K and one V tensor of ``[num_blocks, block_tokens, kv_heads,
head_dim]``, and each request owns a list of block ids (its block table).

``Transformer.forward(tokens, start, block_table, cache)`` computes the new
tokens at positions ``start .. start + len(tokens) - 1`` given that the cache
already holds K/V of positions ``0 .. start - 1`` in the request's blocks: it
writes the new tokens' K/V into the cache and attends over all of them. So a
prefill whose first blocks were loaded from kvtier computes only the suffix,
and ``layer_hook(i)`` lets the caller wait for layer i's loaded K/V just
before layer i reads it (layer-wise pipelined loading).
"""

import dataclasses
import hashlib
import json
import math

import torch


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    layers: int = 2
    hidden: int = 128
    heads: int = 4
    kv_heads: int = 2
    head_dim: int = 32
    ffn: int = 344
    vocab: int = 2048
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    seed: int = 0
    dtype: str = "float32"  # "float32" or "bfloat16"
    name: str = "kvtier-tiny"

    def torch_dtype(self):
        return {"float32": torch.float32, "bfloat16": torch.bfloat16}[self.dtype]

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), sort_keys=True)


def kv_bytes_per_token(cfg):
    """K and V of every layer for one token, in the model's dtype."""
    elem = torch.tensor([], dtype=cfg.torch_dtype()).element_size()
    return 2 * cfg.layers * cfg.kv_heads * cfg.head_dim * elem


class PagedKVCache:
    """vLLM-style paged KV: per layer K and V of [blocks, block_tokens, kv_heads, head_dim]."""

    def __init__(self, cfg, num_blocks, block_tokens=16):
        self.cfg = cfg
        self.block_tokens = block_tokens
        self.num_blocks = num_blocks
        shape = (num_blocks, block_tokens, cfg.kv_heads, cfg.head_dim)
        dt = cfg.torch_dtype()
        self.k = [torch.zeros(shape, dtype=dt) for _ in range(cfg.layers)]
        self.v = [torch.zeros(shape, dtype=dt) for _ in range(cfg.layers)]
        self._free = list(range(num_blocks - 1, -1, -1))

    def allocate(self, n):
        if n > len(self._free):
            raise MemoryError(f"paged KV cache: {n} blocks asked, {len(self._free)} free")
        return [self._free.pop() for _ in range(n)]

    def free(self, blocks):
        self._free.extend(reversed(blocks))

    @property
    def free_blocks(self):
        return len(self._free)


def _rms_norm(x, weight, eps):
    # In float32 whatever the model dtype, as real implementations do.
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (xf * weight.float()).to(x.dtype)


class Transformer:
    """Weights as plain tensors; inference only (torch.no_grad throughout)."""

    def __init__(self, cfg):
        self.cfg = cfg
        g = torch.Generator().manual_seed(cfg.seed)
        dt = cfg.torch_dtype()

        def w(*shape, scale):
            return (torch.randn(*shape, generator=g) * scale).to(dt)

        h, q, kv = cfg.hidden, cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.embed = w(cfg.vocab, h, scale=1.0)
        self.layers = []
        for _ in range(cfg.layers):
            self.layers.append({
                "attn_norm": torch.ones(h, dtype=dt) + w(h, scale=0.02),
                "wq": w(q, h, scale=1 / math.sqrt(h)),
                "wk": w(kv, h, scale=1 / math.sqrt(h)),
                "wv": w(kv, h, scale=1 / math.sqrt(h)),
                "wo": w(h, q, scale=1 / math.sqrt(q)),
                "mlp_norm": torch.ones(h, dtype=dt) + w(h, scale=0.02),
                "w_gate": w(cfg.ffn, h, scale=1 / math.sqrt(h)),
                "w_up": w(cfg.ffn, h, scale=1 / math.sqrt(h)),
                "w_down": w(h, cfg.ffn, scale=1 / math.sqrt(cfg.ffn)),
            })
        self.final_norm = torch.ones(h, dtype=dt)
        self.lm_head = w(cfg.vocab, h, scale=1 / math.sqrt(h))
        inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.head_dim, 2).float() / cfg.head_dim))
        self._inv_freq = inv

    def weights_digest(self):
        """SHA-256 of every weight's bytes: the model's revision in its namespace."""
        hsh = hashlib.sha256(self.cfg.to_json().encode())
        tensors = [self.embed, self.final_norm, self.lm_head]
        for layer in self.layers:
            tensors.extend(layer[k] for k in sorted(layer))
        for t in tensors:
            hsh.update(t.contiguous().view(torch.uint8).numpy().tobytes())
        return hsh.hexdigest()

    def _rope(self, x, positions):
        # x: [n, heads, head_dim]; rotate pairs (even, odd) by position * freq.
        ang = positions.float()[:, None] * self._inv_freq[None, :]  # [n, head_dim/2]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        xf = x.float()
        x1, x2 = xf[..., 0::2], xf[..., 1::2]
        out = torch.empty_like(xf)
        out[..., 0::2] = x1 * cos - x2 * sin
        out[..., 1::2] = x1 * sin + x2 * cos
        return out.to(x.dtype)

    @torch.no_grad()
    def forward(self, tokens, start, block_table, cache, layer_hook=None, save_hook=None):
        """Logits [len(tokens), vocab] of the new tokens.

        tokens: 1-D LongTensor of the new tokens, at positions start.. ;
        block_table: the request's block ids, enough for start + len(tokens);
        cache: PagedKVCache holding K/V of positions < start.
        layer_hook(i): called before layer i reads the cache (wait for its load).
        save_hook(i): called after layer i wrote its new K/V (start its save).
        """
        cfg, bt = self.cfg, cache.block_tokens
        n = tokens.shape[0]
        end = start + n
        positions = torch.arange(start, end)
        blocks = torch.tensor(block_table[: (end + bt - 1) // bt], dtype=torch.long)
        x = self.embed[tokens]
        group = cfg.heads // cfg.kv_heads
        # Causal mask of the new tokens over each other: True = a later position.
        future = torch.ones(n, n, dtype=torch.bool).triu(diagonal=1)
        for i, L in enumerate(self.layers):
            hn = _rms_norm(x, L["attn_norm"], cfg.norm_eps)
            q = (hn @ L["wq"].T).view(n, cfg.heads, cfg.head_dim)
            k = (hn @ L["wk"].T).view(n, cfg.kv_heads, cfg.head_dim)
            v = (hn @ L["wv"].T).view(n, cfg.kv_heads, cfg.head_dim)
            q, k = self._rope(q, positions), self._rope(k, positions)
            if layer_hook is not None:
                layer_hook(i)
            # Write the new tokens' K/V into their blocks.
            kc = cache.k[i].view(-1, cfg.kv_heads, cfg.head_dim)
            vc = cache.v[i].view(-1, cfg.kv_heads, cfg.head_dim)
            slots = blocks[positions // bt] * bt + positions % bt
            kc[slots] = k
            vc[slots] = v
            if save_hook is not None:
                save_hook(i)
            # Gather every position's K/V (cached prefix + new) in order.
            all_slots = blocks[torch.arange(end) // bt] * bt + torch.arange(end) % bt
            kk = kc[all_slots].float().permute(1, 2, 0)  # [kv_heads, head_dim, end]
            vv = vc[all_slots].float().permute(1, 0, 2)  # [kv_heads, end, head_dim]
            # Grouped-query attention: the `group` query heads of one KV head
            # form one batch of group * n rows against that head's keys.
            qg = (q.float() * (1.0 / math.sqrt(cfg.head_dim))).view(
                n, cfg.kv_heads, group, cfg.head_dim).permute(1, 2, 0, 3)
            scores = torch.matmul(qg.reshape(cfg.kv_heads, group * n, cfg.head_dim), kk)
            scores = scores.view(cfg.kv_heads, group, n, end)
            # Keys before `start` are visible to every new token; only the
            # new tokens' own square needs the causal mask.
            scores[..., start:].masked_fill_(future, float("-inf"))
            att = torch.softmax(scores, dim=-1).view(cfg.kv_heads, group * n, end)
            o = torch.matmul(att, vv).view(cfg.kv_heads, group, n, cfg.head_dim)
            o = o.permute(2, 0, 1, 3).reshape(n, -1).to(x.dtype)
            x = x + o @ L["wo"].T
            hn = _rms_norm(x, L["mlp_norm"], cfg.norm_eps)
            gate = torch.nn.functional.silu(hn @ L["w_gate"].T)
            x = x + (gate * (hn @ L["w_up"].T)) @ L["w_down"].T
        x = _rms_norm(x, self.final_norm, cfg.norm_eps)
        return (x @ self.lm_head.T).float()
