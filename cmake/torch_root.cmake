# LibTorch from an unpacked torch wheel that the interpreter does not import (TANDEM_TORCH_ROOT:
# make wheel TORCH=X.Y.Z), without torch's own CMake config: a CUDA build's config asks for
# CUDA's whole toolkit (nvrtc, nvtx) although tandem links none of it. What tandem links is
# named here: torch's headers, libtorch, libtorch_cpu and libc10. Sets what find_package(Torch)
# would: Torch_FOUND, Torch_VERSION, TORCH_INSTALL_PREFIX, TORCH_LIBRARIES, TORCH_LIBRARY,
# torch_cpu_LIBRARY, c10_LIBRARY.
set(TORCH_INSTALL_PREFIX "${TANDEM_TORCH_ROOT}")
string(REGEX MATCH "^[0-9]+\\.[0-9]+\\.[0-9]+" Torch_VERSION "${py_torch}")
find_library(TORCH_LIBRARY torch PATHS "${TANDEM_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
find_library(torch_cpu_LIBRARY torch_cpu PATHS "${TANDEM_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
find_library(c10_LIBRARY c10 PATHS "${TANDEM_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
if(Torch_VERSION AND TORCH_LIBRARY AND torch_cpu_LIBRARY AND c10_LIBRARY)
  set(Torch_FOUND TRUE)
else()
  set(Torch_FOUND FALSE)
  message(STATUS "tandem: ${TANDEM_TORCH_ROOT} is not a torch package (it needs version.py "
    "and lib/libtorch.so, libtorch_cpu.so, libc10.so)")
endif()
if(Torch_FOUND AND NOT TARGET tandem_torch_root)
  add_library(tandem_torch_root INTERFACE IMPORTED)
  set_target_properties(tandem_torch_root PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES
      "${TANDEM_TORCH_ROOT}/include;${TANDEM_TORCH_ROOT}/include/torch/csrc/api/include"
    INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARY};${torch_cpu_LIBRARY};${c10_LIBRARY}")
  set(TORCH_LIBRARIES tandem_torch_root)
endif()
