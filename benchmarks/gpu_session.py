"""The GPU runbook of the networks half: everything to measure on a GPU, in parts of under ten minutes each.

    PYTHONPATH=. python3 benchmarks/gpu_session.py vit --out $OUT         # (a) paper ViT at two init scales
    PYTHONPATH=. python3 benchmarks/gpu_session.py bench-vit --out $OUT   # (b) ViT throughput, JAX and timm
    PYTHONPATH=. python3 benchmarks/gpu_session.py bench-gpt --out $OUT   # (b) GPT-2 small throughput, JAX and HF
    PYTHONPATH=. python3 benchmarks/gpu_session.py inrank --out $OUT      # (c) InRank-Efficient vs full rank
    python3 benchmarks/gpu_session.py all --smoke --out /tmp/smoke        # every part, tiny configs (CPU: minutes)

Parts:

- ``vit``: ``gradflow vit --config paper --init-scale 1 0.1``: the paper ViT (paper appendix B: depth 6, 8 heads, d_emb and
  MLP 512, head dim 128, patch 4) on the embedded digits upsampled to 32×32 (1,437 training images), with the
  paper's recipe ``vit-cifar`` (Adam 1e-4, batch 512, 15 of 500 epochs warm-up then cosine: 1,000 steps, about
  3.4 TFLOP each), 30 spectra measurements per run, the figures and ``report.md``.
- ``bench-vit``: ``bench_vit.py`` (paper ViT, batch 512, bf16) and ``bench-gpt``: ``bench_gpt.py`` (GPT-2 small,
  context 1024, batch 16, remat on; full rank, InRank phase, InRank-Efficient), each JAX row with attention
  ``auto`` (cuDNN's fused kernel where it accepts the shapes) and ``xla``, and the PyTorch row.
- ``inrank``: ``gradflow inrank --config gpt2-small --modes full inrank-efficient`` on the embedded text (byte
  vocabulary), batch 16, 1,000 steps, the switch to fixed rank after 250: time per step and per rank check, ranks
  through training, memory (the corpus is small: its perplexities only compare the two modes).

Every command runs as a subprocess (the GPU's memory is free for each) under the call's time budget (``--budget``,
540 s for all the parts named: past it the running command is interrupted, the parts left are not started, and
their ``.md`` says so). Runs live in ``--work`` (default
``runs/gpu_session``, ignored by git and kept by a lent machine between calls while it is warm): calling an
interrupted part again resumes it from its checkpoints, and a finished part only reloads its results. Part ``P``
leaves two files in ``--out``: ``P.md`` (status, times, its tables and report, the end of its log) and
``P.tar.gz`` (log, reports, tables, figures, metrics and spectra; no checkpoints).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shlex
import signal
import subprocess
import sys
import tarfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
PARTS = ("vit", "bench-vit", "bench-gpt", "inrank")
_KEEP = (".md", ".json", ".jsonl", ".png", ".npz", ".log")


def commands(part: str, work: pathlib.Path, smoke: bool) -> list[list[str]]:
    """The commands of ``part``; ``smoke``: the same code paths on tiny configs."""
    gradflow, py = [sys.executable, "-m", "gradflow"], sys.executable
    if part == "vit":
        size = ["--config", "tiny", "--steps", "4"] if smoke else ["--config", "paper", "--checkpoint-every", "250"]
        return [
            gradflow
            + ["vit", *size, "--init-scale", "1", "0.1", "--out", str(work / part), "--resume", "--no-progress"]
        ]
    if part in ("bench-vit", "bench-gpt"):
        script = HERE / f"bench_{part[6:]}.py"
        size = (
            ["--config", "tiny" if part == "bench-vit" else "gpt2-tiny", "--steps", "2", "--warmup", "1"]
            if smoke
            else []
        )
        remat = ["--remat", "on"] if part == "bench-gpt" else []
        return [
            [py, str(script), *size, *remat, "--json", str(work / f"{part}.json"), "--record", str(work / f"{part}.md")]
        ]
    size = (
        "--config gpt2-tiny --steps 6 --batch-size 8 --buffer 4 --check-every 2 --efficient-after 4"
        if smoke
        else "--config gpt2-small --steps 1000 --batch-size 16 --efficient-after 250 --checkpoint-every 250"
    ).split()
    return [gradflow + ["inrank", *size, "--modes", "full", "inrank-efficient", "--out", str(work / part), "--resume"]]


def results(part: str, work: pathlib.Path) -> list[pathlib.Path]:
    """The result files of ``part`` (what its ``.md`` shows; also the mark of a finished bench part)."""
    return {
        "vit": [work / "vit" / "report.md"],
        "bench-vit": [work / "bench-vit.md"],
        "bench-gpt": [work / "bench-gpt.md"],
        "inrank": [work / "inrank" / "comparison.md"],
    }[part]


def run(command: list[str], log: pathlib.Path, deadline: float) -> str:
    """Run ``command`` with its output appended to ``log``; interrupt it (SIGINT, then kill) at ``deadline``."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]),
        "PYTHONUNBUFFERED": "1",
    }
    with open(log, "a") as f:
        f.write(f"\n$ {shlex.join(command)}\n")
        f.flush()
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)  # gradflow keeps what it checkpointed
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return "interrupted at the time budget: call the part again to resume"
    return "ok" if code == 0 else f"failed (exit status {code})"


def gpu_name() -> str:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return "no GPU (nvidia-smi not found)"
    return out.stdout.strip() or "no GPU (nvidia-smi printed nothing)"


def run_part(part: str, *, out: pathlib.Path, work: pathlib.Path, smoke: bool, deadline: float) -> bool:
    """Run ``part`` (interrupted at ``deadline``), then write ``out/part.md`` and ``out/part.tar.gz``; True if every
    command ended well."""
    log = work / f"{part}.log"
    done = all(p.exists() for p in results(part, work))
    lines = [
        f"# gpu_session: {part}{' (smoke)' if smoke else ''}",
        "",
        f"- GPU: {gpu_name()}",
        f"- python: {sys.executable} {sys.version.split()[0]}",
        f"- work folder: {work}",
    ]
    ok = True
    for command in commands(part, work, smoke):
        t0 = time.monotonic()
        if done and part.startswith("bench"):
            status = "already done (delete the part's .json and .md in the work folder to re-run)"
        elif time.monotonic() > deadline - 30:
            status = "not started: the time budget is spent; call the part again"
        else:
            status = run(command, log, deadline)
        ok = ok and status.startswith(("ok", "already"))
        lines.append(f"- `{shlex.join(command)}`: **{status}** ({time.monotonic() - t0:.0f} s)")
    for path in results(part, work):
        lines += ["", f"## {path.relative_to(work)}", "", path.read_text() if path.exists() else "(not written)"]
    tail = log.read_text().splitlines()[-60:] if log.exists() else []
    lines += ["", "## end of the log", "", "```text", *tail, "```", ""]
    (out / f"{part}.md").write_text("\n".join(lines))
    print("\n".join(lines))
    with tarfile.open(out / f"{part}.tar.gz", "w:gz") as tar:
        for path in sorted(work.rglob("*")):
            name = path.relative_to(work)
            mine = name.parts[0] == part or name.name.startswith(f"{part}.")
            if mine and path.is_file() and path.suffix in _KEEP and "checkpoint" not in name.parts:
                tar.add(path, arcname=str(name))
    return ok


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("parts", nargs="+", choices=PARTS + ("all",), help="what to run (all: every part, in order)")
    p.add_argument("--out", required=True, help="folder for the results (on a lent GPU machine: $OUT)")
    p.add_argument("--work", default=str(ROOT / "runs" / "gpu_session"), help="folder for the runs and checkpoints")
    p.add_argument("--smoke", action="store_true", help="tiny configs: the same code paths in minutes on a CPU")
    p.add_argument(
        "--budget",
        type=float,
        default=540.0,
        help="seconds for the whole call (all its parts) before the running command is interrupted",
    )
    args = p.parse_args(argv)
    out, work = pathlib.Path(args.out), pathlib.Path(args.work) / ("smoke" if args.smoke else "full")
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    parts = PARTS if "all" in args.parts else tuple(dict.fromkeys(args.parts))
    ok, deadline = True, time.monotonic() + args.budget
    for part in parts:
        t0 = time.monotonic()
        good = run_part(part, out=out, work=work, smoke=args.smoke, deadline=deadline)
        print(f"{part}: {'ok' if good else 'NOT OK'} in {time.monotonic() - t0:.0f} s -> {out / (part + '.md')}")
        ok = ok and good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
