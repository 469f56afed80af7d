#!/usr/bin/env python3
"""Records a small PyTorch model's state dict and its outputs in safetensors files, for
`nn/tests/torch_checkpoint.rs`, which builds the same architecture with `#[derive(Module)]`,
loads the state dict PyTorch wrote and compares the outputs.

Writes, under nn/tests/data/:
- `torch_net.safetensors`: `safetensors.torch.save_file(model.state_dict(), ...)` of `Net`
  (Embedding, LayerNorm, MultiheadAttention, a ModuleList of Sequential MLPs with GELU,
  RMSNorm, Linear heads, a float buffer and an integer buffer);
- `torch_net_io.safetensors`: the input token ids, the outputs of `Net` in eval mode, and one
  tensor of every dtype TensorPlay stores (`dtype.f32`, ..., `dtype.bool`) to check the
  byte-level reading of each.

Regenerate (PyTorch and safetensors installed outside the repository):

    /path/to/venv/bin/python scripts/parity/record_nn_checkpoint.py
"""

import os

import torch
from safetensors.torch import save_file
from torch import nn

torch.manual_seed(0)
torch.set_num_threads(1)

OUT = os.path.join(os.path.dirname(__file__), "..", "..", "nn", "tests", "data")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(16, 8)
        self.norm = nn.LayerNorm(8)
        self.attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.blocks = nn.ModuleList(
            [
                nn.Sequential(nn.Linear(8, 12), nn.GELU(approximate="tanh"), nn.Linear(12, 8)),
                nn.Sequential(nn.Linear(8, 12), nn.GELU(), nn.Linear(12, 8)),
            ]
        )
        self.rms = nn.RMSNorm(8)
        self.head = nn.Linear(8, 5)
        self.register_buffer("scale", torch.tensor([0.5, 1.0, 1.5, 2.0, 2.5]))
        self.register_buffer("offset", torch.tensor([3], dtype=torch.int64))
        # Non-default parameters, so that a load that silently kept the defaults would fail.
        with torch.no_grad():
            for w in [self.norm.weight, self.rms.weight]:
                w.copy_(1.0 + 0.3 * torch.randn_like(w))
            for b in [self.norm.bias, self.attn.in_proj_bias, self.attn.out_proj.bias]:
                b.copy_(0.3 * torch.randn_like(b))

    def forward(self, ids):
        h = self.norm(self.emb(ids))
        mask = torch.triu(torch.ones(ids.shape[1], ids.shape[1], dtype=torch.bool), 1)
        h = h + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        for block in self.blocks:
            h = h + block(h)
        return self.head(self.rms(h)) * self.scale + self.offset


def main():
    net = Net().eval()
    ids = torch.randint(0, 16, (2, 6), dtype=torch.int64)
    with torch.no_grad():
        out = net(ids)
    save_file(net.state_dict(), os.path.join(OUT, "torch_net.safetensors"))
    io = {
        "ids": ids,
        "out": out.contiguous(),
        "dtype.f32": torch.tensor([1.5, -2.25, 3.0e-3], dtype=torch.float32),
        "dtype.f64": torch.tensor([1.0 / 3.0, -1e300], dtype=torch.float64),
        "dtype.f16": torch.tensor([0.5, -65504.0, 6.1e-5], dtype=torch.float16),
        "dtype.bf16": torch.tensor([1.0, -3.0e38, 0.0078125], dtype=torch.bfloat16),
        "dtype.i64": torch.tensor([[-(2**62), 7], [0, 2**40]], dtype=torch.int64),
        "dtype.i32": torch.tensor([-(2**31), 2**31 - 1], dtype=torch.int32),
        "dtype.bool": torch.tensor([True, False, True]),
    }
    save_file(io, os.path.join(OUT, "torch_net_io.safetensors"))
    print("keys:", list(net.state_dict().keys()))


if __name__ == "__main__":
    main()
