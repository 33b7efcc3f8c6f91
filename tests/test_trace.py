"""The unified trace: recording (context manager and `ral-trace run`), the Chrome trace format,
crash resilience, the terminal/JSON/HTML reports, and clear errors for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

import torch_fl
from torch_fl.device import memory, sync
from torch_fl.dispatch import entry as dispatch
from torch_fl.tools import raltrace
from torch_fl.tools.output import OK, PROBLEM
from torch_fl.tools.trace.analysis import summarize
from torch_fl.tools.trace.load import load_trace
from torch_fl.tools.trace.report_html import render_html

REPO = Path(__file__).resolve().parent.parent
MIB = 1 << 20


def write_known_trace(path: Path) -> Path:
    """A hand-made trace with round figures: mm 60%, gelu (cpu) 30%, add (decomp) 10%; one leak."""
    args = {"shapes": [[64, 64], [64, 64]], "dtypes": ["float32", "float32"]}

    def op(name, tier, pid, ts, dur):
        return {"ph": "X", "cat": "ral.op", "name": name, "pid": pid, "tid": 0, "ts": ts, "dur": dur,
                "args": {"tier": tier, **args}}  # fmt: skip

    def device(pid, label, vendor):
        return [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": label}},
                {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": vendor}}]  # fmt: skip

    def memory(kind, ts, ptr, nbytes, total):
        extra = {"stack": 0} if kind == "alloc" else {}
        return [{"ph": "i", "s": "t", "cat": "ral.alloc", "name": kind, "pid": 0, "tid": 1000000, "ts": ts,
                 "args": {"ptr": ptr, "bytes": nbytes, **extra}},
                {"ph": "C", "cat": "ral.memory", "name": "allocated bytes", "pid": 0, "ts": ts,
                 "args": {"allocated": total}}]  # fmt: skip

    events = device(0, "ral:0 Host CPU", "torch_fl") + device(1, "ral:1 Portable OpenCL", "pocl")
    events.append(
        {"ph": "C", "cat": "ral.memory", "name": "allocated bytes", "pid": 0, "ts": 0, "args": {"allocated": 0}}
    )
    events += memory("alloc", 50, "0x10", MIB, MIB) + memory("alloc", 300, "0x20", 2 * MIB, 3 * MIB)
    events += memory("free", 900, "0x20", 2 * MIB, MIB)
    events.append({"ph": "i", "s": "t", "cat": "ral.sync", "name": "sync", "pid": 0, "tid": 0, "ts": 950})
    events += [op("aten::mm.default", "vendor", 0, 100 + 200 * i, 200) for i in range(3)]
    events += [op("aten::gelu.default", "cpu", 0, 700 + 150 * i, 150) for i in range(2)]
    events.append(op("aten::add.Tensor", "decomp", 1, 100, 100))
    summary = {
        "format": 1,
        "complete": True,
        "exit_error": None,
        "devices": [
            {"pid": 0, "label": "ral:0 Host CPU", "vendor": "torch_fl"},
            {"pid": 1, "label": "ral:1 Portable OpenCL", "vendor": "pocl"},
        ],
        "stacks": [["model.py:12 in forward", "train.py:40 in <module>"]],
        "live": [{"device": 0, "ptr": "0x10", "bytes": MIB, "ts": 50, "stack": 0}],
    }
    path.write_text(json.dumps({"traceEvents": events, "torch_fl": summary}))
    return path


def _hooks_empty() -> bool:
    return not (dispatch.OBSERVERS or memory.ALLOC_OBSERVERS or sync.SYNC_OBSERVERS)


def test_context_manager_records_ops_allocations_and_syncs(dev, tmp_path):
    path = tmp_path / "t.json"
    x = torch.randn(8, 16, device=dev)
    with torch_fl.trace(path):
        kept = x + x
        gone = kept * 2
        del gone
        total = torch.mm(kept, kept.T).sum()
        torch.ral.synchronize()
        total = total.item()
    assert _hooks_empty()
    doc = json.loads(path.read_text())  # plain json: what Perfetto and chrome://tracing load
    events = doc["traceEvents"]
    ops = [e for e in events if e.get("cat") == "ral.op"]
    add = next(e for e in ops if e["name"] == "aten::add.Tensor")
    assert add["ph"] == "X" and add["pid"] == 0 and add["tid"] == 0 and add["dur"] >= 0
    assert add["args"]["shapes"] == [[8, 16], [8, 16]] and add["args"]["dtypes"] == ["float32", "float32"]
    assert {e["args"]["tier"] for e in ops} <= {"vendor", "decomp", "jit", "cpu"}
    names = {e["name"] for e in ops}
    assert {"aten::add.Tensor", "aten::mul.Tensor", "aten::mm"} <= names | {n + ".default" for n in names}
    meta = [e for e in events if e["ph"] == "M" and e["name"] == "process_name"]
    assert meta[0]["args"]["name"].startswith("ral:0 ")
    allocs = [e for e in events if e.get("cat") == "ral.alloc"]
    assert {"alloc", "free"} <= {e["name"] for e in allocs}
    assert any(e["ph"] == "C" and e.get("cat") == "ral.memory" for e in events)
    assert any(e.get("cat") == "ral.sync" and e["ph"] == "i" for e in events)
    summary = doc["torch_fl"]
    assert summary["complete"] is True and summary["exit_error"] is None
    stacks = summary["stacks"]
    here = [s for s in stacks if any("test_trace.py" in f and "test_context_manager" in f for f in s)]
    assert here, stacks
    live_ptrs = {b["ptr"] for b in summary["live"]}
    kept_ptr = hex(kept._buf.ptr)
    assert kept_ptr in live_ptrs  # still referenced when the trace ended
    assert total == pytest.approx(torch.mm(kept.cpu(), kept.cpu().T).sum().item(), rel=1e-4)


def test_exception_is_recorded_and_hooks_detached(dev, tmp_path):
    path = tmp_path / "t.json"
    with pytest.raises(ValueError), torch_fl.trace(path):
        torch.ones(4, device=dev) + 1
        raise ValueError("boom")
    assert _hooks_empty()
    assert json.loads(path.read_text())["torch_fl"]["exit_error"] == "ValueError: boom"


def test_traces_do_not_nest(dev, tmp_path):
    with torch_fl.trace(tmp_path / "a.json"), pytest.raises(RuntimeError, match="already recording"):
        with torch_fl.trace(tmp_path / "b.json"):
            pass
    assert _hooks_empty()


def _ral_trace(tmp_path: Path, *args: str, script: str = "") -> subprocess.CompletedProcess:
    """`ral-trace run ... -- python script.py` from a torch-free parent."""
    (tmp_path / "script.py").write_text(textwrap.dedent(script))
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, "-m", "torch_fl.tools.raltrace", "run", *args, "--", sys.executable, "script.py"]
    return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)


SCRIPT = """
    import os, torch, torch_fl
    assert "TORCH_FL_TRACE" not in os.environ
    x = torch.randn(32, 32, device="ral:0")
    for _ in range(5):
        x = torch.tanh(x @ x) + x
    print(float(x.sum()))
"""


def test_ral_trace_run_traces_a_child_process(dev, tmp_path):
    res = _ral_trace(tmp_path, "-o", "run.json", "--html", "run.html", script=SCRIPT)
    assert res.returncode == 0, res.stderr
    s = summarize(load_trace(tmp_path / "run.json"))
    assert s.complete and s.exit_error is None
    assert {"aten::tanh", "aten::add.Tensor"} <= {r.name for r in s.by_op}
    assert "aten::tanh" in (tmp_path / "run.html").read_text()
    assert '"ral:0 ' in (tmp_path / "run.json").read_text()  # the device's track is named


def test_tracing_a_cpu_script_loads_no_plugin(tmp_path):
    # Plugins load at the first device use (lazy init), traced or not.
    script = """
        import torch, torch_fl
        print(float(torch.ones(3).sum()))
        assert "libral_" not in open("/proc/self/maps").read(), "tracing loaded a plugin"
    """
    res = _ral_trace(tmp_path, "-o", "cpu.json", script=script)
    assert res.returncode == 0, res.stderr
    assert summarize(load_trace(tmp_path / "cpu.json")).complete


def test_crashing_script_leaves_a_readable_trace(dev, tmp_path):
    res = _ral_trace(tmp_path, "-o", "crash.json", script=SCRIPT + "    raise RuntimeError('the model diverged')\n")
    assert res.returncode == 1 and "the model diverged" in res.stderr
    s = summarize(load_trace(tmp_path / "crash.json"))
    assert s.exit_error == "RuntimeError: the model diverged"
    assert any(r.name == "aten::tanh" for r in s.by_op)


def test_killed_script_leaves_the_events_flushed_so_far(dev, tmp_path):
    # os._exit skips atexit, like a segfault or SIGKILL: only the periodic flushes remain.
    res = _ral_trace(tmp_path, "-o", "killed.json", "--flush-every", "8", script=SCRIPT + "    os._exit(3)\n")
    assert res.returncode == 3
    s = summarize(load_trace(tmp_path / "killed.json"))
    assert not s.complete and len(s.ops) >= 8
    html = render_html(s)
    assert "trace is incomplete" in html


def test_run_without_torch_fl_records_nothing(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch_fl.tools.raltrace",
            "run",
            "-o",
            "none.json",
            "--",
            sys.executable,
            "-c",
            "print(1)",
        ],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == PROBLEM and "never imported torch_fl" in res.stderr
    assert not (tmp_path / "none.json").exists()


def test_summary_of_known_trace(tmp_path):
    s = summarize(load_trace(write_known_trace(tmp_path / "k.json")))
    assert [(r.name, r.tier, r.calls) for r in s.by_op] == [
        ("aten::mm.default", "vendor", 3),
        ("aten::gelu.default", "cpu", 2),
        ("aten::add.Tensor", "decomp", 1),
    ]
    assert [round(r.share, 3) for r in s.by_op] == [0.6, 0.3, 0.1]
    assert {r.name: round(r.share, 3) for r in s.by_tier} == {"vendor": 0.6, "cpu": 0.3, "decomp": 0.1}
    assert [r.name for r in s.fallbacks] == ["aten::gelu.default"] and s.fallback_us == 300
    assert s.devices[0].peak_bytes == 3 * MIB and s.devices[0].syncs == 1
    assert s.devices[1].vendor == "pocl"
    assert s.leaks[0].bytes == MIB and s.leaks[0].stack[0] == "model.py:12 in forward"


def test_report_prints_hotspots_and_json(tmp_path):
    path = write_known_trace(tmp_path / "k.json")
    runner = CliRunner()
    res = runner.invoke(raltrace.cli, ["report", str(path)])
    assert res.exit_code == OK, res.output
    assert "aten::mm.default" in res.output and "60.0%" in res.output and "30.0%" in res.output
    res = runner.invoke(raltrace.cli, ["report", str(path), "--json"])
    doc = json.loads(res.output)
    assert doc["by_op"][0]["name"] == "aten::mm.default" and doc["fallbacks"][0]["name"] == "aten::gelu.default"


def test_html_report_is_self_contained(tmp_path):
    path = write_known_trace(tmp_path / "k.json")
    out = tmp_path / "r.html"
    res = CliRunner().invoke(raltrace.cli, ["report", str(path), "--html", str(out)])
    assert res.exit_code == OK, res.output
    html = out.read_text()
    for needle in ("<script src", "<link", "@import", "url(", "fetch("):
        assert needle not in html
    for needle in ("aten::mm.default", "60.0%", "model.py:12 in forward", "ral:1 Portable OpenCL", "3.00 MiB"):
        assert needle in html


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read"),
        ("", "the file is empty"),
        ('{"traceEvents": [{"ph": "X", "name": "a"', "truncated"),
        ('{"name": "my-package", "version": "1.0"}', "not a Chrome trace"),
        (
            '{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1, "tid": 1}]}',
            "not one torch_fl wrote",
        ),
        ("[1, 2", "truncated"),
        ("{oops}", "not valid JSON"),
    ],
)
def test_report_rejects_bad_input_clearly(tmp_path, content, message):
    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    res = CliRunner().invoke(raltrace.cli, ["report", str(path)])
    assert res.exit_code == PROBLEM
    assert message in res.output and "Traceback" not in res.output


def test_truncated_real_trace_is_a_clear_error(tmp_path):
    path = write_known_trace(tmp_path / "k.json")
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    res = CliRunner().invoke(raltrace.cli, ["report", str(path), "--html", str(tmp_path / "r.html")])
    assert res.exit_code == PROBLEM and "truncated" in res.output
    assert not (tmp_path / "r.html").exists()
