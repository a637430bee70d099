# Sourced by the GPU check scripts: use_stage DIR TMP sets BIN_TRIPOD (and
# STAGE_DIR) from a folder written by `scripts/gpu_check.sh --stage DIR`,
# unpacking its stage.tgz into TMP, and puts the staged libraries and any
# CUDA library the host keeps elsewhere (e.g. in Python wheels) on
# LD_LIBRARY_PATH. Needs a note() function for its log lines.
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
