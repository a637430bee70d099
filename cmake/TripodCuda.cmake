# CUDA toolkit, cuBLASLt, cuDNN and NCCL. NCCL and cuDNN ship no CMake
# config, so they are located next to the toolkit (or NCCL_HOME/CUDNN_HOME).
# cuDNN is header-only at build time: the backend loads libcudnn.so.9 with
# dlopen at run time (backend/cuda/cudnn_graph.cpp), so binaries run where it
# is missing. Without cudnn_graph.h the cuDNN attention path is compiled out.
set(TRIPOD_WITH_CUDA OFF)
if(NOT TRIPOD_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    set(TRIPOD_WITH_CUDA ON)
  elseif(TRIPOD_CUDA STREQUAL "ON")
    message(FATAL_ERROR "TRIPOD_CUDA=ON but no nvcc was found. Put the CUDA toolkit's bin/ on PATH "
                        "or set CUDACXX, or configure with -DTRIPOD_CUDA=OFF.")
  endif()
endif()

if(TRIPOD_WITH_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)   # H100/H200; 80 (A100) is supported: -DCMAKE_CUDA_ARCHITECTURES="80;90"
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{NCCL_HOME}/include)
  find_library(NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} $ENV{NCCL_HOME}/lib)
  find_path(CUDNN_INCLUDE_DIR cudnn_graph.h HINTS ${CUDAToolkit_INCLUDE_DIRS} $ENV{CUDNN_HOME}/include)
  if(NOT NCCL_LIBRARY OR NOT NCCL_INCLUDE_DIR)
    message(FATAL_ERROR "NCCL not found next to the CUDA toolkit; set NCCL_HOME or -DTRIPOD_CUDA=OFF")
  endif()
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                        INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
  add_library(tripod_cudnn_headers INTERFACE)
  if(CUDNN_INCLUDE_DIR)
    target_include_directories(tripod_cudnn_headers INTERFACE ${CUDNN_INCLUDE_DIR})
    target_compile_definitions(tripod_cudnn_headers INTERFACE TRIPOD_HAVE_CUDNN_GRAPH=1)
  endif()
  target_link_libraries(tripod_cudnn_headers INTERFACE ${CMAKE_DL_LIBS})
  message(STATUS "tripod: CUDA ${CUDAToolkit_VERSION}, archs ${CMAKE_CUDA_ARCHITECTURES}, NCCL ${NCCL_LIBRARY}, "
                 "cuDNN headers ${CUDNN_INCLUDE_DIR} (library loaded at run time)")
else()
  message(STATUS "tripod: CPU-only build (no CUDA backend)")
endif()
