# Sourced by the GPU check scripts: use_stage DIR TMP sets BIN_TRIPOD (and
# STAGE_DIR) from a folder written by `scripts/gpu_check.sh --stage DIR`,
# unpacking its stage.tgz into TMP, and puts the staged libraries and any
# CUDA library the host keeps elsewhere (e.g. in Python wheels) on
# LD_LIBRARY_PATH. Needs a note() function for its log lines. Also compare,
# the check scripts' comparison of two runs' metrics files.
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
