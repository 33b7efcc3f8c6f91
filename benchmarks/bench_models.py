"""Issue-3 cases: a GPT-2-shaped model (4 layers, 256 wide, batch 4 x 128 tokens), forward
and a training step, in both styles (model.to(dev) and ral_mode), against eager CPU."""

from __future__ import annotations

import copy

import torch
import transformers
from common import Result, interleaved

import torch_fl


def gpt2(seed: int = 0) -> torch.nn.Module:
    """The benchmark model: GPT-2 with 4 layers, 256 wide, random init, dropout off."""
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(
        n_layer=4,
        n_embd=256,
        n_head=4,
        vocab_size=2048,
        n_positions=256,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return transformers.GPT2LMHeadModel(cfg)


def _ids():
    return torch.randint(0, 2048, (4, 128), generator=torch.Generator().manual_seed(1))


def forward(dev: str) -> list[Result]:
    """Forward pass (no grad) in both styles."""
    cpu_model = gpt2().eval()
    ral_model = copy.deepcopy(cpu_model).to(dev)
    ids = _ids()
    ids_dev = ids.to(dev)

    def cpu():
        with torch.no_grad():
            cpu_model(ids)

    def to_device():
        with torch.no_grad():
            ral_model(ids_dev)
        torch.ral.synchronize()

    def mode():
        with torch.no_grad(), torch_fl.ral_mode(dev):
            cpu_model(ids)
        torch.ral.synchronize()

    t = interleaved({"cpu": cpu, "dev": to_device, "mode": mode}, repeats=7)
    return [
        Result(
            "GPT-2 forward, model.to", dev, t["dev"], "eager CPU", t["cpu"], 1.10, note=f"cpu {t['cpu'] * 1e3:.1f} ms"
        ),
        Result("GPT-2 forward, ral_mode", dev, t["mode"], "eager CPU", t["cpu"], 1.10),
    ]


def train_step(dev: str) -> list[Result]:
    """Forward + backward + AdamW step in both styles."""
    cpu_model = gpt2().train()
    ral_model = copy.deepcopy(cpu_model).to(dev)
    mode_model = copy.deepcopy(cpu_model)
    opts = {
        k: torch.optim.AdamW(m.parameters(), lr=1e-4)
        for k, m in (("cpu", cpu_model), ("dev", ral_model), ("mode", mode_model))
    }
    ids = _ids()
    ids_dev = ids.to(dev)

    def step(model, opt, inp):
        opt.zero_grad()
        model(input_ids=inp, labels=inp).loss.backward()
        opt.step()

    def cpu():
        step(cpu_model, opts["cpu"], ids)

    def to_device():
        step(ral_model, opts["dev"], ids_dev)
        torch.ral.synchronize()

    def mode():
        with torch_fl.ral_mode(dev):
            opts["mode"].zero_grad()
            mode_model(input_ids=ids, labels=ids).loss.backward()
        opts["mode"].step()  # CPU parameters: the optimizer runs where they live
        torch.ral.synchronize()

    t = interleaved({"cpu": cpu, "dev": to_device, "mode": mode}, repeats=5)
    return [
        Result(
            "GPT-2 train step, model.to",
            dev,
            t["dev"],
            "eager CPU",
            t["cpu"],
            1.15,
            note=f"cpu {t['cpu'] * 1e3:.1f} ms",
        ),
        Result("GPT-2 train step, ral_mode", dev, t["mode"], "eager CPU", t["cpu"], 1.15),
    ]


CASES = {"gpt2_forward": forward, "gpt2_train": train_step}
