"""GPT model identical to lib/model/gpt.{h,cpp}: same parameter names, shapes and forward pass.

Names (state dict): wte.weight, wpe.weight, blocks.{i}.ln1/attn.qkv/attn.proj/ln2/mlp.fc/mlp.proj,
ln_f, cls_head (classification only). LM head tied to wte. Optional activation recompute of
whole blocks with torch.utils.checkpoint (non-reentrant), the Python twin of recompute.policy=full.
"""
from dataclasses import dataclass

import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint as recompute_block


@dataclass
class GptOptions:
    vocab_size: int = 258
    n_layer: int = 4
    n_head: int = 4
    d_model: int = 128
    max_seq_len: int = 128
    num_labels: int = 0
    dropout: float = 0.0
    bias: bool = True
    attention: str = "sdpa"  # or "eager": hpctrain's model.attention = eager, written out as Hugging Face's eager GPT-2


class CausalSelfAttention(nn.Module):
    def __init__(self, o: GptOptions):
        super().__init__()
        self.qkv = nn.Linear(o.d_model, 3 * o.d_model, bias=o.bias)
        self.proj = nn.Linear(o.d_model, o.d_model, bias=o.bias)
        self.resid_drop = nn.Dropout(o.dropout)
        self.n_head = o.n_head
        self.attn_dropout = o.dropout
        self.eager = o.attention == "eager"

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        heads = lambda t: t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # noqa: E731
        p = self.attn_dropout if self.training else 0.0
        if self.eager:
            scores = (heads(q) * (1.0 / math.sqrt(C // self.n_head))) @ heads(k).transpose(-2, -1)
            scores.masked_fill_(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = F.dropout(torch.softmax(scores, -1), p, training=p > 0) @ heads(v)
        else:
            y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=None, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_drop(self.proj(y))


class Mlp(nn.Module):
    def __init__(self, o: GptOptions):
        super().__init__()
        self.fc = nn.Linear(o.d_model, 4 * o.d_model, bias=o.bias)
        self.proj = nn.Linear(4 * o.d_model, o.d_model, bias=o.bias)
        self.drop = nn.Dropout(o.dropout)

    def forward(self, x):
        return self.drop(self.proj(F.gelu(self.fc(x), approximate="tanh")))


class Block(nn.Module):
    def __init__(self, o: GptOptions):
        super().__init__()
        self.ln1 = nn.LayerNorm(o.d_model, eps=1e-5)
        self.attn = CausalSelfAttention(o)
        self.ln2 = nn.LayerNorm(o.d_model, eps=1e-5)
        self.mlp = Mlp(o)

    def forward(self, x):
        h = x + self.attn(self.ln1(x))
        return h + self.mlp(self.ln2(h))


class Gpt(nn.Module):
    def __init__(self, o: GptOptions, recompute: bool = False):
        super().__init__()
        if o.d_model % o.n_head:
            raise ValueError(f"model.n_head {o.n_head} does not divide model.d_model {o.d_model}")
        self.opts = o
        self.recompute = recompute
        self.wte = nn.Embedding(o.vocab_size, o.d_model)
        self.wpe = nn.Embedding(o.max_seq_len, o.d_model)
        self.emb_drop = nn.Dropout(o.dropout)
        self.blocks = nn.ModuleList([Block(o) for _ in range(o.n_layer)])
        self.ln_f = nn.LayerNorm(o.d_model, eps=1e-5)
        self.cls_head = nn.Linear(o.d_model, o.num_labels) if o.num_labels > 0 else None
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self):
        """Same distributions as GptImpl::init_weights (the values come from a checkpoint when comparing)."""
        resid_std = 0.02 / (2.0 * self.opts.n_layer) ** 0.5
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                p.zero_()
            elif "ln" in name:
                p.fill_(1.0)
            elif ".proj.weight" in name:
                p.normal_(0.0, resid_std)
            else:
                p.normal_(0.0, 0.02)

    def hidden(self, ids):
        T = ids.size(1)
        if T > self.opts.max_seq_len:
            raise ValueError(f"sequence of {T} tokens exceeds model.max_seq_len = {self.opts.max_seq_len}")
        pos = torch.arange(T, dtype=torch.long, device=ids.device)
        x = self.emb_drop(self.wte(ids) + self.wpe(pos))
        for block in self.blocks:
            if self.recompute and self.training and torch.is_grad_enabled():
                x = recompute_block(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.ln_f(x)

    def lm_logits(self, ids):
        return F.linear(self.hidden(ids), self.wte.weight)

    def class_logits(self, ids, mask):
        h = self.hidden(ids)
        m = mask.to(h.dtype).unsqueeze(-1)
        pooled = (h * m).sum(1) / m.sum(1).clamp_min(1.0)
        return self.cls_head(pooled)

    def forward(self, ids, target, mask=None):
        """Mean cross-entropy of the batch (causal-lm: next tokens; classification: labels)."""
        if self.cls_head is None:
            logits = self.lm_logits(ids)
            return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), target.reshape(-1))
        return F.cross_entropy(self.class_logits(ids, mask).float(), target)

    def flops_per_token(self, seq_len: int) -> float:
        L, d = float(self.opts.n_layer), float(self.opts.d_model)
        return 6.0 * (12.0 * L * d * d + d * self.opts.vocab_size) + 12.0 * L * d * seq_len


def param_groups(model: nn.Module, weight_decay: float):
    """Same split as lib/train/optim.cpp make_adamw: decay only 2-D non-embedding weights."""
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        is_embedding = name.startswith("wte.") or name.startswith("wpe.")
        (decay if p.dim() == 2 and not is_embedding else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
