#!/usr/bin/env python3
"""Multi-process runs over Gloo on loopback: the same numbers as one process,
faults, bad settings, mpirun and Slurm-style environments, two "machines" in
network namespaces.

    python3 test/dist/dist_test.py BUILD_DIR [GROUP]

GROUP is one of: equal, faults, settings, launchers, netns (default: all).
Exit 0 when every check passed, 77 when the group cannot run here (reported
skipped by ctest), 1 otherwise. Each check prints one line.
"""
import glob
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

BUILD = os.path.abspath(sys.argv[1])
GROUP = sys.argv[2] if len(sys.argv) > 2 else "all"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(BUILD, "bin", "stretto-train")
RUN = os.path.join(BUILD, "bin", "stretto-run")
TINY = os.path.join(ROOT, "examples", "gpt-tiny.toml")
WORK = tempfile.mkdtemp(prefix="stretto-dist-")
ENV = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "STRETTO_JOB_TOKEN", "STRETTO_LAUNCHER", "STRETTO_STORE_HOSTED"):
    ENV.pop(k, None)

passed, failed = 0, 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print(f"PASS {name}")
    else:
        failed += 1
        print(f"FAIL {name}: {detail}")
    sys.stdout.flush()


def run(args, timeout=180, env=None, **kw):
    p = subprocess.run(args, cwd=WORK, env=env or ENV, timeout=timeout, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    return p.returncode, p.stdout


def plan(name, *overrides):
    path = os.path.join(WORK, name + ".plan")
    if not os.path.exists(path):
        rc, out = run([TRAIN, TINY, "train.warmup_steps=2", "train.eval_interval=1000", *overrides,
                       "--save-plan", path, "--quiet"])
        if rc != 0:
            raise RuntimeError(out)
    return path


def tensors(path):
    """safetensors -> {name: raw bytes}: compares bit for bit."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


def max_relative_gap(a, b):
    """Largest |x-y| / max(|y|, 1e-3) over f32 tensors with the same names."""
    if a.keys() != b.keys():
        return float("inf")
    worst = 0.0
    for k in a:
        xs = struct.unpack(f"<{len(a[k]) // 4}f", a[k])
        ys = struct.unpack(f"<{len(b[k]) // 4}f", b[k])
        for x, y in zip(xs, ys):
            worst = max(worst, abs(x - y) / max(abs(y), 1e-3))
    return worst


def losses(out_dir):
    with open(os.path.join(out_dir, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, filter(str.strip, f)) if "loss" in r]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def out(name):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    return d


# --- the same numbers as one process ----------------------------------------

def group_equal():
    # Synchronous data parallelism: 2 ranks of batch 16 == one process with
    # batch 32 as 2 micro-batches of 16 (a+b == b+a: bit for bit).
    dp = plan("dp", "train.steps=12")
    one = plan("one-mb2", "train.steps=12", "model.batch=32", "train.micro_batches=2")
    a, b = out("dp2"), out("dp1")
    rc1, o1 = run([RUN, dp, "--nproc", "2", "--out", a, "--timeout", "60"])
    rc2, o2 = run([RUN, one, "--out", b, "--quiet"])
    check("data-parallel run exits 0", rc1 == 0 and rc2 == 0, o1[-2000:] + o2[-2000:])
    if rc1 == 0 and rc2 == 0:
        check("2-rank data parallelism has the losses of 1 process with the doubled batch",
              losses(a) == losses(b), f"{losses(a)} vs {losses(b)}")
        check("... and bit-identical final parameters",
              tensors(a + "/model.safetensors") == tensors(b + "/model.safetensors"))
        check("only rank 0 prints progress",
              "[rank 0] step" in o1 and "[rank 1] step" not in o1, o1[-1500:])

    # A 2-stage PipeDream-2BW + delay-EF pipeline on 2 processes == threads,
    # clipping by the global gradient norm (the stages all-reduce their
    # partial sums over Gloo; 0.5 is below the norm, so it clips).
    pp = plan("pipe", "train.steps=16", "train.stages=2", "train.micro_batches=4",
              "train.sync=2bw", "train.ef_lambda=0.5", "train.grad_clip=0.5")
    a, b = out("pp2"), out("pp1")
    rc1, o1 = run([RUN, pp, "--nproc", "2", "--out", a, "--timeout", "60"])
    rc2, o2 = run([RUN, pp, "--out", b, "--quiet"])
    check("pipelined run exits 0", rc1 == 0 and rc2 == 0, o1[-2000:] + o2[-2000:])
    if rc1 == 0 and rc2 == 0:
        check("2 processes give the in-process pipeline's losses", losses(a) == losses(b))
        check("... and its final parameters, bit for bit",
              tensors(a + "/model.safetensors") == tensors(b + "/model.safetensors"))
        check("the last stage reports", "[rank 1] done:" in o1 and "on 2 processes" in o1,
              o1[-1500:])

    # Gossip (one-peer) with 4 replicas on 4 processes == 4 replica threads
    # (runGossipRank on an in-process group): the same exchanges in the same
    # order, compared bit for bit. DiLoCo mixes through one f64 all-reduce,
    # which Gloo may sum in another order than the in-process group's rank
    # order, so its parameters are checked to 1e-4 relative after 4 rounds
    # (the measured gap is printed).
    for name, extra in (("gossip", ["train.sync=gossip", "train.topology=one-peer"]),
                        ("diloco", ["train.sync=diloco"])):
        g = plan(name + "4", "train.replicas=4", "train.local_steps=3", "train.steps=12",
                 "train.eval_interval=6", *extra)
        a, b = out(name + "-4p"), out(name + "-thr")
        rc1, o1 = run([RUN, g, "--nproc", "4", "--out", a, "--timeout", "60"])
        rc2, o2 = run([RUN, g, "--out", b, "--quiet"])
        check(f"{name}: 4 processes train", rc1 == 0 and rc2 == 0, o1[-2000:] + o2[-2000:])
        if rc1 == 0 and rc2 == 0:
            la, lb = losses(a), losses(b)
            tol = 0.0 if name == "gossip" else 1e-5
            check(f"{name}: the round losses of the in-process run (to {tol:g})",
                  len(la) == len(lb) and all(abs(x - y) <= tol * abs(y) for x, y in zip(la, lb)),
                  f"{la} vs {lb}")
            ta, tb = tensors(a + "/model.safetensors"), tensors(b + "/model.safetensors")
            if name == "gossip":
                check(f"{name}: the in-process mean model, bit for bit", ta == tb)
            else:
                gap = max_relative_gap(ta, tb)
                print(f"     {name}: largest relative parameter gap {gap:.2e}")
                check(f"{name}: the in-process mean model to 1e-4 relative", gap <= 1e-4,
                      f"{gap:.3e}")

    # Execution choices keep the data: gpt-tiny at batch 32 reads the same
    # rows per step as 1, 2 or 4 micro-batches, as 2 data-parallel
    # processes of 16 and as 2 pipeline stages; the losses agree to the
    # summation order (step 1: 1e-6 relative; 30 steps: 1e-5).
    def tiny(name, *extra):
        d = out(name)
        rc, o = run([TRAIN, TINY, "model.batch=32", "train.steps=30", "train.eval_interval=1000",
                     *extra, "--out", d, "--quiet", "--timeout", "60"])
        return (losses(d) if rc == 0 else None), o
    base, o = tiny("order-one")
    check("gpt-tiny at batch 32 trains", base is not None, o[-2000:])
    for name, extra in (("2 micro-batches", ["train.micro_batches=2"]),
                        ("4 micro-batches", ["train.micro_batches=4"]),
                        ("--nproc 2 (16 per rank)", ["model.batch=16", "--nproc", "2"]),
                        ("2 pipeline stages x 2 micro-batches",
                         ["train.stages=2", "train.micro_batches=2"])):
        got, o = tiny("order-" + re.sub(r"[^a-z0-9]+", "-", name), *extra)
        if base is None or got is None:
            check(f"data order: {name} trains", False, o[-2000:])
            continue
        rel = [abs(x - y) / abs(y) for x, y in zip(got, base)]
        check(f"data order: {name} has the step-1 loss of one micro-batch (1e-6)",
              len(got) == 30 and rel[0] <= 1e-6, f"{got[0]!r} vs {base[0]!r}")
        check(f"data order: {name}, 30 steps to 1e-5 (largest {max(rel):.1e})",
              len(got) == 30 and max(rel) <= 1e-5, f"{got} vs {base}")

    # stretto-train --nproc compiles once and launches stretto-run ranks.
    c = out("train-dp")
    rc, o = run([TRAIN, TINY, "train.steps=4", "train.warmup_steps=2", "train.eval_interval=1000",
                 "--nproc", "2", "--out", c, "--timeout", "60"])
    check("stretto-train --nproc 2 trains", rc == 0 and os.path.exists(c + "/checkpoint.bin"),
          o[-2000:])


# --- faults --------------------------------------------------------------------

def kill_rank(launcher, index, ranks):
    """kill -9 of the launcher's rank process `index` (of `ranks`)."""
    # The rank is read from each child's environment (RANK=...): process ids
    # need not follow the order the launcher started the ranks in.
    children = subprocess.run(["pgrep", "-P", str(launcher.pid)], text=True,
                              stdout=subprocess.PIPE).stdout.split()
    if len(children) != ranks:
        return
    index %= ranks  # -1: the last rank
    for pid in children:
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if ("RANK=%d" % index).encode() in env:
            os.kill(int(pid), signal.SIGKILL)
            return


def launch(plan_path, nproc, out_dir, timeout, *extra):
    """stretto-run PLAN --nproc N in the background, output captured."""
    return subprocess.Popen([RUN, plan_path, "--nproc", str(nproc), "--out", out_dir,
                             "--timeout", str(timeout), *extra], cwd=WORK, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait_for(path, proc, limit=120):
    """Waits until a file matching `path` (a glob) exists; False when `proc`
    ended first or after `limit` seconds."""
    t0 = time.time()
    while not glob.glob(path):
        if proc.poll() is not None or time.time() - t0 > limit:
            return False
        time.sleep(0.05)
    return True


def group_faults():
    steps = 40
    pp = plan("pipe-ckpt", f"train.steps={steps}", "train.stages=2", "train.micro_batches=2",
              "train.sync=2bw", "train.ef_lambda=0.5", "train.grad_clip=0",
              "train.checkpoint_interval=10")
    ref = out("ref")
    pipe_ref = ref
    rc, o = run([RUN, pp, "--out", ref, "--quiet"])
    check("uninterrupted reference run", rc == 0, o[-1500:])

    # kill -9 of a pipeline rank: the job stops within the timeout, names
    # it, and the last checkpoint is intact.
    k = out("killed")
    log = open(os.path.join(WORK, "killed.log"), "w")
    p = subprocess.Popen([RUN, pp, "--nproc", "2", "--out", k, "--timeout", "10"], cwd=WORK,
                         env=ENV, stdout=log, stderr=subprocess.STDOUT)
    ok = wait_for(k + "/checkpoint-rank1-step*.bin", p)
    time.sleep(0.3)
    t0 = time.time()
    if ok:
        kill_rank(p, -1, 2)
    rc = p.wait(timeout=60)
    took = time.time() - t0
    log.close()
    text = open(os.path.join(WORK, "killed.log")).read()
    check("a killed pipeline rank fails the job, naming it",
          rc != 0 and re.search(r"launcher: rank \d failed \(signal 9", text) is not None,
          f"rc={rc}\n{text[-2000:]}")
    check("the surviving rank names the dead one", "exited or died" in text or
          "connection was closed" in text, text[-2000:])
    check("the job ends within the timeout", took < 15, f"{took:.1f} s")
    rc, o = run([RUN, pp, "--nproc", "2", "--out", k, "--resume", "--timeout", "60"])
    check("resuming after the kill finishes", rc == 0, o[-2000:])
    if rc == 0:
        check("... bit-identical to a run never stopped",
              tensors(k + "/model.safetensors") == tensors(ref + "/model.safetensors"))

    # Ctrl-C to the launcher: every rank stops after the same step, the last
    # stage checkpoints, and --resume continues bit for bit.
    s = out("sigint")
    p = launch(pp, 2, s, 30)
    wait_for(s + "/checkpoint-rank1-step*.bin", p)
    p.send_signal(signal.SIGINT)
    o, _ = p.communicate(timeout=60)
    check("Ctrl-C stops the job with a checkpoint (exit 130)",
          p.returncode == 130 and "interrupted at step" in o, f"rc={p.returncode}\n{o[-1500:]}")
    rc, o = run([RUN, pp, "--nproc", "2", "--out", s, "--resume", "--timeout", "60"])
    check("... and resumes bit-identically", rc == 0 and
          tensors(s + "/model.safetensors") == tensors(ref + "/model.safetensors"), o[-1500:])

    # Resuming with another layout is refused, naming both.
    rc, o = run([RUN, plan("dp-ckpt", "train.steps=6"), "--nproc", "2", "--out", out("lay"),
                 "--timeout", "60"])
    rc, o = run([RUN, plan("dp-ckpt", "train.steps=6"), "--out", os.path.join(WORK, "lay"),
                 "--resume", "--steps", "8"])
    check("resuming a 2-rank run in 1 process is refused",
          rc != 0 and "data-parallel ranks 2" in o and "data-parallel ranks 1" in o, o[-1500:])

    # Gossip: a killed replica is dropped and the others finish the run, by
    # default (no --on-peer-failure flag).
    g = plan("gossip-long", "train.sync=gossip", "train.topology=one-peer", "train.replicas=4",
             "train.local_steps=2", "train.steps=80", "train.eval_interval=1000")
    d = out("gossip-killed")
    p = launch(g, 4, d, 30)
    wait_for(d + "/metrics.jsonl", p)
    time.sleep(1.0)
    kill_rank(p, 2, 4)
    o, _ = p.communicate(timeout=300)
    rounds = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
    check("gossip: by default the survivors of a killed replica finish the run (exit 0)",
          p.returncode == 0 and len(rounds) == 40 and rounds[-1]["live"] == 3, o[-2500:])
    check("gossip: the drop is reported", "dropping replica 2" in o and
          "rank 2 failed (signal 9" in o, o[-2500:])
    d = out("gossip-stop")
    p = launch(g, 4, d, 30, "--on-peer-failure=stop")
    wait_for(d + "/metrics.jsonl", p)
    kill_rank(p, 2, 4)
    o, _ = p.communicate(timeout=120)
    check("gossip: with --on-peer-failure=stop a dead replica stops the job",
          p.returncode != 0 and "rank 2 failed (signal 9" in o, o[-2000:])

    # Gossip checkpoints: Ctrl-C stops every replica after the same round
    # with a checkpoint (every replica writes its own file); kill -9 of a replica leaves the last periodic checkpoint; either
    # way --resume on 4 processes ends bit-identical to a run never stopped
    # (here, the 4 replica threads of one process: the same code).
    g = plan("gossip-ckpt", "train.sync=gossip", "train.topology=one-peer", "train.replicas=4",
             "train.local_steps=2", "train.steps=80", "train.eval_interval=1000",
             "train.checkpoint_interval=8")
    ref = out("gossip-ckpt-ref")
    rc, o = run([RUN, g, "--out", ref, "--quiet"])
    check("gossip: an uninterrupted in-process reference", rc == 0, o[-1500:])
    d = out("gossip-sigint")
    p = launch(g, 4, d, 30)
    wait_for(d + "/metrics.jsonl", p)
    p.send_signal(signal.SIGINT)
    o, _ = p.communicate(timeout=120)
    check("gossip: Ctrl-C stops every replica with a checkpoint (exit 130)",
          p.returncode == 130 and "interrupted at round" in o and
          len(glob.glob(d + "/checkpoint-rank*-step*.bin")) == 4, f"rc={p.returncode}\n{o[-2000:]}")
    rc, o = run([RUN, g, "--nproc", "4", "--out", d, "--resume", "--timeout", "60"])
    check("gossip: ... and resumes on 4 processes bit-identically", rc == 0 and
          "resuming from" in o and
          tensors(d + "/model.safetensors") == tensors(ref + "/model.safetensors") and
          losses(d) == losses(ref), o[-2000:])
    # (--on-peer-failure=stop: the job ends at the kill, to be resumed whole.)
    d = out("gossip-kill-resume")
    p = launch(g, 4, d, 10, "--on-peer-failure=stop")
    wait_for(d + "/checkpoint-rank0-step*.bin", p)
    kill_rank(p, 2, 4)
    o, _ = p.communicate(timeout=120)
    rc, o2 = run([RUN, g, "--nproc", "4", "--out", d, "--resume", "--timeout", "60"])
    check("gossip: after kill -9 of a replica, --resume finishes bit-identically",
          p.returncode != 0 and rc == 0 and
          tensors(d + "/model.safetensors") == tensors(ref + "/model.safetensors") and
          losses(d) == losses(ref), o[-1500:] + o2[-1500:])

    # Ranks on machines without a shared file system: every rank gets its
    # own --out folder (node0, node1, ...). Each writes its checkpoint files
    # there and resumes from them alone; after kill -9 of a rank the resumed
    # run ends bit-identical to a run never stopped. Pipelines first (the
    # last stage, in the last folder, writes the model), then gossip (rank 0,
    # in node0). Gossip replicas are told to stop at a dead peer, as the
    # other modes do, so that the run stops and is resumed whole.
    def own_folders(plan_path, n, base, *extra):
        port = free_port()
        return [subprocess.Popen([RUN, plan_path, "--out", f"{base}/node{r}", "--timeout", "10",
                                  "--quiet", "--on-peer-failure=stop", *extra], cwd=WORK,
                                 env=dict(ENV, RANK=str(r), WORLD_SIZE=str(n),
                                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)),
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                for r in range(n)]
    dp = plan("dp-own", "train.steps=40", "train.checkpoint_interval=10", "train.eval_interval=1000")
    dp_ref = out("dp-own-ref")
    rc, o = run([RUN, dp, "--nproc", "2", "--out", dp_ref, "--timeout", "60", "--quiet"])
    check("data parallelism: a 2-rank reference run", rc == 0, o[-1500:])
    # (name, plan, ranks, the rank whose first checkpoint is awaited, the
    # rank that writes the model, the reference run)
    for name, pl, n, first, lead, reference in (("pipeline", pp, 2, 1, 1, pipe_ref),
                                                ("gossip", g, 4, 0, 0, ref),
                                                ("data parallelism", dp, 2, 0, 0, dp_ref)):
        base = out(name.replace(" ", "-") + "-own-folders")
        own = (lambda r: [] if r else ["checkpoint.bin"]) if name == "data parallelism" else None
        procs = own_folders(pl, n, base)
        ok = wait_for(f"{base}/node{first}/checkpoint*.bin", procs[first])
        time.sleep(0.3)
        procs[n - 1 - first].kill()
        texts = [q.communicate(timeout=120)[0] for q in procs]
        mine = [sorted(os.path.basename(f) for f in glob.glob(f"{base}/node{r}/checkpoint*"))
                for r in range(n)]
        check(f"{name} in one folder per rank: each rank wrote only its own files",
              ok and all((m == own(r)) if own else
                         (m and all(f.startswith(f"checkpoint-rank{r}-") for f in m))
                         for r, m in enumerate(mine)), f"{mine}\n" + texts[first][-1500:])
        procs = own_folders(pl, n, base, "--resume")
        texts = [q.communicate(timeout=180)[0] for q in procs]
        check(f"{name} in one folder per rank: --resume from each rank's own files finishes "
              "bit-identically",
              all(q.returncode == 0 for q in procs) and
              tensors(f"{base}/node{lead}/model.safetensors") ==
              tensors(reference + "/model.safetensors"), "\n".join(t[-1000:] for t in texts))

    # DiLoCo: a killed replica breaks the all-reduce; the survivors fall
    # back to pairwise exchanges among themselves and finish (by default).
    g = plan("diloco-long", "train.sync=diloco", "train.replicas=4", "train.local_steps=2",
             "train.steps=60", "train.eval_interval=1000")
    d = out("diloco-killed")
    p = launch(g, 4, d, 30)
    wait_for(d + "/metrics.jsonl", p)
    time.sleep(1.0)
    kill_rank(p, 2, 4)
    o, _ = p.communicate(timeout=300)
    rounds = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()]
    check("diloco: the survivors of a killed replica re-form and finish",
          p.returncode == 0 and len(rounds) == 30 and rounds[-1]["live"] == 3, o[-2500:])
    # Noticed from the closed connection, not by waiting out the timeout
    # (the run's own duration depends on the machine's load, so the
    # message, not the clock, is checked).
    drops = [l for l in o.splitlines() if "dropping replica 2" in l]
    check("diloco: ... noticing the closed connection, not waiting out the timeout",
          drops and all("exited or died" in l and "within the timeout" not in l
                        for l in drops), "\n".join(drops) or o[-2000:])

    # Data parallelism: a killed rank stops the others too.
    dp = plan("dp-long", "train.steps=400")
    d = out("dp-killed")
    p = launch(dp, 2, d, 10)
    time.sleep(4)
    kill_rank(p, 0, 2)
    o, _ = p.communicate(timeout=60)
    check("a killed data-parallel rank fails the job, naming it",
          p.returncode != 0 and "rank 0 failed (signal 9" in o, o[-1500:])


# --- bad settings ----------------------------------------------------------

def rank_env(rank, size, port, token="t0k", **extra):
    e = dict(ENV, RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1",
             MASTER_PORT=str(port), STRETTO_JOB_TOKEN=token)
    e.update({k: str(v) for k, v in extra.items()})
    return e


def start_ranks(envs, extra=()):
    p = plan("dp-small", "train.steps=3")
    return [subprocess.Popen([RUN, p, "--quiet", "--timeout", "3", *extra], cwd=WORK, env=e,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for e in envs]


def group_settings():
    port = free_port()
    procs = start_ranks([rank_env(0, 2, port), rank_env(1, 3, port)])
    outs = [p.communicate(timeout=60)[0] for p in procs]
    check("ranks that disagree on WORLD_SIZE are told so",
          any("WORLD_SIZE=3" in o and "WORLD_SIZE=2" in o for o in outs), "\n".join(outs))

    port = free_port()
    t0 = time.time()
    procs = start_ranks([rank_env(0, 3, port), rank_env(1, 3, port)])
    outs = [p.communicate(timeout=60)[0] for p in procs]
    check("a missing rank is named within the timeout",
          all(p.returncode != 0 for p in procs) and any("rank 2 of 3 did not join" in o
                                                        for o in outs)
          and time.time() - t0 < 30, "\n".join(outs))

    port = free_port()
    procs = start_ranks([rank_env(0, 2, port), rank_env(1, 2, port, token="other")])
    outs = [p.communicate(timeout=60)[0] for p in procs]
    check("a rank with the wrong job token is refused",
          any("wrong job token" in o for o in outs), "\n".join(outs))

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    port = busy.getsockname()[1]
    procs = start_ranks([rank_env(0, 2, port)])
    o = procs[0].communicate(timeout=60)[0]
    busy.close()
    check("a port in use is named", procs[0].returncode != 0 and "Address already in use" in o,
          o)

    procs = start_ranks([dict(ENV, RANK="0", WORLD_SIZE="2", MASTER_PORT="1")])
    o = procs[0].communicate(timeout=60)[0]
    check("an unreachable master is named within the timeout",
          procs[0].returncode != 0 and ("did not join" in o or "cannot reach" in o), o)

    procs = start_ranks([dict(ENV, RANK="0", WORLD_SIZE="2")])
    o = procs[0].communicate(timeout=60)[0]
    check("MASTER_PORT missing outside the launcher is named", "MASTER_PORT is not set" in o, o)

    rc, o = run([RUN, plan("dp-small", "train.steps=3"), "--nproc", "0"])
    check("--nproc 0 is refused", rc != 0 and "--nproc must be in [1, 4096], got 0" in o, o)

    g = plan("gossip3", "train.sync=gossip", "train.replicas=3", "train.local_steps=2",
             "train.steps=4")
    rc, o = run([RUN, g, "--nproc", "2", "--timeout", "20"])
    check("a 3-replica gossip plan on 2 processes is refused",
          rc != 0 and "3 gossip replicas but the run 2 ranks" in o, o[-1500:])
    g4 = plan("gossip4-small", "train.sync=gossip", "train.replicas=4", "train.local_steps=2",
              "train.steps=4")
    d = out("gossip-layout")
    rc, o = run([RUN, g4, "--out", d, "--quiet"])
    rc, o = run([RUN, g, "--out", d, "--resume"])
    check("resuming a 4-replica gossip checkpoint with 3 replicas is refused, naming both",
          rc != 0 and "a run of 4 replicas; this run has 3" in o, o[-1500:])

    pp = plan("pipe-small", "train.steps=3", "train.stages=2", "train.grad_clip=0")
    rc, o = run([RUN, pp, "--nproc", "3", "--timeout", "20"])
    check("a 2-stage plan on 3 processes is refused",
          rc != 0 and "2 pipeline stages but the run 3 ranks" in o, o[-1500:])


# --- other launchers ---------------------------------------------------------

def group_launchers():
    # stretto-train --nproc on another model: a pipeline rank picks its
    # stage's kernels (once read through a dangling reference, which gave
    # garbage kernel names on this model and not on gpt-tiny).
    wide = os.path.join(ROOT, "examples", "gpt-wide-head.toml")
    rc, o = run([TRAIN, wide, "train.stages=2", "train.steps=3", "train.eval_interval=1000",
                 "--nproc", "2", "--out", out("wide2"), "--timeout", "120"])
    check("a 2-stage gpt-wide-head pipeline on 2 processes trains",
          rc == 0 and "2 stages on 2 processes" in o, o[-1500:])

    dp = plan("dp", "train.steps=12")
    ref = os.path.join(WORK, "dp2")
    if not os.path.exists(ref + "/model.safetensors"):
        run([RUN, dp, "--nproc", "2", "--out", ref, "--timeout", "60"])
    mpirun = shutil.which("mpirun")
    if mpirun:
        m = out("mpi")
        env = dict(ENV, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        rc, o = run([mpirun, "-n", "2", "--oversubscribe", RUN, dp, "--out", m, "--timeout", "60"],
                    env=env)
        check("mpirun -n 2 trains data-parallel", rc == 0, o[-2000:])
        if rc == 0:
            check("... with the launcher's parameters",
                  tensors(m + "/model.safetensors") == tensors(ref + "/model.safetensors"))
    else:
        print("SKIP mpirun: not installed")
    # A file-store rendezvous on a shared folder (no MASTER_PORT at all).
    f = out("filestore")
    store = os.path.join(WORK, "rdzv")
    os.makedirs(store, exist_ok=True)
    procs = [subprocess.Popen([RUN, dp, "--out", f, "--timeout", "60", "--quiet",
                               "--rendezvous", "file:" + store], cwd=WORK,
                              env=dict(ENV, RANK=str(r), WORLD_SIZE="2", STRETTO_RUN_ID="run-1"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    check("--rendezvous file:DIR starts a 2-rank run without MASTER_PORT",
          all(p.returncode == 0 for p in procs), "\n".join(outs)[-2000:])
    if all(p.returncode == 0 for p in procs):
        check("... with the launcher's parameters",
              tensors(f + "/model.safetensors") == tensors(ref + "/model.safetensors"))

    # Slurm: srun sets these; here they are set by hand (no Slurm installed).
    s = out("slurm")
    port = free_port()
    procs = [subprocess.Popen([RUN, dp, "--out", s, "--timeout", "60", "--quiet"], cwd=WORK,
                              env=dict(ENV, SLURM_PROCID=str(r), SLURM_NTASKS="2",
                                       SLURM_LOCALID=str(r), SLURM_NTASKS_PER_NODE="2",
                                       SLURM_JOB_ID="4242", MASTER_PORT=str(port)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(2)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    check("Slurm variables (SLURM_PROCID, SLURM_NTASKS, SLURM_JOB_ID) start a 2-rank run",
          all(p.returncode == 0 for p in procs), "\n".join(outs)[-2000:])
    if all(p.returncode == 0 for p in procs):
        check("... with the launcher's parameters",
              tensors(s + "/model.safetensors") == tensors(ref + "/model.safetensors"))


# --- two machines: network namespaces joined by a veth pair --------------------

def sh(cmd):
    return subprocess.run(cmd, shell=True, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT)


def group_netns():
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("SKIP netns: needs root and iproute2")
        sys.exit(77)
    tag = f"st{os.getpid() % 100000}"
    a, b = f"{tag}a", f"{tag}b"
    if sh(f"ip netns add {a}").returncode != 0:
        print("SKIP netns: cannot create network namespaces here")
        sys.exit(77)
    try:
        sh(f"ip netns add {b}")
        sh(f"ip link add {tag}x type veth peer name {tag}y")
        sh(f"ip link set {tag}x netns {a}")
        sh(f"ip link set {tag}y netns {b}")
        sh(f"ip -n {a} addr add 10.231.0.1/24 dev {tag}x")
        sh(f"ip -n {b} addr add 10.231.0.2/24 dev {tag}y")
        for ns, dev in ((a, f"{tag}x"), (b, f"{tag}y")):
            sh(f"ip -n {ns} link set {dev} up")
            sh(f"ip -n {ns} link set lo up")
        dp = plan("dp", "train.steps=12")
        ref = os.path.join(WORK, "dp2")
        if not os.path.exists(ref + "/model.safetensors"):
            run([RUN, dp, "--nproc", "2", "--out", ref, "--timeout", "60"])
        n = out("nodes")
        env = dict(ENV, STRETTO_JOB_TOKEN="two-node-test")
        common = ["--nnodes", "2", "--master-addr", "10.231.0.1", "--master-port", "29631",
                  "--timeout", "60"]
        p0 = subprocess.Popen(["ip", "netns", "exec", a, RUN, dp, "--nproc", "1",
                               "--node-rank", "0", "--out", n, *common], cwd=WORK, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        p1 = subprocess.Popen(["ip", "netns", "exec", b, RUN, dp, "--nproc", "1",
                               "--node-rank", "1", "--out", n + "-b", *common], cwd=WORK,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True)
        o0 = p0.communicate(timeout=180)[0]
        o1 = p1.communicate(timeout=180)[0]
        check("--nnodes 2 across two network namespaces trains",
              p0.returncode == 0 and p1.returncode == 0, o0[-1500:] + o1[-1500:])
        if p0.returncode == 0:
            check("... with the one-node parameters",
                  tensors(n + "/model.safetensors") == tensors(ref + "/model.safetensors"))
    finally:
        sh(f"ip netns del {a}")
        sh(f"ip netns del {b}")


GROUPS = {"equal": group_equal, "faults": group_faults, "settings": group_settings,
          "launchers": group_launchers, "netns": group_netns}

try:
    for name, fn in GROUPS.items():
        if GROUP in ("all", name):
            fn()
finally:
    shutil.rmtree(WORK, ignore_errors=True)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
