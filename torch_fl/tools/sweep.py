"""Full conformance sweeps outside pytest, for measuring pass rates and reviewing xfails:

    python -m torch_fl.tools.sweep op --devices ral:0 ral:1 --dtypes float32 bfloat16 --out op.jsonl
    python -m torch_fl.tools.sweep module --out mod.jsonl
    python -m torch_fl.tools.sweep optim --out optim.jsonl
    python -m torch_fl.tools.sweep table op.jsonl mod.jsonl optim.jsonl
    python -m torch_fl.tools.sweep failures op.jsonl      (xfail keys and errors to review)

Each case is one JSON line (flushed as it finishes, so a long sweep can be read while it runs);
`--sample N` runs a stable hash-chosen 1/N of the op pairs; parallel processes split the work
by --devices/--dtypes, and `--resume FILE...` skips cases already recorded. A case recorded
twice counts once (its last result).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import zlib
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
                dname = str(dt).replace("torch.", "")
                if zlib.crc32(f"{dev}:{C.opinfo_name(op)}:{dname}".encode()) % args.sample:
                    continue
                cap = 8 if args.capped and C.opinfo_name(op) in C.SLOW_OPS else None
                for style in args.styles:
                    if (dev, style, f"{C.opinfo_name(op)}:{dname}") in args.done:
                        continue
                    yield lambda op=op, dt=dt, dev=dev, style=style, cap=cap: C.run_case(op, dt, dev, style, cap)
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
    args.done = set()
    for p in args.resume:
        for line in open(p):
            r = json.loads(line)
            if "op" in r:
                args.done.add((r["device"], r["style"], f"{r['op']}:{r['dtype']}"))
    out = open(args.out, "a") if args.out else sys.stdout
    for i, case in enumerate(_cases(args)):
        try:
            r = dataclasses.asdict(case())
        except Exception as exc:  # a runner bug must not end a long sweep
            r = {"passed": False, "error": f"runner: {type(exc).__name__}: {exc}"[:300], "case": i}
        r["db"] = args.db
        out.write(json.dumps(r) + "\n")
        out.flush()


def table(paths) -> str:
    """Markdown table of pass rates per (db, device, dtype, style) from sweep JSONL files."""
    latest = {}
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            if "op" in r:
                latest[(r["db"], r["device"], r["style"], r["op"], r["dtype"])] = r
    stats = defaultdict(lambda: [0, 0, 0.0])
    for r in latest.values():
        s = stats[(r["db"], r["device"], r["dtype"], r["style"])]
        s[0] += r["passed"]
        s[1] += 1
        s[2] += r["seconds"]
    rows = ["| db | device | dtype | style | passed | cases | rate | seconds |", "|---|---|---|---|---|---|---|---|"]
    for (db, dev, dt, st), (ok, n, sec) in sorted(stats.items()):
        rows.append(f"| {db} | {dev} | {dt} | {st} | {ok} | {n} | {100 * ok / n:.1f}% | {sec:.0f} |")
    return "\n".join(rows)


def failures(paths) -> str:
    """One line per failed case: its xfail key ("<dev>/<style>:<name>:<dtype>") and its error."""
    lines = []
    for p in paths:
        for line in open(p):
            r = json.loads(line)
            if "op" in r and not r["passed"]:
                lines.append(f"{r['device']}/{r['style']}:{r['op']}:{r['dtype']}  {r['error']}")
    return "\n".join(sorted(set(lines)))


def main(argv=None) -> None:
    """Command line: a sweep, or `table` over JSONL files."""
    ap = argparse.ArgumentParser(prog="python -m torch_fl.tools.sweep")
    ap.add_argument("db", choices=["op", "module", "optim", "table", "failures"])
    ap.add_argument("files", nargs="*", help="JSONL files (table only)")
    ap.add_argument("--devices", nargs="+", default=["ral:0", "ral:1"])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16", "bfloat16", "int64", "bool"])
    ap.add_argument("--styles", nargs="+", default=["device", "mode"])
    ap.add_argument("--names", nargs="+", default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--capped", action="store_true", help="op only: first 8 samples of SLOW_OPS, as CI")
    ap.add_argument("--resume", nargs="*", default=[], help="op only: skip cases these JSONL files hold")
    ap.add_argument(
        "--sample",
        type=int,
        default=1,
        help="op only: run the (device, op, dtype) pairs whose crc32 is 0 mod N (a stable 1/N; "
        "N dividing 16 (e.g. 8) keeps test_opinfo's ral:1 CI sample inside it)",
    )
    args = ap.parse_args(argv)
    if args.db in ("table", "failures"):
        print(table(args.files) if args.db == "table" else failures(args.files))
    else:
        run(args)


if __name__ == "__main__":
    main()
