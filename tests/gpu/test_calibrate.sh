#!/bin/sh
# test_calibrate.sh: headroom-calibrate end to end on 2 GPUs, then
# headroomd reading what it wrote. From the repository root on the GPU
# machine:
#   . tests/gpu/device_env.sh && make && tests/gpu/test_calibrate.sh
# Without $HEADROOM_CALIBRATION_FILE it measures a small set (budgets 8/1
# and 8/default, 1 trial, headroom up to 8: well under a minute); with it,
# it checks that file instead. Then it starts headroomd (CUDA topology,
# calibration = the file), registers two 8-CTA collectives on GPU 0 with
# headroom-run (the policy's NCCL cap is then 8, cga 1) and checks that
# the lease carries the calibrated headroom and status says "calibrated".
# Prints "SKIP: ..." and exits 77 without 2 GPUs.
NAME=test_calibrate
cd "$(dirname "$0")/../.." || exit 1
BUILD=${HEADROOM_BUILD:-build}
skip() { echo "SKIP: $NAME: $*"; exit 77; }
fail() { echo "FAIL: $NAME: $*"; exit 1; }

[ -x "$BUILD/bin/headroom-calibrate" ] ||
  skip "$BUILD/bin/headroom-calibrate not built (no nvcc or nccl.h)"
command -v python3 >/dev/null 2>&1 || skip "no python3"
DIR=$(mktemp -d /tmp/hr-calib-XXXXXX) || fail "mktemp"
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$DIR"; }
trap cleanup EXIT

FILE=${HEADROOM_CALIBRATION_FILE:-}
if [ -z "$FILE" ]; then
  FILE=$DIR/calibration.json
  "$BUILD/bin/headroom-calibrate" --trials 1 --budgets 8/1,8/default \
    --max-headroom 8 --output "$FILE"
  rc=$?
  [ $rc -eq 77 ] && skip "headroom-calibrate: fewer than 2 GPUs"
  [ $rc -eq 0 ] || fail "headroom-calibrate exited $rc"
fi
# The 8/1 entry: its safe headroom, or "null".
SAFE=$(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 1 and len(d["gpus"]) >= 2, "bad header"
e = [b for b in d["budgets"] if b["max_ctas"] == 8 and b["cga_cluster_size"] == 1]
print("null" if not e or e[0]["safe_headroom"] is None else e[0]["safe_headroom"])
' "$FILE") || fail "$FILE is not a calibration file"
[ "$SAFE" = null ] && fail "budget 8/1 had no safe headroom up to the largest tried"
# What the policy must hand out: the safe headroom rounded up to the
# cluster (2), never under the floor (2); theory would say 2 x 16 = 32.
WANT=$(( (SAFE + 1) / 2 * 2 )); [ $WANT -lt 2 ] && WANT=2

# HEADROOM_TEST_TOPOLOGY: lines for the config in place of "topology =
# cuda", to run this half where there is no GPU (with a given file).
cat > "$DIR/headroomd.conf" <<CONF
${HEADROOM_TEST_TOPOLOGY:-topology = cuda}
calibration = $FILE
CONF
"$BUILD/bin/headroomd" --config "$DIR/headroomd.conf" --socket "$DIR/h.sock" \
  --state-dir "$DIR/state" > "$DIR/daemon.log" 2>&1 &
PID=$!
for i in $(seq 50); do [ -S "$DIR/h.sock" ] && break; sleep 0.1; done
[ -S "$DIR/h.sock" ] || { cat "$DIR/daemon.log"; fail "headroomd did not start"; }
grep calibration "$DIR/daemon.log"

OUTENV=$("$BUILD/bin/headroom-run" --socket "$DIR/h.sock" --gpu 0 --ctas 8 \
  --concurrent 2 -- sh -c "env; '$BUILD/bin/headroomctl' --socket '$DIR/h.sock' status --json" \
  ) || fail "headroom-run failed"
HR=$(echo "$OUTENV" | sed -n 's/^DG_MEGA_MOE_SM_HEADROOM=//p')
MAXC=$(echo "$OUTENV" | sed -n 's/^NCCL_MAX_CTAS=//p')
SRC=$(echo "$OUTENV" | grep '^{' | python3 -c '
import json, sys
d = json.load(sys.stdin); d = d.get("status", d)
print(d["gpus"][0]["budget_source"])' 2>/dev/null ||
  echo "$OUTENV" | grep -o '"budget_source":"[a-z]*"' | head -1 | cut -d'"' -f4)
echo "lease on GPU 0: DG_MEGA_MOE_SM_HEADROOM=$HR NCCL_MAX_CTAS=$MAXC budget_source=$SRC (calibrated 8/1 safe headroom $SAFE)"
[ "$MAXC" = 8 ] || fail "NCCL_MAX_CTAS $MAXC, want 8"
[ "$HR" = "$WANT" ] || fail "headroom $HR, want $WANT"
[ "$SRC" = calibrated ] || fail "budget_source '$SRC', want calibrated"
echo "PASS: $NAME"
