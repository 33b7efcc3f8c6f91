"""`python -m torch_fl.tools.sweep`: a sweep writes one JSON line per case, `table` and
`failures` read them back."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import REPO


def _sweep(*args):
    return subprocess.run(
        [sys.executable, "-m", "torch_fl.tools.sweep", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_optim_sweep_table_and_failures(tmp_path, dev):
    out = tmp_path / "optim.jsonl"
    r = _sweep("optim", "--names", "SGD", "--devices", dev, "--styles", "device", "--out", str(out))
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(row["db"] == "optim" and row["device"] == dev for row in rows)
    assert {row["op"].split(".")[-1] for row in rows} == {"forloop", "foreach", "fused"}
    # a failed case is listed by `failures` under its xfail key
    rows[0].update(passed=False, error="AssertionError: made up")
    out.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    table = _sweep("table", str(out)).stdout
    assert f"| optim | {dev} | float32 | device | {len(rows) - 1} | {len(rows)} |" in table
    fails = _sweep("failures", str(out)).stdout.splitlines()
    assert fails == [f"{dev}/device:{rows[0]['op']}:float32  AssertionError: made up"]
