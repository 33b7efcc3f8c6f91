"""`ralctl certify PLUGIN_DIR`: the conformance programme a vendor runs before shipping a plugin.

The plugin is loaded from outside the package through TORCH_FL_PLUGIN_PATH (a temporary root
holding a link to PLUGIN_DIR), one section per child interpreter (certify_child.py), so a crash
in the vendor's library fails one section instead of killing the certifier, and this process
never imports torch. The certificate is written as Markdown and JSON: pass rates per section,
the vendor-tier share, every failure with a reproducer, and a verdict that is also the exit code.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

# The programme, in order (certify_child.py runs each). Defined here: this module and ralctl
# must not import torch.
SECTIONS = ("abi", "entries", "opinfo", "modules", "model", "bad_input", "oom")

SECTION_TITLES = {
    "abi": "ABI and manifest",
    "entries": "Manifest entries vs CPU (forced to the vendor tier)",
    "opinfo": "OpInfo sample (float32)",
    "modules": "nn modules and optimizers",
    "model": "Small model forward/backward/step",
    "bad_input": "Bad input (invalid pointers)",
    "oom": "Out of memory under TORCH_FL_MEMORY_LIMIT",
}
OOM_LIMIT = "64MB"
SECTION_TIMEOUT_S = 900
CERTIFIED, NOT_CERTIFIED = "CERTIFIED", "NOT CERTIFIED"


def _builtin_dir() -> Path:
    return (Path(__file__).resolve().parent.parent / "_plugins").resolve()


def child_env(plugin_dir: Path, root: Path, section: str) -> dict:
    """The environment of a section's child: only this plugin on TORCH_FL_PLUGIN_PATH, no
    routing overrides or limits from the caller's shell."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_FL_OP_")}
    for key in ("TORCH_FL_LIGHT_IMPORT", "TORCH_FL_MEMORY_LIMIT", "TORCH_FL_PLUGIN_PATH"):
        env.pop(key, None)
    if not str(plugin_dir).startswith(str(_builtin_dir()) + os.sep):
        env["TORCH_FL_PLUGIN_PATH"] = str(root)
    if section == "oom":
        env["TORCH_FL_MEMORY_LIMIT"] = OOM_LIMIT
    env["TORCH_FL_CERTIFY_PLUGIN_DIR"] = str(plugin_dir)
    # The package this process runs from, also when it is a source checkout.
    pkg_parent = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


# The variables a reproducer sets (or, when certify removed them, unsets) so it runs as
# printed in a fresh shell.
REPRO_VARS = ("TORCH_FL_PLUGIN_PATH", "TORCH_FL_MEMORY_LIMIT", "TORCH_FL_CERTIFY_PLUGIN_DIR", "PYTHONPATH")


def repro_prefix(env: dict) -> str:
    """`env -u X K=V ... /abs/python` for a section child's environment."""
    unset = [f"-u {k}" for k in REPRO_VARS if k not in env and k.startswith("TORCH_FL_")]
    parts = unset + [f"{k}={shlex.quote(env[k])}" for k in REPRO_VARS if k in env]  # env takes -u first
    return f"env {' '.join(parts)} {shlex.quote(sys.executable)}"


# Sections per child. The OOM check needs TORCH_FL_MEMORY_LIMIT from process start, so it
# gets its own; bad_input goes last in the first group, being the likeliest to crash a plugin.
GROUPS = (("abi", "entries", "opinfo", "modules", "model", "bad_input"), ("oom",))


def run_group(plugin_dir: Path, root: Path, sections: tuple, samples: int, out_dir: Path) -> list[dict]:
    """Run sections in one child; a section the child did not finish (crash, timeout) becomes
    one failed check with the command that reproduces it. The child's raw results stay in
    out_dir (sections-<first section>.json)."""
    out = str(out_dir / f"sections-{sections[0]}.json")
    Path(out).unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "torch_fl.tools.certify_child", "--plugin-dir", str(plugin_dir)]
    for s in sections:
        cmd += ["--section", s]
    cmd += ["--samples", str(samples), "--out", out]
    env = child_env(plugin_dir, root, sections[0])
    t0 = time.perf_counter()
    why = ""
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=SECTION_TIMEOUT_S)
        if proc.returncode != 0:
            why = f"child exited with {proc.returncode}: {proc.stderr.strip()[-600:]}"
    except subprocess.TimeoutExpired:
        why = f"timed out after {SECTION_TIMEOUT_S} s"
    except OSError as exc:
        why = f"{type(exc).__name__}: {exc}"
    try:
        done = json.loads(Path(out).read_text() or "[]")
    except (OSError, ValueError):
        done = []
    finished = {d["section"] for d in done}
    for section in sections:
        if section in finished:
            continue
        repro = f"{repro_prefix(env)} -m torch_fl.tools.certify_child --plugin-dir "
        repro += f"{shlex.quote(str(plugin_dir))} --section {section} --out {shlex.quote(str(out_dir / 'repro.json'))}"
        detail = (
            why
            if not done or section == sections[len(done)]
            else f"not run: the child died during {sections[len(done)]}"
        )
        check = {"name": f"{section} section ran", "state": "failed", "passed": False, "skipped": False}
        check |= {"detail": detail or "no result", "tiers": {}, "repro": repro, "kernels": []}
        done.append({"section": section, "device": None, "checks": [check]})
    order = {s: i for i, s in enumerate(sections)}
    done.sort(key=lambda d: order[d["section"]])
    if len(sections) == 1:
        done[0]["seconds"] = round(time.perf_counter() - t0, 1)
    return done


def summarize(sections: list[dict]) -> dict:
    """Pass rates per section, vendor-tier share, failures and the verdict."""
    rows, failures, tiers = [], [], {}
    for s in sections:
        checks = s["checks"]
        run = [c for c in checks if not c["skipped"]]
        passed = sum(c["passed"] for c in run)
        rows.append(
            {
                "section": s["section"],
                "title": SECTION_TITLES[s["section"]],
                "passed": passed,
                "run": len(run),
                "skipped": len(checks) - len(run),
                "pass_rate": round(passed / len(run), 4) if run else None,
                "seconds": s.get("seconds"),
            }
        )
        for c in checks:
            for tier, n in c.get("tiers", {}).items():
                tiers[tier] = tiers.get(tier, 0) + n
            if not c["passed"] and not c["skipped"]:
                failures.append({"section": s["section"], **c})
    total_ops = sum(tiers.values())
    return {
        "sections": rows,
        "tier_calls": tiers,
        "vendor_share": round(tiers.get("vendor", 0) / total_ops, 4) if total_ops else 0.0,
        "failures": failures,
        # A partial run (--section) can fail but never certify.
        "verdict": CERTIFIED
        if not failures and all(r["run"] for r in rows) and {r["section"] for r in rows} == set(SECTIONS)
        else NOT_CERTIFIED,
    }


def _plugin_identity(sections: list[dict]) -> dict:
    abi = next((s for s in sections if s["section"] == "abi"), None)
    found = next((c for c in (abi or {}).get("checks", []) if c["name"] == "loader found the plugin"), None)
    return {"plugin": found["detail"] if found and found["passed"] else "unknown", "device": (abi or {}).get("device")}


def render_markdown(cert: dict) -> str:
    """The certificate as Markdown, for a release page."""
    s = cert["summary"]
    lines = [
        f"# RAL plugin certificate: {cert['plugin_dir_name']}",
        "",
        f"**Verdict: {s['verdict']}**",
        "",
        f"- Plugin: {cert['plugin']} (certified on {cert['device']})",
        f"- Plugin directory: `{cert['plugin_dir']}`",
        f"- torch_fl {cert['torch_fl']}, torch {cert['torch']}, Python {cert['python']}, {cert['machine']}",
        f"- Date (UTC): {cert['date']}; samples per OpInfo op: {cert['samples']}",
        f"- Vendor-tier share of op calls: {s['vendor_share']:.1%} "
        f"({', '.join(f'{t} {n}' for t, n in sorted(s['tier_calls'].items())) or 'no op calls'})",
        "",
        "| Section | Passed | Run | Not exercised | Pass rate | Seconds |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in s["sections"]:
        rate = f"{r['pass_rate']:.1%}" if r["pass_rate"] is not None else "-"
        lines.append(f"| {r['title']} | {r['passed']} | {r['run']} | {r['skipped']} | {rate} | {r['seconds']} |")
    lines += ["", "## Failures", ""]
    if not s["failures"]:
        lines.append("None.")
    for f in s["failures"]:
        lines.append(f"- **{f['section']}: {f['name']}**: {f['detail'].splitlines()[0] if f['detail'] else ''}")
        if f.get("kernels"):
            lines.append(f"  - vendor kernels that ran: {'; '.join(f['kernels'])}")
        if f.get("repro"):
            lines.append(f"  - reproduce: `{f['repro']}`")
    lines += [
        "",
        'Not exercised (state "skipped" in the JSON, each with its reason): entry checks whose',
        "inputs certify cannot build at that rank or that CPU itself refuses, and OpInfo ops",
        "missing from this torch. They count neither as passed nor as failed.",
        "",
    ]
    return "\n".join(lines)


def certify(plugin_dir: str, out_dir: str, samples: int = 4, sections=SECTIONS) -> dict:
    """Run the programme against plugin_dir and write certificate.{md,json} into out_dir."""
    pdir = Path(plugin_dir).resolve()
    if not (pdir / "manifest.json").is_file():
        raise FileNotFoundError(f"{plugin_dir}: not a plugin directory (no manifest.json)")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    # A root of its own holding only this plugin (nothing else from the caller's path), kept
    # in the output folder so that the reproducers still find it after certify returns.
    root = out / "plugin-root"
    if root.is_dir():
        shutil.rmtree(root)
    root.mkdir()
    (root / pdir.name).symlink_to(pdir, target_is_directory=True)
    results = []
    for group in GROUPS:
        chosen = tuple(s for s in group if s in sections)
        if chosen:
            results += run_group(pdir, root, chosen, samples, out)
    torch_version = next((r.get("torch") for r in results if r.get("torch")), "unknown")
    from torch_fl import __version__

    cert = {
        "plugin_dir": str(pdir),
        "plugin_dir_name": pdir.name,
        **_plugin_identity(results),
        "torch_fl": __version__,
        "torch": torch_version,
        "python": platform.python_version(),
        "machine": f"{platform.system()} {platform.machine()}",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "samples": samples,
        "summary": summarize(results),
        "sections": results,
    }
    (out / "certificate.json").write_text(json.dumps(cert, indent=2))
    (out / "certificate.md").write_text(render_markdown(cert))
    return cert
