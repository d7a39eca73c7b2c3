#!/usr/bin/env python3
"""The host header every bench/ results file starts with.

    python3 bench/hostinfo.py                    # print it
    python3 bench/hostinfo.py --prefix '# '      # as comment lines (CSV, shell logs)
    python3 bench/hostinfo.py --json             # as one JSON object
    python3 bench/hostinfo.py --note '2-core shared VM'
    python3 bench/hostinfo.py --smoke            # checks both forms (ctest bench-smoke)

From Python (bench scripts): `import hostinfo` (bench/ is the script's own
folder, so it is on sys.path), then `hostinfo.header(note=...)` for the text
or `hostinfo.info(note=...)` for a dict.

What it records, so that a figure can be traced to the machine and the code
that produced it: the CPU model and the ISA flags that decide which kernels
OpenBLAS and the host compiler use (AVX2, FMA, AVX-512 and its bf16/VNNI
extensions, AMX), the core count the process may use, memory, whether a
hypervisor is reported, OMP_NUM_THREADS, the load average (other
processes on a shared machine), the date in UTC, and the git commit
with the tracked files that differed from it (a dirty tree means the binary
may not match the commit). STRETTO_BENCH_NOTE, or --note, adds a free-text
line (e.g. that the VM was shared).

With gpu=True (--gpu), also the NVIDIA GPUs as nvidia-smi reports them:
name, memory, compute capability, the driver's version and the CUDA version
the driver supports (a "gpu: none" line, with why, where nvidia-smi is
missing or lists none). GPU benches (bench/gpu/speed.py) add the CUDA,
cuDNN and torch versions PyTorch was built with.
"""
import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The flags that matter for this project's CPU speed, in /proc/cpuinfo spelling.
ISA_FLAGS = ["sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl",
             "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"]
MAX_DIRTY_LISTED = 20


def _cpuinfo():
    """Model name, family/model/stepping (the model name alone can be as vague as
    "AMD EPYC") and flags of the first CPU in /proc/cpuinfo."""
    fields, flags = {}, set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if not line.strip():
                    break  # the first processor only
                if key == "flags":
                    flags = set(value.split())
                elif key in ("model name", "vendor_id", "cpu family", "model", "stepping"):
                    fields[key] = value.strip()
    except OSError:
        pass
    model = fields.get("model name") or platform.processor() or platform.machine()
    ids = " ".join("%s %s" % (k, fields[k]) for k in ("cpu family", "model", "stepping")
                   if k in fields)
    if ids:
        model += " (%s%s)" % (fields["vendor_id"] + " " if "vendor_id" in fields else "", ids)
    return model, flags


def _mem_total_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return round(int(line.split()[1]) / 2**20, 1)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _git(*args):
    try:
        r = subprocess.run(["git", "-C", ROOT] + list(args), capture_output=True, text=True,
                           timeout=30)
        return r.stdout if r.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def loadavg():
    """The 1-, 5- and 15-minute load averages (other processes on a shared
    machine show up here), or None."""
    try:
        return tuple(float(x) for x in open("/proc/loadavg").read().split()[:3])
    except (OSError, ValueError):
        return None


def gpu_info():
    """{"gpus": [{name, memory_mib, compute_cap, driver}], "cuda": the
    driver's CUDA version} from nvidia-smi, or {"gpus": [], "why": ...}."""
    def smi(*args):
        r = subprocess.run(["nvidia-smi"] + list(args), capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            raise OSError((r.stdout + r.stderr).strip().splitlines()[-1:] or "exit %d" % r.returncode)
        return r.stdout
    try:
        try:
            rows = smi("--query-gpu=name,memory.total,compute_cap,driver_version",
                       "--format=csv,noheader,nounits")
        except OSError:  # older drivers have no compute_cap
            rows = smi("--query-gpu=name,memory.total,driver_version", "--format=csv,noheader,nounits")
        gpus = []
        for line in rows.strip().splitlines():
            f = [x.strip() for x in line.split(",")]
            g = {"name": f[0], "memory_mib": f[1], "driver": f[-1]}
            if len(f) == 4:
                g["compute_cap"] = f[2]
            gpus.append(g)
        out = {"gpus": gpus}
        m = re.search(r"CUDA Version:\s*([0-9.]+)", smi())
        out["cuda"] = m.group(1) if m else None
        if not gpus:
            out["why"] = "nvidia-smi lists no GPU"
        return out
    except FileNotFoundError:
        return {"gpus": [], "why": "no nvidia-smi"}
    except (OSError, subprocess.SubprocessError, IndexError) as e:
        return {"gpus": [], "why": "nvidia-smi failed: %s" % e}


def gpu_line(g):
    if not g.get("gpus"):
        return "gpu: none (%s)" % g.get("why", "unknown")
    parts = []
    for x in g["gpus"]:
        parts.append("%s (%s MiB%s)" % (x["name"], x["memory_mib"],
                                        ", compute capability %s" % x["compute_cap"]
                                        if x.get("compute_cap") else ""))
    return "gpu: %s; driver %s, CUDA %s (the driver's)" % (
        ", ".join(parts) if len(set(parts)) > 1 else "%d x %s" % (len(parts), parts[0]),
        g["gpus"][0]["driver"], g.get("cuda") or "unknown")


def info(note=None, gpu=False):
    model, flags = _cpuinfo()
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    commit = (_git("rev-parse", "HEAD") or "").strip() or None
    status = _git("status", "--porcelain", "--untracked-files=no")
    dirty = None if status is None else [l[3:] for l in status.splitlines() if l.strip()]
    note = note or os.environ.get("STRETTO_BENCH_NOTE") or None
    out = {
        "cpu": model,
        "isa": {f: f in flags for f in ISA_FLAGS},
        "hypervisor": "hypervisor" in flags,
        "cores": usable,
        "cpu_count": os.cpu_count(),
        "mem_gib": _mem_total_gib(),
        "kernel": platform.system() + " " + platform.release(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "loadavg": loadavg(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "commit": commit,
        "dirty": dirty,
        "note": note,
    }
    if gpu:
        out["gpu"] = gpu_info()
    return out


def header(note=None, prefix="", command=None, gpu=False):
    """The header as text lines (each starting with `prefix`), ending in a newline;
    gpu=True adds the GPU line."""
    i = info(note, gpu)
    has = [f for f, v in i["isa"].items() if v]
    lacks = [f for f, v in i["isa"].items() if not v]
    lines = [
        "host: %s" % i["cpu"],
        "isa: %s%s" % (" ".join(has) or "(none of the listed)",
                       ("; not: " + " ".join(lacks)) if lacks else ""),
        "cores: %s usable (%s online)%s; memory %s GiB; %s" % (
            i["cores"], i["cpu_count"],
            ", virtual machine (hypervisor flag)" if i["hypervisor"] else "",
            i["mem_gib"], i["kernel"]),
        "OMP_NUM_THREADS: %s; load average at start: %s" % (
            i["omp_num_threads"] or "unset",
            " ".join("%.2f" % x for x in i["loadavg"]) if i["loadavg"] else "unknown"),
        "date: %s" % i["date_utc"],
    ]
    if gpu:
        lines.insert(3, gpu_line(i["gpu"]))
    if i["commit"] is None:
        lines.append("commit: unknown (not a git checkout)")
    elif not i["dirty"]:
        lines.append("commit: %s (clean tree)" % i["commit"])
    else:
        shown = i["dirty"][:MAX_DIRTY_LISTED]
        more = len(i["dirty"]) - len(shown)
        lines.append("commit: %s + uncommitted changes to %d tracked file(s): %s%s" % (
            i["commit"], len(i["dirty"]), " ".join(shown),
            " (+%d more)" % more if more > 0 else ""))
    if command:
        lines.append("command: %s" % command)
    if i["note"]:
        lines.append("note: %s" % i["note"])
    return "".join(prefix + l + "\n" for l in lines)


def smoke():
    """The header as the bench scripts use it; 1 when a field a results file
    relies on is missing."""
    text = header(note="smoke", prefix="# ", command="python3 bench/hostinfo.py --smoke", gpu=True)
    sys.stdout.write(text)
    d = json.loads(json.dumps(info("smoke", gpu=True)))
    print(json.dumps(d, indent=2))
    bad = [k for k in ("cpu", "cores", "date_utc", "commit", "gpu") if not d.get(k)]
    bad += [l for l in ("# host: ", "# isa: ", "# cores: ", "# gpu: ", "# date: ", "# commit: ",
                        "# command: ", "# note: smoke") if l not in text]
    print("FAILED: missing %s" % ", ".join(bad) if bad else "ok: header and JSON complete")
    return 1 if bad else 0


def main():
    p = argparse.ArgumentParser(description="Print the host header for a results file.")
    p.add_argument("--prefix", default="", help="put this before every line (e.g. '# ')")
    p.add_argument("--note", help="a free-text note line (default: $STRETTO_BENCH_NOTE)")
    p.add_argument("--command", help="the command that produced the results")
    p.add_argument("--json", action="store_true", help="one JSON object instead of text")
    p.add_argument("--gpu", action="store_true",
                   help="also the NVIDIA GPUs, driver and CUDA version (nvidia-smi)")
    p.add_argument("--smoke", action="store_true",
                   help="print both forms and check that they name the CPU, cores, date and "
                        "commit (exit 1 otherwise)")
    a = p.parse_args()
    if a.smoke:
        return smoke()
    if a.json:
        d = info(a.note, a.gpu)
        if a.command:
            d["command"] = a.command
        json.dump(d, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(header(a.note, a.prefix, a.command, a.gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())
