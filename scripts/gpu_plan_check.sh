#!/usr/bin/env bash
# `tripod plan` against tripod's own runs on this GPU: for GPT-2 124M / 350M /
# 1.5B (bf16, seq 1024, one GPU) at two micro-batches each and recompute
# none / selective / full, the plan's predicted allocator peak and step time
# next to the measured ones (mem_peak_bytes; mean iteration time of
# iterations 6-15 of 15). Checks: memory within 10%, step time within 20%,
# and the configuration plan ranks first (most tokens/s) is the fastest
# measured (within 2%, the run-to-run spread). Results in $OUT/summary.txt (default ./gpu_plan_out) and a
# markdown table in $OUT/plan_vs_measured.md.
#
#   scripts/gpu_check.sh --stage DIR          (build machine; STAGE_TARGETS=tripod is enough)
#   scripts/gpu_plan_check.sh --prebuilt DIR  (GPU machine)
#   scripts/gpu_plan_check.sh --tripod BIN
# Options: --models "124m 350m 1.5b" (default all three; "tiny" with PLAN_DEVICE=cpu is a dry run); --op-times FILE uses a
# shipped/copied op-time file instead of calibrating here.
set -uo pipefail
cd "$(dirname "$0")/.."

models="124m 350m 1.5b"
op_times=""
source scripts/stage_env.sh
gpu_check_args gpu_plan_check 15 "$@"
set -- "${EXTRA_ARGS[@]}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --op-times) op_times="$2"; shift 2 ;;
    *) gpu_check_unknown "$1" ;;
  esac
done
gpu_check_open
export TRIPOD_CACHE_DIR="$OUT/cache"
# PLAN_DEVICE=cpu with --models tiny: the plumbing on the CPU backend.
DEVICE=${PLAN_DEVICE:-cuda}
if [[ $DEVICE == cpu ]]; then plan_prec=--fp32; train_prec=(); else plan_prec=--bf16; train_prec=(--bf16); fi

rows="$OUT/rows.jsonl"
: > "$rows"
for m in $models; do
  case $m in
    124m) shape=(--num-layers 12 --hidden-size 768 --num-attention-heads 12); mbs="32 64" ;;
    350m) shape=(--num-layers 24 --hidden-size 1024 --num-attention-heads 16); mbs="16 32" ;;
    1.5b) shape=(--num-layers 48 --hidden-size 1600 --num-attention-heads 25); mbs="8 16" ;;
    tiny) shape=(--num-layers 2 --hidden-size 64 --num-attention-heads 4); mbs="1 2" ;;  # dry run
    *) note "unknown model $m"; continue ;;
  esac
  for mb in $mbs; do
    plan_args=(plan "${shape[@]}" --seq-length 1024 --vocab-size 50257 --micro-batch-size "$mb"
               --global-batch-size "$mb" $plan_prec --gpus-per-node 1 --gpu-memory-gb 139 --no-distributed-optimizer
               --recompute-search none,selective,full --json)
    if [[ -n $op_times ]]; then plan_args+=(--op-times "$op_times"); else plan_args+=(--calibrate --device "$DEVICE"); fi
    start=$(date +%s.%N)
    timeout 300 "$BIN_TRIPOD" "${plan_args[@]}" > "$OUT/plan_${m}_$mb.json" 2> "$OUT/plan_${m}_$mb.log"
    note "plan $m mb $mb rc=$? ($(python3 -c "print(f'{$(date +%s.%N) - $start:.1f}')") s) $(grep -m1 'measured' "$OUT/plan_${m}_$mb.log")"
    for rc in none selective full; do
      flags=(); [[ $rc != none ]] && flags=(--recompute-granularity "$rc")
      timeout 300 "$BIN_TRIPOD" train --device "$DEVICE" "${train_prec[@]}" "${shape[@]}" --seq-length 1024 --vocab-size 50257 \
        --mock-data --micro-batch-size "$mb" --global-batch-size "$mb" --train-iters 15 --log-interval 5 \
        --eval-interval 0 --lr 1e-4 "${flags[@]}" --metrics-file "$OUT/train_${m}_${mb}_$rc.jsonl" \
        > "$OUT/train_${m}_${mb}_$rc.log" 2>&1
      note "train $m mb $mb recompute $rc rc=$?"
      python3 - "$OUT/plan_${m}_$mb.json" "$OUT/train_${m}_${mb}_$rc.jsonl" "$m" "$mb" "$rc" >> "$rows" <<'PY'
import json, sys
plan_path, metrics, model, mb, rc = sys.argv[1:6]
txt = open(plan_path).read()
plan = json.loads(txt[txt.index("{"):])
lay = [l for l in plan["layouts"] if l["recompute"] == rc]
try:
    r = [x for x in map(json.loads, open(metrics)) if x["iteration"] > 5]
except OSError:
    r = []
row = {"model": model, "mb": int(mb), "recompute": rc, "op_times": plan.get("op_times")}
if lay:
    row.update(pred_gib=lay[0]["memory_gib"]["allocator_peak"], pred_s=lay[0]["time_s"]["step"])
if r:
    row.update(meas_gib=r[-1]["mem_peak_bytes"] / 2**30, meas_s=sum(x["elapsed_ms"] for x in r) / len(r) / 1000)
print(json.dumps(row))
PY
    done
  done
done

python3 - "$rows" "$OUT/plan_vs_measured.md" <<'PY' | tee -a "$summary"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = ["| model | micro-batch | recompute | predicted peak | measured peak | error | predicted step | measured step | error |",
       "|---|---|---|---|---|---|---|---|---|"]
bad = 0
for r in rows:
    if "pred_s" not in r or "meas_s" not in r:
        out.append(f"| {r['model']} | {r['mb']} | {r['recompute']} | missing | | | | | |"); bad += 1; continue
    em = r["pred_gib"] / r["meas_gib"] - 1; et = r["pred_s"] / r["meas_s"] - 1
    bad += abs(em) > 0.10 or abs(et) > 0.20
    out.append(f"| {r['model']} | {r['mb']} | {r['recompute']} | {r['pred_gib']:.1f} GiB | {r['meas_gib']:.1f} GiB | "
               f"{100*em:+.1f}% | {1000*r['pred_s']:.1f} ms | {1000*r['meas_s']:.1f} ms | {100*et:+.1f}% |")
# Ranking: per model, the configuration with the most predicted tokens/s
# must be the fastest measured, within the 2% a rerun of the same
# configuration varies by.
for model in dict.fromkeys(r["model"] for r in rows):
    rs = [r for r in rows if r["model"] == model and "pred_s" in r and "meas_s" in r]
    if not rs: continue
    best_p = max(rs, key=lambda r: r["mb"] / r["pred_s"]); best_m = max(rs, key=lambda r: r["mb"] / r["meas_s"])
    gap = (best_m["mb"] / best_m["meas_s"]) / (best_p["mb"] / best_p["meas_s"]) - 1
    same = gap <= 0.02
    out.append(f"\n{model}: plan ranks first mb {best_p['mb']} recompute {best_p['recompute']}; fastest measured mb "
               f"{best_m['mb']} recompute {best_m['recompute']} ({100*gap:.1f}% faster) -> {'PASS' if same else 'FAIL'}")
    bad += not same
out.append(f"\nop times: {rows[0].get('op_times') if rows else '?'}")
bad += not rows
out.append(f"plan vs measured: {'PASS' if bad == 0 else f'FAIL ({bad} out of bounds or missing)'}")
open(sys.argv[2], "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
cp "$TRIPOD_CACHE_DIR"/plan/*.json "$OUT/" 2>/dev/null
