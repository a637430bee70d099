# Sourced by the GPU check scripts: use_stage DIR TMP sets BIN_TRIPOD (and
# STAGE_DIR) from a folder written by `scripts/gpu_check.sh --stage DIR`,
# unpacking its stage.tgz into TMP, and puts the staged libraries and any
# CUDA library the host keeps elsewhere (e.g. in Python wheels) on
# LD_LIBRARY_PATH. Also gpu_check_args / gpu_check_open, the start the check scripts share,
# note() for their summary lines, and compare, their comparison of two runs'
# metrics files.
declare -F note > /dev/null || note() { echo "$*" | tee -a "$summary"; }

# gpu_check_args NAME HELP_END ARGS...: the options every GPU check script
# takes: --prebuilt DIR (a folder from `scripts/gpu_check.sh --stage`) or
# --tripod BIN, and -h/--help (prints the calling script's lines
# 2..HELP_END). Any other argument is left in EXTRA_ARGS for the script's
# own options. Then gpu_check_open opens $OUT (default ./NAME_out without
# "_check") with a fresh summary.txt, logs the date, host and GPU, and with
# --prebuilt unpacks the stage into /tmp/tripod_NAME. Together they set
# BIN_TRIPOD, OUT and summary.
gpu_check_args() {
  GPU_CHECK_NAME=$1
  local help_end=$2
  shift 2
  GPU_CHECK_MODE=""; GPU_CHECK_STAGE=""; EXTRA_ARGS=()
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --prebuilt) GPU_CHECK_MODE=prebuilt; GPU_CHECK_STAGE="$2"; shift 2 ;;
      --tripod) GPU_CHECK_MODE=bin; BIN_TRIPOD="$2"; shift 2 ;;
      -h|--help) sed -n "2,${help_end}p" "$0"; exit 0 ;;
      *) EXTRA_ARGS+=("$1"); shift ;;
    esac
  done
  [[ -n $GPU_CHECK_MODE ]] || { echo "$GPU_CHECK_NAME.sh: give --prebuilt DIR or --tripod BIN" >&2; exit 2; }
}

# gpu_check_unknown: exits naming the first argument left in EXTRA_ARGS, if any.
gpu_check_unknown() {
  [[ $# == 0 ]] || { echo "$GPU_CHECK_NAME.sh: unknown argument $1 (see --help)" >&2; exit 2; }
}

gpu_check_open() {
  local short=${GPU_CHECK_NAME%_check}
  OUT=${OUT:-$PWD/${short}_out}
  mkdir -p "$OUT"
  summary="$OUT/summary.txt"
  : > "$summary"
  note "$GPU_CHECK_NAME: $(date -u +%Y-%m-%dT%H:%MZ) host=$(hostname)"
  command -v nvidia-smi > /dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
  [[ $GPU_CHECK_MODE == prebuilt ]] && use_stage "$GPU_CHECK_STAGE" "/tmp/tripod_${short#gpu_}"
  return 0
}
use_stage() {
  local dir=$1 tmp=$2 miss found
  note "commit: $(cat "$dir/COMMIT" 2>/dev/null) (prebuilt; uncommitted: $(wc -l < "$dir/DIRTY" 2>/dev/null) files)"
  if [[ -f "$dir/stage.tgz" ]]; then
    mkdir -p "$tmp" && tar xzf "$dir/stage.tgz" -C "$tmp" && dir=$tmp
  fi
  [[ $dir == /* ]] || dir="$PWD/$dir"
  STAGE_DIR=$dir
  BIN_TRIPOD="$dir/bin/tripod"
  export LD_LIBRARY_PATH="$dir/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  for miss in $(ldd "$BIN_TRIPOD" | awk '/not found/ {print $1}' | sort -u); do
    found=$(find /usr /opt -name "$miss" 2>/dev/null | head -1)
    [[ -n $found ]] && export LD_LIBRARY_PATH="$(dirname "$found"):$LD_LIBRARY_PATH"
    note "library $miss -> ${found:-NOT FOUND}"
  done
}

# compare A.jsonl B.jsonl KEY REL_TOL FROM TO: max relative difference of KEY over
# iterations FROM..TO (tolerance 0: bit for bit); PASS needs every iteration in both.
compare() {
  python3 - "$@" <<'PY'
import json, math, sys
a, b, key, tol, lo, hi = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
def rows(p):
    try: return {r["iteration"]: r for r in map(json.loads, open(p)) if key in r}
    except OSError: return {}
ra, rb = rows(a), rows(b)
its = sorted(i for i in set(ra) & set(rb) if lo <= i <= hi)
worst, at = 0.0, None
for i in its:
    x, y = ra[i][key], rb[i][key]
    fin = lambda v: v is not None and math.isfinite(v)
    d = abs(x - y) / max(abs(x), 1e-30) if (fin(x) and fin(y)) else math.inf
    if d > worst: worst, at = d, i
ok = len(its) == hi - lo + 1 and worst <= tol
print(f"{key} {lo}-{hi}: {len(its)} compared, max rel diff {worst:.2e} (at {at}), tol {tol:g} -> {'PASS' if ok else 'FAIL'}")
PY
}
