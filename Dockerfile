# tripod on an NVIDIA CUDA base image, for clusters (mission step 2).
#   docker build -t tripod .
#   docker run --gpus all --ipc=host --shm-size=32g tripod tripod doctor
# The same packages scripts/setup.sh installs for building (not its test
# oracles: PyTorch, node, Slurm), then scripts/setup.sh builds with CUDA.
# NCCL, cuBLASLt and cuDNN come with the base image. --ipc=host or a large
# --shm-size: NCCL needs /dev/shm (tripod doctor checks it).
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-cudnn-devel-ubuntu24.04
FROM ${CUDA_IMAGE}

RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      build-essential cmake ninja-build pkg-config git \
      libopenblas-dev libgloo-dev libopenmpi-dev openmpi-bin \
      libsentencepiece-dev libicu-dev nlohmann-json3-dev libcli11-dev libfmt-dev \
      libgtest-dev libgmock-dev libbenchmark-dev hwloc libhwloc-dev \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/tripod
COPY . .
# TRIPOD_CUDA_ARCHS: e.g. "90" (H100/H200, the default) or "80;90".
ARG TRIPOD_CUDA_ARCHS=90
RUN TRIPOD_SKIP_APT=1 TRIPOD_CUDA=ON TRIPOD_CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=${TRIPOD_CUDA_ARCHS}" \
      ./scripts/setup.sh \
    && ln -s /opt/tripod/build/tripod /usr/local/bin/tripod

CMD ["tripod", "--help"]
