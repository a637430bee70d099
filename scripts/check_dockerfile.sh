#!/usr/bin/env bash
# Checks that the Dockerfile's build steps run, where docker itself is not
# available (CI): the build context is copied as `docker build` would copy
# it (the tree minus .dockerignore's patterns, so a local build/ left in the
# tree gets in exactly when the image build would see it), then every RUN
# after the COPY runs in that copy with the Dockerfile's ARG defaults, its
# WORKDIR mapped to the copy and /usr/local/bin to a scratch folder, and the
# image's CMD must run. The RUN before the COPY (apt-get in the CUDA base
# image) is not run: each package it names must be one scripts/setup.sh
# installs. The build step's TRIPOD_CUDA=ON runs as OFF (said below) unless
# TRIPOD_DOCKER_CHECK_CUDA=1 and nvcc is here: what is checked is that the
# steps run on a clean copy; the CUDA compile itself is CI's build/ (CUDA
# wherever nvcc is found), and a second one would double CI's build time.
#
#   ./scripts/check_dockerfile.sh          (uses ccache when installed)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
fail() { echo "[check_dockerfile] FAILED: $*" >&2; exit 1; }
[[ -f .dockerignore ]] || fail "no .dockerignore: COPY . . would bring a local build/ (its CMakeCache.txt) into the image"

# The Dockerfile as logical lines (continuations joined).
mapfile -t lines < <(awk '/^[[:space:]]*#/ {next} { if (sub(/\\[[:space:]]*$/, "")) { buf = buf $0 " "; next } print buf $0; buf = "" }' Dockerfile)

declare -A args
workdir=/
copied=0
runs=()
for l in "${lines[@]}"; do
  read -r instr rest <<<"$l"
  case "${instr^^}" in
    ARG)
      name=${rest%%=*}
      [[ "$rest" == *=* ]] && args[$name]=${rest#*=} ;;
    WORKDIR) workdir=$rest ;;
    COPY) [[ "$rest" == ". ." ]] || fail "unexpected COPY '$rest' (this check knows COPY . . only)"; copied=1 ;;
    RUN)
      if ((copied)); then runs+=("$rest")
      else
        # The packages of the base-image step: a subset of setup.sh's list.
        for p in $(grep -o 'no-install-recommends.*' <<<"$rest" | sed 's/no-install-recommends//; s/&&.*//'); do
          [[ "$p" == -* ]] && continue
          grep -Eq "(^|[[:space:]])$p([[:space:]]|$)" scripts/setup.sh || fail "the Dockerfile installs '$p', which scripts/setup.sh does not list"
        done
      fi ;;
    CMD) cmd=$rest ;;
  esac
done
((copied)) || fail "no COPY . . in the Dockerfile"
((${#runs[@]})) || fail "no RUN after COPY . . in the Dockerfile"

# The build context: the tree minus .dockerignore (root-anchored patterns).
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
ctx="$scratch/context"
mkdir -p "$ctx" "$scratch/bin"
excludes=()
while IFS= read -r p; do
  p=${p%%#*}; p=${p%"${p##*[![:space:]]}"}
  [[ -z "$p" ]] && continue
  if [[ "$p" == '**/'* ]]; then excludes+=(--exclude="${p#\*\*/}")
  else excludes+=(--exclude="./$p"); fi
done < .dockerignore
tar -C "$root" "${excludes[@]}" -cf - . | tar -C "$ctx" -xf -
[[ ! -e "$ctx/build/CMakeCache.txt" ]] || fail ".dockerignore lets build/CMakeCache.txt into the image"

# ccache, when here, through CMake's launcher variables (the Dockerfile's own flags unchanged).
if command -v ccache >/dev/null; then
  export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache CCACHE_BASEDIR="$scratch"
fi
for run in "${runs[@]}"; do
  for name in "${!args[@]}"; do run=${run//\$\{$name\}/${args[$name]}}; run=${run//\$$name/${args[$name]}}; done
  run=${run//$workdir/$ctx}
  run=${run//\/usr\/local\/bin/$scratch\/bin}
  if [[ "$run" == *TRIPOD_CUDA=ON* ]] && ! { [[ "${TRIPOD_DOCKER_CHECK_CUDA:-0}" == 1 ]] && command -v nvcc >/dev/null; }; then
    echo "[check_dockerfile] the build step with TRIPOD_CUDA=OFF (TRIPOD_DOCKER_CHECK_CUDA=1 with nvcc: as written)"
    run=${run//TRIPOD_CUDA=ON/TRIPOD_CUDA=OFF}
  fi
  echo "[check_dockerfile] RUN $run"
  (cd "$ctx" && bash -ec "$run") || fail "RUN $run"
done

# CMD ["tripod", "--help"] with the image's PATH.
cmdline=$(sed 's/^\[//; s/\]$//; s/", *"/ /g; s/"//g' <<<"${cmd:-}")
[[ -n "$cmdline" ]] || fail "no CMD in the Dockerfile"
(PATH="$scratch/bin:$PATH" bash -ec "$cmdline" >/dev/null) || fail "CMD $cmdline"
echo "[check_dockerfile] OK: the Dockerfile's build steps ran on a clean copy of the tree and '$cmdline' works"
