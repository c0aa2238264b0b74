"""What the benchmark scripts (bench_ep.py, bench_train.py, bench_moe.py)
share: the check that there is a GPU to measure on, the commit a table
names, the routing they draw and the writing of the table."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

try:
    import torch
except ImportError:                   # check_gpu says so
    torch = None


def needs_gpu(script, why):
    """Say why nothing is measured, and exit 0: a machine without a GPU
    is not a failure of the benchmark."""
    print("%s: needs a GPU: %s; nothing measured" % (script, why), flush=True)
    sys.exit(0)


def check_gpu(script):
    """Exit through needs_gpu unless torch sees an sm_90 GPU 0 and has
    torch._grouped_mm (every baseline here is built on it)."""
    if torch is None:
        needs_gpu(script, "PyTorch is not importable here")
    if not torch.cuda.is_available():
        needs_gpu(script, "torch sees no CUDA device")
    if torch.cuda.get_device_capability(0) != (9, 0):
        needs_gpu(script, "the kernels need sm_90 (H100, H200), GPU 0 is %s"
                  % torch.cuda.get_device_name(0))
    if not hasattr(torch, "_grouped_mm"):
        needs_gpu(script, "this torch (%s) has no torch._grouped_mm"
                  % torch.__version__)


def run_quiet(cmd):
    """cmd's stdout, stripped, run in the repository; None when it fails."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def commit(override=None):
    """`override`, else this copy's HEAD and the kernels' own digest
    (bench/kernels_digest.sh; `sh bench/kernels_digest.sh REV` matches it
    to a commit): a copy of the tree on a GPU machine may carry a history
    older than its files."""
    if override:
        return override
    head = run_quiet(["git", "rev-parse", "--short", "HEAD"]) or "unknown"
    digest = run_quiet(["sh", "bench/kernels_digest.sh"])
    return "%s (kernels digest %s)" % (head, digest) if digest else head


def routing(T, E, k, gen, device="cuda", balanced=False):
    """k distinct experts per token, uniformly; weights in [0.05, 1).
    balanced: slot j of token t to expert (t k + j) mod E instead, every
    expert T k / E pairs (as gt_route_balanced in tests/gpu/gpu_util.c)."""
    if balanced:
        ids = (torch.arange(T * k, device=device) % E).view(T, k)
    else:
        ids = torch.rand(T, E, generator=gen, device=device).topk(k, dim=1).indices
    w = torch.rand(T, k, generator=gen, device=device) * 0.95 + 0.05
    return ids.to(torch.int32).contiguous(), w.float().contiguous()


def emit(text, out):
    """The table on stdout, after a blank line, and into `out` if given."""
    print()
    print(text)
    if out:
        with open(out, "w") as f:
            f.write(text)
