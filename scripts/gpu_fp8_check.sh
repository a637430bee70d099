#!/usr/bin/env bash
# FP8 training on one GPU, against tripod's own bf16 in the same call:
#
#   scripts/gpu_fp8_check.sh --stage DIR [--data DIR] [--checks "layouts convergence determinism speed"]
#
# DIR: a folder written by `scripts/gpu_check.sh --stage DIR` (tripod). --data DIR
# holds kjv_text_document.{bin,idx} (scripts/prepare_kjv.sh). Logs, metrics and
# summary.txt go to $OUT (default ./gpu_fp8_out).
#   layouts      --fp8-format hybrid, bf16, 20 iterations: TP2 with SP, PP2, DP2 with
#                the distributed optimizer (ranks sharing the GPU over Gloo) against
#                one process (loss within 1e-3 relative: bf16 on the GPU is not
#                bit-repeatable across layouts), both recipes
#   convergence  GPT-2 124M shape on KJV, seq 1024, batch 16, ITERS iterations
#                (default 2000): bf16 vs FP8 hybrid delayed, and CONV_RUNS beside them, all at
#                once (default "e4m3 hpw nd": E4M3 gradients, --no-fp8-wgrad, bf16 without
#                --deterministic-mode as the noise floor; also tw, bw, bw4, fl: tensorwise,
#                blockwise, E4M3 blockwise, --first-last-layers-bf16): loss
#                within 1% from iteration 200 (also 200-1000 and 1000-ITERS apart),
#                no skipped steps; the delayed run saved at ITERS/2 and resumed
#                (CONV_RESUME=0: not): bit for bit equal after the resume
#                (--deterministic-mode, so two runs of one binary agree bit for bit);
#                CONV_PEER=1: also bench/torch_fp8_kjv.py (PyTorch, torch._scaled_mm,
#                the same recipe) bf16 and FP8 on the same data, and tripod's mean
#                FP8-over-bf16 gap per window against the peer's (PASS when tripod's
#                is at most the peer's + 1 point; needs PyTorch and an sm_89+ GPU)
#   determinism  GPT-2 124M shape on KJV with --deterministic-mode, DET_ITERS
#                iterations (default 60): two bf16 runs and two FP8 runs of one
#                binary bit for bit equal (loss and grad norm at every
#                iteration), and the FP8 run saved at DET_ITERS/2 and resumed:
#                bit for bit equal to the uninterrupted one
#   speed        bf16 vs FP8 (and FP8 with --fp8-dot-product-attention at the 8B
#                shape: SPEED_DPA_MODELS, CUDNN_LIB_DIR for cuDNN 9.19+, default PyTorch's; FP8 with
#                --fp8-recipe blockwise: SPEED_BLOCKWISE_MODELS, default both) at GPT-2 1.5B (seq 1024, micro-batch 16) and the Llama 3
#                8B layer shape (8 layers, hidden 4096, 32 heads, 8 groups, ffn 14336,
#                vocab 128256, seq 8192, micro-batch 1): tokens/s and model TFLOP/s
#                (the bf16 FLOP count) as the mean of iterations 6-20, peak memory;
#                with SPEED_UNFUSED=1 also FP8 at the 8B shape with
#                TRIPOD_FP8_UNFUSED_SWIGLU=1 (the SwiGLU cast in a second pass)
#   swiglu       the SwiGLU cast against its unfused path: a small Llama-style
#                model with --deterministic-mode, FP8 delayed, 30 iterations:
#                the same losses and grad norms bit for bit
#   gaps         where the GPU idles (bench/dev/cuda/gap_profiler.cpp, a CUPTI
#                injection library; GAP_PROFILER=path/libgap_profiler.so):
#                GAP_VARIANTS (default "bf16 fp8"; also fp8_unfused, fp8dpa) at the 8B
#                layer shape, 14 iterations, the last GAP_PROFILER_WINDOW_MS
#                (default 1800) of the timeline
#   param_gather --fp8-param-gather (not run by default): GPT-2 124M shape, bf16,
#                dp2 with the distributed optimizer (ranks sharing the GPU over
#                Gloo), both recipes, with and without the flag: loss within 1e-3
#                relative (the layouts' tolerance), step time and peak memory
# Exits 1 when a check printed FAIL.
set -uo pipefail
cd "$(dirname "$0")/.."
stage=""; data_dir=""; checks="layouts convergence determinism speed"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --stage) stage="$2"; shift 2 ;;
    --data) data_dir="$2"; shift 2 ;;
    --checks) checks="$2"; shift 2 ;;
    -h|--help) sed -n '2,51p' "$0"; exit 0 ;;
    *) echo "gpu_fp8_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n $stage ]] || { echo "gpu_fp8_check.sh: pass --stage DIR" >&2; exit 2; }
OUT=${OUT:-$PWD/gpu_fp8_out}
mkdir -p "$OUT"
summary="$OUT/summary.txt"
: > "$summary"
note() { echo "$*" | tee -a "$summary"; }
source scripts/stage_env.sh
# CUDNN_LIB_DIR: a directory with another libcudnn.so.9 (tripod opens the first on the search path).
# Unset, the cuDNN of PyTorch's wheels is taken when there is one (FP8 attention needs 9.19 or later,
# which a system cuDNN may not be); CUDNN_LIB_DIR=none keeps the system's.
if [[ -z ${CUDNN_LIB_DIR:-} ]]; then
  CUDNN_LIB_DIR=$(python3 -c "import nvidia.cudnn, os; d = list(nvidia.cudnn.__path__)[0] + '/lib'; print(d if os.path.isdir(d) else '')" 2>/dev/null)
fi
[[ ${CUDNN_LIB_DIR:-none} != none ]] && export LD_LIBRARY_PATH=$CUDNN_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
note "gpu_fp8_check: $(date -u +%Y-%m-%dT%H:%MZ) host=$(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | tee -a "$summary"
note "cuDNN: ${CUDNN_LIB_DIR:-none} first on the library path (CUDNN_LIB_DIR)"
use_stage "$stage" /tmp/tripod_fp8_stage
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
has() { [[ " $checks " == *" $1 "* ]]; }

run() {  # run NAME ARGS...: metrics in $OUT/NAME.jsonl
  local name=$1; shift
  rm -f "$OUT/$name.jsonl"
  timeout 900 "$BIN_TRIPOD" "$@" --metrics-file "$OUT/$name.jsonl" > "$OUT/$name.log" 2>&1
  local rc=$?
  ((rc == 0)) || { note "$name rc=$rc"; grep -iE "error|fail" "$OUT/$name.log" | head -3 | tee -a "$summary"; }
}
# compare A B TOL [FROM] [TO]: lm_loss of two runs at common iterations in [FROM, TO]
compare() {
  python3 - "$OUT/$1.jsonl" "$OUT/$2.jsonl" "$3" "${4:-0}" "${5:-1000000000}" <<'PY'
import json, sys
def rows(p):
    try: return {r["iteration"]: r for r in map(json.loads, open(p)) if "lm_loss" in r}
    except FileNotFoundError: return {}
a, b, tol, lo, hi = rows(sys.argv[1]), rows(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
its = sorted(i for i in set(a) & set(b) if lo <= i <= hi)
worst, at = 0.0, None
for i in its:
    d = abs(a[i]["lm_loss"] - b[i]["lm_loss"]) / abs(a[i]["lm_loss"])
    if d > worst: worst, at = d, i
skipped = sum(r.get("skipped_iters", 0) for r in b.values())
last = f"final {a[its[-1]]['lm_loss']:.4f} vs {b[its[-1]]['lm_loss']:.4f}" if its else "no common iterations"
ok = its and worst <= tol
print(f"{len(its)} iterations, max rel diff {worst:.2e} (at {at}), tol {tol:g}, {last}, skipped {skipped} -> {'PASS' if ok else 'FAIL'}")
PY
}
# bitwise A B: lm_loss and grad_norm of two runs equal bit for bit at every common iteration
bitwise() {
  python3 - "$OUT/$1.jsonl" "$OUT/$2.jsonl" <<'PY'
import json, sys
def rows(p):
    try: return {r["iteration"]: (r["lm_loss"], r.get("grad_norm")) for r in map(json.loads, open(p)) if "lm_loss" in r}
    except FileNotFoundError: return {}
a, b = rows(sys.argv[1]), rows(sys.argv[2])
its = sorted(set(a) & set(b))
diff = [i for i in its if a[i] != b[i]]
verdict = "PASS" if its and not diff else "FAIL"
first = f", first difference at {diff[0]}: {a[diff[0]]} vs {b[diff[0]]}" if diff else ""
print(f"{len(its)} iterations ({its[0] if its else '-'}-{its[-1] if its else '-'}), {len(diff)} differ{first} -> {verdict}")
PY
}
# peer_gap FROM TO: the mean relative loss gap FP8 - bf16 of tripod (kjv_fp8 over
# kjv_bf16) and of the PyTorch peer (kjv_peer_fp8 over kjv_peer_bf16) in [FROM, TO]
peer_gap() {
  python3 - "$OUT" "$1" "$2" <<'PY'
import json, sys
out, lo, hi = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def rows(n):
    try: return {r["iteration"]: r["lm_loss"] for r in map(json.loads, open(f"{out}/{n}.jsonl")) if "lm_loss" in r}
    except FileNotFoundError: return {}
def gap(b, f):
    its = [i for i in sorted(set(b) & set(f)) if lo <= i <= hi]
    return sum((f[i] - b[i]) / b[i] for i in its) / len(its) if its else None
t, p = gap(rows("kjv_bf16"), rows("kjv_fp8")), gap(rows("kjv_peer_bf16"), rows("kjv_peer_fp8"))
if t is None or p is None: print("no common iterations -> FAIL"); sys.exit()
print(f"tripod {t:+.2%}, peer {p:+.2%} (mean FP8 over bf16) -> {'PASS' if t <= p + 0.01 else 'FAIL'}")
PY
}
speed() {  # speed NAME: mean of iterations 6-20
  python3 - "$OUT/$1.jsonl" <<'PY'
import json, sys
try: r = [x for x in map(json.loads, open(sys.argv[1])) if x.get("iteration", 0) > 5 and "tokens_per_sec" in x]
except FileNotFoundError: r = []
if not r: print("no data"); sys.exit()
ms = sum(x["elapsed_ms"] for x in r) / len(r)
tps = sum(x["tokens_per_sec"] * x["elapsed_ms"] for x in r) / len(r) / ms
tf = r[-1]["tflops_per_gpu"] * tps / r[-1]["tokens_per_sec"]
print(f"{tps:.0f} tokens/s, {tf:.0f} TFLOP/s ({ms:.1f} ms/iter, peak {r[-1].get('mem_peak_bytes', 0) / 2**30:.1f} GiB)")
PY
}

if has layouts; then
  note "---- layouts with --fp8-format hybrid (bf16, ranks sharing the GPU) ----"
  small=(--num-layers 4 --hidden-size 256 --num-attention-heads 8 --seq-length 256 --mock-data --vocab-size 2048
         --micro-batch-size 2 --global-batch-size 16 --train-iters 20 --lr 3e-4 --log-interval 1 --eval-interval 0
         --bf16 --device cuda --distributed-backend gloo --deterministic-mode --fp8-format hybrid)
  for recipe in delayed tensorwise; do
    run one_$recipe train "${small[@]}" --fp8-recipe $recipe
    run tp2sp_$recipe launch --nproc-per-node 2 train "${small[@]}" --fp8-recipe $recipe --tensor-model-parallel-size 2 --sequence-parallel
    run pp2_$recipe launch --nproc-per-node 2 train "${small[@]}" --fp8-recipe $recipe --pipeline-model-parallel-size 2
    run dp2_$recipe launch --nproc-per-node 2 train "${small[@]}" --fp8-recipe $recipe --use-distributed-optimizer
    for l in tp2sp pp2 dp2; do note "$recipe $l vs one process: $(compare one_$recipe ${l}_$recipe 1e-3)"; done
  done
fi

if has convergence; then
  iters=${ITERS:-2000}
  if [[ -n $data_dir && -f $data_dir/kjv_text_document.idx ]]; then
    note "---- convergence: GPT-2 124M shape on KJV, $iters iterations, bf16 vs FP8 hybrid delayed and ${CONV_RUNS-e4m3 hpw nd} ----"
    kjv=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
         --vocab-size 50257 --data-path "$data_dir/kjv_text_document" --split 98,2,0 --micro-batch-size 16
         --global-batch-size 16 --train-iters "$iters" --lr 6e-4 --min-lr 6e-5 --lr-decay-style cosine
         --lr-warmup-iters 100 --weight-decay 0.1 --clip-grad 1.0 --eval-interval 0 --log-interval 10 --seed 1234
         --bf16 --device cuda --deterministic-mode)
    rm -rf "$OUT/ckpt_fp8"
    save=(); [[ ${CONV_RESUME:-1} == 1 ]] && save=(--save "$OUT/ckpt_fp8" --save-interval $((iters / 2)))
    # bf16, delayed and CONV_RUNS run together on the GPU (on an H100 four GPT-2 124M runs
    # of 2000 iterations take about 320 s at once). CONV_RUNS: tw, bw (hybrid tensorwise,
    # blockwise), e4m3 and bw4 (E4M3 gradients too: delayed, blockwise), hpw
    # (--no-fp8-wgrad), nd (the noise floor: bf16 without --deterministic-mode, the
    # embedding's gradient summed with atomics). The peer (CONV_PEER=1) runs eagerly, about
    # 2.5x a tripod run's time: three peer runs at once took 450-560 s on an H100, so keep
    # CONV_RUNS short beside it (CONV_RUNS="" runs bf16 and delayed only).
    run kjv_bf16 train "${kjv[@]}" &
    run kjv_fp8 train "${kjv[@]}" --fp8-format hybrid "${save[@]}" &
    declare -A conv=([tw]="--fp8-format hybrid --fp8-recipe tensorwise" [bw]="--fp8-format hybrid --fp8-recipe blockwise"
                     [e4m3]="--fp8-format e4m3" [bw4]="--fp8-format e4m3 --fp8-recipe blockwise"
                     [hpw]="--fp8-format hybrid --no-fp8-wgrad"
                     [fl]="--fp8-format hybrid --first-last-layers-bf16")
    runs=(); for r in ${CONV_RUNS-e4m3 hpw nd}; do
      if [[ $r != nd && -z ${conv[$r]:-} ]]; then
        note "CONV_RUNS: $r is not one of tw bw e4m3 bw4 hpw fl nd: skipped"
      elif [[ $r == nd ]]; then
        nd=(); for a in "${kjv[@]}"; do [[ $a == --deterministic-mode ]] || nd+=("$a"); done
        run kjv_bf16_nd train "${nd[@]}" &
        runs+=(bf16_nd)
      else
        read -ra f <<< "${conv[$r]}"
        run "kjv_fp8_$r" train "${kjv[@]}" "${f[@]}" &
        runs+=("fp8_$r")
      fi
    done
    if [[ ${CONV_PEER:-0} == 1 ]]; then
      peer=(python3 bench/torch_fp8_kjv.py "$data_dir/kjv_text_document" --iters "$iters")
      (timeout 900 "${peer[@]}" "$OUT/kjv_peer_bf16.jsonl" > "$OUT/kjv_peer_bf16.log" 2>&1) &
      (timeout 900 "${peer[@]}" "$OUT/kjv_peer_fp8.jsonl" --fp8 delayed > "$OUT/kjv_peer_fp8.log" 2>&1) &
    fi
    wait
    if [[ ${CONV_PEER:-0} == 1 ]]; then
      note "peer fp8 vs peer bf16 (all): $(compare kjv_peer_bf16 kjv_peer_fp8 1 0)"
      note "tripod's FP8 gap vs the peer's, iterations 200-1000: $(peer_gap 200 1000)"
      note "tripod's FP8 gap vs the peer's, iterations 1000-$iters: $(peer_gap 1000 "$iters")"
    fi
    for r in fp8 "${runs[@]}"; do
      note "$r vs bf16 from iteration 200: $(compare kjv_bf16 kjv_$r 0.01 200)"
      note "$r vs bf16, iterations 200-1000: $(compare kjv_bf16 kjv_$r 0.01 200 1000)"
      note "$r vs bf16, iterations 1000-$iters: $(compare kjv_bf16 kjv_$r 0.01 1000)"
      note "$r vs bf16 (all): $(compare kjv_bf16 kjv_$r 1 0)"
    done
    if [[ ${CONV_RESUME:-1} == 1 ]]; then
      run kjv_fp8_resumed train "${kjv[@]}" --fp8-format hybrid --load "$OUT/ckpt_fp8" --ckpt-step $((iters / 2))
      note "fp8 resumed at $((iters / 2)) vs uninterrupted: $(bitwise kjv_fp8 kjv_fp8_resumed)"
    fi
    rm -rf "$OUT/ckpt_fp8"
  else
    note "no KJV data (--data DIR): convergence skipped"
  fi
fi

if has determinism; then
  n=${DET_ITERS:-60}
  if [[ -n $data_dir && -f $data_dir/kjv_text_document.idx ]]; then
    note "---- determinism: GPT-2 124M shape on KJV, --deterministic-mode, $n iterations ----"
    det=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
         --vocab-size 50257 --data-path "$data_dir/kjv_text_document" --split 98,2,0 --micro-batch-size 16
         --global-batch-size 16 --train-iters "$n" --lr 6e-4 --min-lr 6e-5 --lr-decay-style cosine
         --lr-warmup-iters 10 --weight-decay 0.1 --clip-grad 1.0 --eval-interval 0 --log-interval 1 --seed 1234
         --bf16 --device cuda --deterministic-mode)
    run det_bf16_a train "${det[@]}"
    run det_bf16_b train "${det[@]}"
    note "bf16, two runs: $(bitwise det_bf16_a det_bf16_b)"
    rm -rf "$OUT/ckpt_det"
    run det_fp8_a train "${det[@]}" --fp8-format hybrid --save "$OUT/ckpt_det" --save-interval $((n / 2))
    run det_fp8_b train "${det[@]}" --fp8-format hybrid
    note "fp8 hybrid delayed, two runs: $(bitwise det_fp8_a det_fp8_b)"
    run det_fp8_resumed train "${det[@]}" --fp8-format hybrid --load "$OUT/ckpt_det" --ckpt-step $((n / 2))
    note "fp8 resumed at $((n / 2)) vs uninterrupted: $(bitwise det_fp8_a det_fp8_resumed)"
    rm -rf "$OUT/ckpt_det"
  else
    note "no KJV data (--data DIR): determinism skipped"
  fi
fi

if has swiglu; then
  note "---- the FP8 SwiGLU cast against its unfused path (bit for bit) ----"
  sw=(--num-layers 4 --hidden-size 512 --num-attention-heads 8 --group-query-attention --num-query-groups 4
      --ffn-hidden-size 1408 --swiglu --disable-bias-linear --normalization RMSNorm --position-embedding-type rope
      --seq-length 512 --mock-data --vocab-size 4096 --micro-batch-size 4 --global-batch-size 8 --train-iters 30
      --lr 1e-3 --log-interval 1 --eval-interval 0 --bf16 --device cuda --deterministic-mode --fp8-format hybrid
      --fp8-recipe delayed)
  run swiglu_fused train "${sw[@]}"
  export TRIPOD_FP8_UNFUSED_SWIGLU=1
  run swiglu_unfused train "${sw[@]}"
  unset TRIPOD_FP8_UNFUSED_SWIGLU
  note "swiglu cast fused vs unfused: $(bitwise swiglu_fused swiglu_unfused)"
fi

if has speed; then
  note "---- speed: bf16 vs FP8 hybrid (delayed), mean of iterations 6-20 ----"
  g15=(--num-layers 48 --hidden-size 1600 --num-attention-heads 25 --seq-length 1024 --max-position-embeddings 1024
       --mock-data --vocab-size 50257 --micro-batch-size 16 --global-batch-size 16 --train-iters 20 --lr 1e-4
       --log-interval 1 --eval-interval 0 --bf16 --device cuda)
  l8=(--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
      --ffn-hidden-size 14336 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu
      --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 8192 --mock-data --vocab-size 128256
      --micro-batch-size 1 --global-batch-size 1 --train-iters 20 --lr 1e-4 --log-interval 1 --eval-interval 0
      --bf16 --device cuda)
  for m in ${SPEED_MODELS:-g15 l8}; do
    declare -n args=$m
    run speed_${m}_bf16 train "${args[@]}"
    run speed_${m}_fp8 train "${args[@]}" --fp8-format hybrid
    if [[ $m == l8 && ${SPEED_UNFUSED:-0} == 1 ]]; then
      export TRIPOD_FP8_UNFUSED_SWIGLU=1
      run speed_${m}_fp8_unfused train "${args[@]}" --fp8-format hybrid
      unset TRIPOD_FP8_UNFUSED_SWIGLU
      note "$m fp8, SwiGLU cast unfused: $(speed speed_${m}_fp8_unfused)"
    fi
    b=$(speed speed_${m}_bf16); f=$(speed speed_${m}_fp8)
    note "$m bf16: $b"
    note "$m fp8:  $f"
    ratio() {
      python3 -c "
import sys
b, f = sys.argv[1], sys.argv[2]
g = lambda s: float(s.split()[0]) if s[0].isdigit() else 0
print(f'$m $3 / bf16 = {g(f) / g(b):.3f}' if g(b) else '$m: no ratio')" "$1" "$2" | tee -a "$summary"
    }
    ratio "$b" "$f" fp8
    # --fp8-recipe blockwise (cuBLASLt's block-scaled GEMMs)
    if [[ " ${SPEED_BLOCKWISE_MODELS:-g15 l8} " == *" $m "* ]]; then
      run speed_${m}_fp8bw train "${args[@]}" --fp8-format hybrid --fp8-recipe blockwise
      w=$(speed speed_${m}_fp8bw)
      note "$m fp8 blockwise: $w"
      ratio "$b" "$w" fp8bw
    fi
    # FP8 attention too (cuDNN's FP8 attention: head size 128, cuDNN 9.19 or later)
    if [[ " ${SPEED_DPA_MODELS:-l8} " == *" $m "* ]]; then
      run speed_${m}_fp8dpa train "${args[@]}" --fp8-format hybrid --fp8-dot-product-attention
      d=$(speed speed_${m}_fp8dpa)
      note "$m fp8 + --fp8-dot-product-attention: $d"
      ratio "$b" "$d" fp8dpa
    fi
  done
fi

if has param_gather; then
  note "---- --fp8-param-gather: dp2 with the distributed optimizer (bf16, ranks sharing the GPU) ----"
  pg=(--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length 1024 --max-position-embeddings 1024
      --mock-data --vocab-size 50257 --micro-batch-size 4 --global-batch-size 16 --train-iters 20 --lr 3e-4
      --log-interval 1 --eval-interval 0 --bf16 --device cuda --distributed-backend gloo --deterministic-mode
      --fp8-format hybrid --use-distributed-optimizer)
  for recipe in delayed tensorwise; do
    run pg_plain_$recipe launch --nproc-per-node 2 train "${pg[@]}" --fp8-recipe $recipe
    run pg_flag_$recipe launch --nproc-per-node 2 train "${pg[@]}" --fp8-recipe $recipe --fp8-param-gather
    note "$recipe --fp8-param-gather vs without: $(compare pg_plain_$recipe pg_flag_$recipe 1e-3)"
    note "$recipe without the flag: $(speed pg_plain_$recipe)"
    note "$recipe with the flag:    $(speed pg_flag_$recipe)"
  done
fi

if has gaps; then
  note "---- where the GPU idles (CUPTI), the 8B layer shape ----"
  if [[ -f ${GAP_PROFILER:-} ]]; then
    l8g=(--num-layers 8 --hidden-size 4096 --num-attention-heads 32 --group-query-attention --num-query-groups 8
         --ffn-hidden-size 14336 --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu
         --untie-embeddings-and-output-weights --disable-bias-linear --seq-length 8192 --mock-data --vocab-size 128256
         --micro-batch-size 1 --global-batch-size 1 --train-iters 14 --lr 1e-4 --log-interval 1 --eval-interval 0
         --bf16 --device cuda)
    for v in ${GAP_VARIANTS:-bf16 fp8}; do
      extra=(); [[ $v == fp8* ]] && extra=(--fp8-format hybrid)
      [[ $v == fp8dpa ]] && extra+=(--fp8-dot-product-attention)
      unfused=0; [[ $v == fp8_unfused ]] && unfused=1
      TRIPOD_FP8_UNFUSED_SWIGLU=$unfused GAP_PROFILER_WINDOW_MS=${GAP_PROFILER_WINDOW_MS:-1800} \
        CUDA_INJECTION64_PATH=$GAP_PROFILER timeout 600 "$BIN_TRIPOD" train "${l8g[@]}" "${extra[@]}" \
        > "$OUT/gaps_$v.log" 2>&1
      note "gaps $v (rc $?):"
      grep -A 75 "gap_profiler\] last" "$OUT/gaps_$v.log" | tee -a "$summary"
    done
  else
    note "gaps: set GAP_PROFILER to libgap_profiler.so"
  fi
fi
if grep -q -- "-> FAIL" "$summary"; then note "gpu_fp8_check: FAIL"; exit 1; fi
note "gpu_fp8_check: done"
