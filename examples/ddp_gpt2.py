"""Train a small GPT-2 (random init) with DistributedDataParallel or FSDP2, one process per rank.

    torchrun --nproc-per-node 2 examples/ddp_gpt2.py --device ral:0           # DDP on ral:0
    torchrun --nproc-per-node 2 examples/ddp_gpt2.py --device ral:1 --fsdp    # FSDP2 on ral:1
    torchrun --nproc-per-node 2 examples/ddp_gpt2.py                          # plain CPU + gloo

Each step feeds rank r its slice of one global batch, so the result equals single-process
training on the concatenated batch. `--accum K` accumulates K micro-batches, all but the last
under `no_sync()`. `--init FILE` starts from saved weights; `--dump FILE` (rank 0) saves losses,
first-step gradients and final weights.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
import transformers

VOCAB, SEQ = 96, 12


def build_model(seed: int = 0) -> torch.nn.Module:
    """A 2-layer GPT-2 LM head model, randomly initialised, no dropout (deterministic)."""
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=0,
        eos_token_id=0,
        tie_word_embeddings=False,
    )
    return transformers.GPT2LMHeadModel(cfg)


def global_batch(step: int, micro: int, world: int, per_rank: int) -> torch.Tensor:
    """Token ids of one global micro-batch (world * per_rank rows), the same on every rank."""
    g = torch.Generator().manual_seed(1000 * step + micro)
    return torch.randint(0, VOCAB, (world * per_rank, SEQ), generator=g)


def main(argv=None) -> None:
    """Parse arguments, join the process group, train, optionally dump results."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu", help="cpu, ral:0, ral:1 (ral needs torch_fl)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--per-rank", type=int, default=2, help="sequences per rank per micro-batch")
    ap.add_argument("--accum", type=int, default=1, help="micro-batches per step (no_sync on all but the last)")
    ap.add_argument("--bucket-cap-mb", type=float, default=25.0)
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 fully_shard instead of DDP")
    ap.add_argument("--dump", default=None)
    ap.add_argument("--init", default=None, help="start from these weights (torch.save'd state_dict)")
    args = ap.parse_args(argv)

    if args.device.startswith("ral"):
        import torch_fl  # noqa: F401  (registers the ral device and its ralccl backend)
    device = torch.device(args.device)
    if device.type == "ral":
        dist.init_process_group(device_id=device)  # picks ralccl, the default backend of ral
    else:
        dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    model = build_model()
    if args.init:
        model.load_state_dict(torch.load(args.init))
    if device.type != "cpu":  # a plain CPU script never moves its model (and ral_mode relies on that)
        model = model.to(device)
    if args.fsdp:
        from torch.distributed.fsdp import fully_shard

        for block in model.transformer.h:
            fully_shard(block)
        wrapped = fully_shard(model)
    else:
        from torch.nn.parallel import DistributedDataParallel as DDP

        wrapped = DDP(model, bucket_cap_mb=args.bucket_cap_mb)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)

    losses, first_grads = [], None
    for step in range(args.steps):
        opt.zero_grad()
        for micro in range(args.accum):
            ids = global_batch(step, micro, world, args.per_rank)[rank * args.per_rank : (rank + 1) * args.per_rank]
            if device.type != "cpu":
                ids = ids.to(device)
            last = micro == args.accum - 1
            if args.fsdp:
                wrapped.set_requires_gradient_sync(last)
                loss = wrapped(input_ids=ids, labels=ids).loss
                loss.backward()
            else:
                ctx = wrapped.no_sync() if not last else _nullcontext()
                with ctx:
                    loss = wrapped(input_ids=ids, labels=ids).loss
                    loss.backward()
            avg = loss.detach().clone()
            dist.all_reduce(avg, op=dist.ReduceOp.AVG)
            losses.append(float(avg))
        if step == 0:
            first_grads = {n: _full(p.grad) for n, p in model.named_parameters()}
        opt.step()
        if rank == 0:
            print(f"step {step} loss {losses[-1]:.6f}", flush=True)
    if not args.fsdp and rank == 0:
        data = wrapped._get_ddp_logging_data()
        print(f"buckets {data.get('bucket_sizes')} rebuilt {data.get('rebuilt_bucket_sizes')}")
    weights = {n: _full(p) for n, p in model.named_parameters()}
    if args.dump and rank == 0:
        torch.save({"losses": losses, "grads": first_grads, "weights": weights}, args.dump)
    dist.barrier()
    dist.destroy_process_group()


def _full(t: torch.Tensor) -> torch.Tensor:
    """A CPU copy of a parameter or gradient (gathering FSDP2 shards)."""
    t = t.detach()
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    return t.to("cpu", copy=True)  # (not .clone(): under ral_mode a CPU clone lands on the device)


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    if "RANK" not in os.environ:  # plain `python examples/ddp_gpt2.py`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29500")
    main()
