"""torchrun_util.py: what the torchrun GPU tests share (test_torch_overlap.py,
test_ep_trials.py): lines naming the rank, a failure that dumps every
thread's stack and ends the process at once (a rank must not wait on
peers that will never come), a watchdog that does the same for a rank
that stops making progress, and a bounded wait for a GPU event."""
import faulthandler
import os
import sys
import time

EVENT_LIMIT_S = 30          # longest any one GPU wait may take
RANK = int(os.environ.get("RANK", "0"))


def log(msg):
    print("[rank %d] %s" % (RANK, msg), flush=True)


def die(msg, code=1):
    log("FAIL: " + msg)
    faulthandler.dump_traceback(all_threads=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def watchdog(seconds):
    """End the process with every thread's stack in `seconds` from now,
    unless called again first."""
    faulthandler.cancel_dump_traceback_later()
    faulthandler.dump_traceback_later(seconds, exit=True)


def wait_event(ev, what):
    """Poll the CUDA event until it has completed; die past EVENT_LIMIT_S."""
    t0 = time.monotonic()
    while not ev.query():
        if time.monotonic() - t0 > EVENT_LIMIT_S:
            die("%s did not finish within %d s" % (what, EVENT_LIMIT_S), 3)
        time.sleep(0.0002)
