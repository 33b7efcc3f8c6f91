"""torch_fl quickstart: devices, plugins, and a real transformer on ral:0 in both styles.

Run: .venv/bin/python examples/quickstart.py
"""

from __future__ import annotations

import time

import torch
import transformers

import torch_fl


def show_devices():
    print("== ral devices ==")
    for d in torch_fl.devices():
        mem = f"{d.total_memory / 2**30:.1f} GiB" if d.total_memory else "?"
        print(f"  ral:{d.index}  {d.type:<5} {d.name}  [{d.vendor}]  memory {mem}  host-mappable={d.host_mappable}")
    print("== plugins ==")
    for p in torch_fl.plugins():
        # a LOADED plugin's reason is a note (a dtype the device lacks); others name a fault
        why = f"  (note: {p.reason})" if p.reason and p.status == "LOADED" else f"  ({p.reason})" if p.reason else ""
        print(f"  {p.record.name:<10} {p.record.version:<8} ABI {p.record.abi[0]}.{p.record.abi[1]}  {p.status}{why}")


def build_gpt2():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(
        n_layer=4,
        n_embd=256,
        n_head=4,
        vocab_size=2048,
        n_positions=256,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        # GPT-2's special token id (50256) lies outside this small vocabulary; transformers
        # warns about it, so use the last id of our vocabulary instead.
        bos_token_id=2047,
        eos_token_id=2047,
    )
    return transformers.GPT2LMHeadModel(cfg).eval()


def timed(fn, repeat=3):
    fn()
    t0 = time.perf_counter()
    for _ in range(repeat):
        out = fn()
    torch.ral.synchronize()
    return out, (time.perf_counter() - t0) / repeat


def main():
    show_devices()
    model = build_gpt2()
    ids = torch.randint(0, 2048, (4, 128))
    with torch.no_grad():
        ref, t_cpu = timed(lambda: model(ids).logits)

        ral_model = build_gpt2().to("ral:0")
        with torch_fl.coverage() as cov:
            out, t_ral = timed(lambda: ral_model(ids.to("ral:0")).logits)
        err = (out.cpu() - ref).abs().max().item()
        print("\n== GPT-2 (4 layers, 256 wide), batch 4 x 128 tokens, forward ==")
        print(f"  eager CPU            {t_cpu * 1e3:8.1f} ms")
        print(f"  model.to('ral:0')    {t_ral * 1e3:8.1f} ms   ({t_ral / t_cpu:.2f}x CPU), max |diff| {err:.2e}")
        with torch_fl.ral_mode("ral:0"):
            out_m, t_mode = timed(lambda: model(ids).logits)
        print(
            f"  ral_mode('ral:0')    {t_mode * 1e3:8.1f} ms   ({t_mode / t_cpu:.2f}x CPU), max |diff| "
            f"{(out_m.cpu() - ref).abs().max().item():.2e}"
        )
        print(
            "  (one process times both sides, so the plugin's threads and torch's share the cores;"
            " benchmarks/run.py times each side in its own process: that is the figure to quote)"
        )
    print("\n== where the op calls ran (model.to style) ==")
    print(cov)  # tier shares and the top fallbacks by time, per device (cov.to_dict() for tools)


if __name__ == "__main__":
    main()
