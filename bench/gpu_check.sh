#!/usr/bin/env bash
# One command on a lent NVIDIA GPU, done within 8 minutes (each step under its own timeout; the
# timeouts add up to 480 s, the wheels' install aside), then one table:
#   1. install gpumr beside what the machine has (carried wheels in .whl/ first);
#   2. build the kernels for the device (no nvcc: said, and the check goes on with what it can);
#   3. the model's predictions (bench/gpu_model.py --quick), before any measurement;
#   4. equality on the real device: only the tests that touch it (pytest -m gpu: faces = OpenCV,
#      slabs within 1e-5 of the CPU), none of the simulated ones; a GPU test that skips is a failure;
#   5. CT: kernel and slab-path GUPS at 512^3 from 512 projections;
#   6. where the slab path's and the faces' kernel path's time goes, every driver call timed as gpumr
#      drives the device and each alone (bench/gpu_phases.py: the H200 check of 2026-11-27 found both
#      4-6 times slower than their kernels);
#   7. CT 1024^3 from 360 end to end (the job, --device auto);
#   8. faces: the kernel path, and the job end to end with --device cpu, gpu and auto;
#   9. the table: each figure beside the model's prediction, then where the time went.
# Without a GPU it says so on one line and exits 1, having checked nothing. `--dry` runs the same
# plan without a GPU: it says so, prints each step and its timeout, and the table's rows unmeasured.
#
# `--lease 1` and `--lease 2`: the plan for a lent GPU as two commands, each well inside one call's
# 10 minutes and 480 s in all (the install aside):
#   1. identity and a clock monitor (nvidia-smi, every 0.5 s, for the whole command), the kernels,
#      micro-timings (bench/gpu_micro.py: context start, pinned and pageable copies, first touch),
#      where the time goes at 512^3 and 1024^3 (bench/gpu_phases.py), the changes of issue 65 beside
#      what they replaced (bench/gpu_variants.py), the host's own driving cost (bench/host_driving.py);
#   2. the 1024^3 x 360 job with --device auto, then the faces' kernel path and a 4,000-frame job
#      with --device auto.
# Each step's output lands in $OUT/NAME.txt; the command ends with their tables. `--emulate` runs the
# same plan here on a simulated GPU (the kernels on the host, small sizes: the plan's commands run;
# nothing of a GPU is measured).
set -uo pipefail
case $0 in */*) cd "${0%/*}/.." || exit 1 ;; *) cd .. || exit 1 ;; esac  # the repository root (no dirname: PATH may be bare)
PY=${PYTHON:-python3}
SITE=${GPUMR_SITE:-/tmp/gpumr-site}
OUT=${OUT:-/tmp/gpumr-gpu-check}
FRAMES=${FRAMES:-1000}  # (at 2,000 the faces jobs did not finish inside the H200 check's lease)
DRY=0
LEASE=
EMULATE=0
while [ $# -gt 0 ]; do
  case $1 in
    --dry) DRY=1 ;;
    --lease) LEASE=${2:-}; shift ;;
    --emulate) EMULATE=1 ;;
    *) echo "gpu_check: unknown argument $1 (--dry, --lease 1|2, --emulate)" >&2; exit 2 ;;
  esac
  shift
done
if [ -n "$LEASE" ] && [ "$LEASE" != 1 ] && [ "$LEASE" != 2 ]; then
  echo "gpu_check: --lease takes 1 or 2, not '$LEASE'" >&2
  exit 2
fi
if [ "$EMULATE" -eq 1 ] && [ -z "$LEASE" ]; then
  echo "gpu_check: --emulate goes with --lease 1 or 2" >&2
  exit 2
fi

if [ "$DRY" -eq 0 ] && [ "$EMULATE" -eq 0 ] && { ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; }; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi is missing or sees no device): nothing was checked;" \
       "run bench/gpu_check.sh on a machine with a GPU (bench/gpu_model.py predicts without one)" >&2
  exit 1
fi

failures=0
# step SECONDS NAME COMMAND...: run COMMAND under its own timeout, its output in $OUT/NAME.txt
step() {
  local limit=$1 name=$2
  shift 2
  if [ "$DRY" -eq 1 ]; then
    echo "gpu_check (dry): step $name, at most ${limit}s: $*"
    return 0
  fi
  local rc=0
  PYTHONUNBUFFERED=1 timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1 || rc=$?
  if [ "$rc" -eq 124 ]; then
    echo "gpu_check: step $name ran out of its ${limit}s (see $OUT/$name.txt)" >&2
  elif [ "$rc" -ne 0 ]; then
    echo "gpu_check: step $name failed with status $rc (see $OUT/$name.txt)" >&2
  fi
  return "$rc"
}

if [ -n "$LEASE" ]; then
  # -- the lease plan: two commands ------------------------------------------------------------
  mkdir -p "$SITE" "$OUT"
  if [ "$EMULATE" -eq 1 ]; then
    # small sizes, a simulated GPU (each script's own --emulate): the plan's commands run here; no GPU is measured
    EM=--emulate CT=${LEASE_CT:-32} ANG=${LEASE_ANGLES:-16} CT_BIG=${LEASE_CT_BIG:-40} ANG_BIG=${LEASE_ANGLES_BIG:-12}
    LFRAMES=${LEASE_FRAMES:-8} MIB=16 FSIZE=160x120 VFRAMES=4
    echo "gpu_check --lease $LEASE --emulate: a simulated GPU, small sizes; nothing of a GPU is measured"
  else
    EM='' CT=512 ANG=512 CT_BIG=1024 ANG_BIG=360 LFRAMES=${FRAMES_LEASE:-4000} MIB=256 FSIZE=640x480 VFRAMES=512
  fi
  if [ "$DRY" -eq 0 ] && [ "$EMULATE" -eq 0 ] && compgen -G ".whl/*.whl" >/dev/null; then
    step 30 install-wheels "$PY" -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$SITE" \
      .whl/*.whl || failures=$((failures + 1))
  fi
  if [ "$EMULATE" -eq 0 ]; then
    step 40 install "$PY" -m pip install -q --upgrade --no-index --no-deps --no-build-isolation --no-compile \
      --target "$SITE" . || failures=$((failures + 1))
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  fi
  monitor=
  if [ "$LEASE" = 1 ]; then
    if [ "$DRY" -eq 0 ] && [ "$EMULATE" -eq 0 ]; then
      nvidia-smi -q >"$OUT/identity.txt" 2>&1
      nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu \
        --format=csv -lms 500 >"$OUT/clocks.csv" 2>&1 &
      monitor=$!
      if command -v nvcc >/dev/null 2>&1; then
        arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
        step 40 kernels "$PY" -m gpumr build-kernels -o "$SITE/kernels" --arch "$arch" && \
          export GPUMR_KERNEL_DIR="$SITE/kernels"
      fi
    fi
    step 30 micro "$PY" bench/gpu_micro.py --mib "$MIB" $EM || failures=$((failures + 1))
    step 40 phases512 "$PY" bench/gpu_phases.py --ct "$CT" --angles "$ANG" --slab 16 --frames 0 $EM \
      || failures=$((failures + 1))
    step 60 phases1024 "$PY" bench/gpu_phases.py --ct "$CT_BIG" --angles "$ANG_BIG" --slab 16 \
      --frames "$([ "$EMULATE" -eq 1 ] && echo 16 || echo 256)" --batch 16 --size "$FSIZE" $EM || failures=$((failures + 1))
    step 60 variants "$PY" bench/gpu_variants.py --ct "$CT" --angles "$ANG" --frames "$VFRAMES" --size "$FSIZE" $EM \
      || failures=$((failures + 1))
    step 40 host "$PY" bench/host_driving.py --quick --repeat 3 || failures=$((failures + 1))
    names="micro phases512 phases1024 variants host"
  else
    step 130 ct1024 "$PY" bench/backproject_gpu.py --sizes "$CT_BIG" --angles "$ANG_BIG" --slab 16 --job $EM \
      || failures=$((failures + 1))
    step 110 faces "$PY" bench/face_gpu.py --frames "$LFRAMES" --batch 16 --devices auto $EM \
      || failures=$((failures + 1))
    names="ct1024 faces"
  fi
  if [ -n "$monitor" ]; then kill "$monitor" 2>/dev/null; fi
  if [ "$DRY" -eq 1 ]; then
    echo "gpu_check (dry): done; no GPU was used, nothing was measured"
    exit 0
  fi
  for name in $names; do  # each step's tables, as far as it got
    echo
    echo "== $name"
    sed -n '/^$/,$p' "$OUT/$name.txt" 2>/dev/null | grep -v '^$' | head -40
  done
  if [ "$failures" -ne 0 ]; then
    echo "gpu_check: $failures step(s) failed (outputs in $OUT)" >&2
    exit 1
  fi
  exit 0
fi

if [ "$DRY" -eq 1 ]; then
  echo "gpu_check (dry): no GPU is used and nothing is measured; the plan, each step under its own timeout:"
else
  mkdir -p "$SITE" "$OUT"
  if compgen -G ".whl/*.whl" >/dev/null; then
    step 30 install-wheels "$PY" -m pip install -q --upgrade --no-index --no-deps --no-compile --target "$SITE" .whl/*.whl \
      || failures=$((failures + 1))
  fi
fi
step 40 install "$PY" -m pip install -q --upgrade --no-index --no-deps --no-build-isolation --no-compile --target "$SITE" . \
  || failures=$((failures + 1))
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"

if [ "$DRY" -eq 0 ]; then
  nvidia-smi --query-gpu=name,compute_mode,memory.total,driver_version,clocks.max.sm --format=csv >"$OUT/gpu.txt"
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)
else
  arch=90
fi
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do  # the toolkit, where the image did not put it on PATH
  if [ -x "$d/nvcc" ] && ! command -v nvcc >/dev/null 2>&1; then PATH="$PATH:$d"; fi
done
has_nvcc=1
if ! command -v nvcc >/dev/null 2>&1; then
  has_nvcc=0
  echo "gpu_check: no nvcc here: the kernels are not built for this device and the model cannot read them;" \
       "going on with the kernels found in \$GPUMR_KERNEL_DIR or beside the sources" >&2
fi
if [ "$has_nvcc" -eq 1 ]; then
  step 40 kernels "$PY" -m gpumr build-kernels -o "$SITE/kernels" --arch "$arch" && export GPUMR_KERNEL_DIR="$SITE/kernels"
  step 50 model "$PY" bench/gpu_model.py --quick || true  # the table says where it did not run
fi

# only the tests that touch the real device; a skip is a failure (a GPU test must run on a GPU)
step 40 tests bash -c "cd tests && $PY -m pytest -q -p no:cacheprovider -m gpu -rs --junitxml='$OUT/tests.xml' test_gpu.py" \
  || failures=$((failures + 1))
step 50 ct512 "$PY" bench/backproject_gpu.py --sizes 512 --angles 512 --slab 16 || failures=$((failures + 1))
step 40 phases "$PY" bench/gpu_phases.py --ct 512 --angles 512 --slab 16 --frames 256 --batch 16 \
  || failures=$((failures + 1))
step 130 ct1024 "$PY" bench/backproject_gpu.py --sizes 1024 --angles 360 --slab 16 --job || failures=$((failures + 1))
step 90 faces "$PY" bench/face_gpu.py --frames "$FRAMES" --batch 16 || failures=$((failures + 1))

OUT="$OUT" DRY="$DRY" "$PY" - <<'EOF' || failures=$((failures + 1))
import os, re, xml.etree.ElementTree as ET
out, dry = os.environ["OUT"], os.environ["DRY"] == "1"

def text(name):
    try:
        with open(os.path.join(out, name + ".txt"), encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""

def find(pattern, name, group=1):
    m = re.search(pattern, text(name), re.M)
    return m.group(group) if m else None

def tests():
    if dry:
        return "not run (dry)"
    try:
        suite = ET.parse(os.path.join(out, "tests.xml")).getroot()
    except (OSError, ET.ParseError):
        return "FAILED: the tests did not report"
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    n, failed = int(suite.get("tests", 0)), int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped = int(suite.get("skipped", 0))
    if n == 0 or failed or skipped:
        return f"FAILED: {n} tests, {failed} failed, {skipped} skipped (a skip is a failure here)"
    return f"passed: {n} tests on the device"

model = text("model")
def predicted(pattern):
    m = re.search(pattern, model, re.M)
    return m.group(1) if m else "n/a (model did not run)"

rows = [
    ("equality on the device (faces = OpenCV, slabs within 1e-5)", tests(), "equal"),
    ("faces fps, job end to end (--device auto)", find(r"^job --device auto.*?\s(\d+)\s*$", "faces"),
     predicted(r"^faces 640x480.*?>= [\d,]+ fps\s+([\d,]+-[\d,]+ fps)")),
    ("faces fps, GPU kernel path", find(r"^GPU kernel path \(batched\)\s+(\d+)", "faces"),
     predicted(r"^H100 SXM\s+[\d,]+-[\d,]+ fps\s+([\d,]+-[\d,]+ fps)")),
    ("CT GUPS at 512^3 x 512 (slab path)", find(r"^512\^3 x \d+\s+\S+\s+\S+\s+(\S+)", "ct512"),
     predicted(r"^H100 SXM\s+\d+%.*?([\d,]+-[\d,]+ GUPS) \(\d+% of waves, \d+ parts\)")),
    ("CT 1024^3 x 360 end to end (job, --device auto), s", find(r"^job 1024\^3.*?: ([\d.]+) s wall", "ct1024"),
     predicted(r"^CT 1024\^3.*?<= [\d.]+ s\s+([\d.]+-[\d.]+ s) to the slabs")),
    ("faces: CPU and GPU together / (each alone summed)", find(r"^auto / \(cpu \+ gpu\)\s+([\d.]+)", "faces"),
     "1.00 at best"),
]
rows = [(w, "not run (dry)" if dry else (m or "not measured (see its step's output)"), p) for w, m, p in rows]
widths = [max(len(r[i]) for r in rows + [("what", "measured", "model (PREDICTION)")]) for i in range(3)]
print(f"\ngpu_check: {'DRY RUN, no GPU used' if dry else open(os.path.join(out, 'gpu.txt')).read().splitlines()[-1]}")
for r in [("what", "measured", "model (PREDICTION)")] + rows:
    print("  ".join(x.ljust(w) for x, w in zip(r, widths)))
EOF
if [ "$DRY" -eq 1 ]; then
  echo "gpu_check (dry): done; no GPU was used, nothing was measured"
  exit 0
fi
if grep -q '^Where' "$OUT/phases.txt" 2>/dev/null; then  # the profile's tables, as far as its step got
  sed -n '/^Where/,$p' "$OUT/phases.txt"
fi
if [ "$failures" -ne 0 ]; then
  echo "gpu_check: $failures step(s) failed (outputs in $OUT)" >&2
  exit 1
fi
