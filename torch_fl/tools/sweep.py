"""Full conformance sweeps outside pytest, for measuring pass rates and reviewing xfails:

    python -m torch_fl.tools.sweep op --devices ral:0 ral:1 --dtypes float32 bfloat16 --out op.jsonl
    python -m torch_fl.tools.sweep module --out mod.jsonl
    python -m torch_fl.tools.sweep optim --out optim.jsonl
    python -m torch_fl.tools.sweep table op.jsonl mod.jsonl optim.jsonl

Each case is one JSON line (flushed as it finishes, so a long sweep can be read while it runs);
`--shard K/N` runs every N-th case for running shards in parallel processes.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections import defaultdict


def _cases(args):
    import torch

    from torch_fl.observe import conformance as C

    if args.db == "op":
        db = C.load_op_db()
        for dev in args.devices:
            for op, dt in C.select(db, names=args.names, dtypes=args.dtypes):
                if not C.device_declares(dev, dt) and dt == torch.float16:
                    continue
                for style in args.styles:
                    yield lambda op=op, dt=dt, dev=dev, style=style: C.run_case(op, dt, dev, style)
    elif args.db == "module":
        from torch_fl.observe import conformance_modules as M

        for dev in args.devices:
            for info in M.select_modules(M.load_module_db(), names=args.names):
                for style in args.styles:
                    yield lambda info=info, dev=dev, style=style: M.run_module_case(info, torch.float32, dev, style)
    else:
        from torch_fl.observe import conformance_optim as O

        for dev in args.devices:
            for info in O.load_optim_db():
                if args.names and info.name not in args.names:
                    continue
                for _, oi, impl in O.case_names(info):
                    for style in args.styles:
                        yield lambda info=info, oi=oi, impl=impl, dev=dev, style=style: O.run_optim_case(
                            info, oi, impl, dev, style
                        )


def run(args) -> None:
    """Run the selected cases, one JSON line each."""
    import torch

    import torch_fl.api  # noqa: F401  (registers the ral device)

    torch.ral.device_count()
    k, n = (int(x) for x in args.shard.split("/"))
    out = open(args.out, "a") if args.out else sys.stdout
    for i, case in enumerate(_cases(args)):
        if i % n != k:
            continue
        try:
            r = dataclasses.asdict(case())
        except Exception as exc:  # a runner bug must not end a long sweep
            r = {"passed": False, "error": f"runner: {type(exc).__name__}: {exc}"[:300], "case": i}
        r["db"] = args.db
        out.write(json.dumps(r) + "\n")
        out.flush()


def table(paths) -> str:
    """Markdown table of pass rates per (db, device, dtype, style) from sweep JSONL files."""
    stats = defaultdict(lambda: [0, 0, 0.0])
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            if "op" not in r:
                continue
            s = stats[(r["db"], r["device"], r["dtype"], r["style"])]
            s[0] += r["passed"]
            s[1] += 1
            s[2] += r["seconds"]
    rows = ["| db | device | dtype | style | passed | cases | rate | seconds |", "|---|---|---|---|---|---|---|---|"]
    for (db, dev, dt, st), (ok, n, sec) in sorted(stats.items()):
        rows.append(f"| {db} | {dev} | {dt} | {st} | {ok} | {n} | {100 * ok / n:.1f}% | {sec:.0f} |")
    return "\n".join(rows)


def main(argv=None) -> None:
    """Command line: a sweep, or `table` over JSONL files."""
    ap = argparse.ArgumentParser(prog="python -m torch_fl.tools.sweep")
    ap.add_argument("db", choices=["op", "module", "optim", "table"])
    ap.add_argument("files", nargs="*", help="JSONL files (table only)")
    ap.add_argument("--devices", nargs="+", default=["ral:0", "ral:1"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16", "int64", "bool"])
    ap.add_argument("--styles", nargs="+", default=["device", "mode"])
    ap.add_argument("--names", nargs="+", default=None)
    ap.add_argument("--shard", default="0/1")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.db == "table":
        print(table(args.files))
    else:
        run(args)


if __name__ == "__main__":
    main()
