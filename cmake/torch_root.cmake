# LibTorch from an unpacked torch wheel that the interpreter does not import (TANDEM_TORCH_ROOT:
# make wheel TORCH=X.Y.Z), without torch's own CMake config: a CUDA build's config asks for
# CUDA's whole toolkit (nvrtc, nvtx) although tandem links none of it. What tandem links is
# named here: torch's headers, libtorch, libtorch_cpu and libc10. Sets what find_package(Torch)
# would: Torch_FOUND, Torch_VERSION, TORCH_INSTALL_PREFIX, TORCH_LIBRARIES, TORCH_LIBRARY,
# torch_cpu_LIBRARY, c10_LIBRARY.
set(TORCH_INSTALL_PREFIX "${TANDEM_TORCH_ROOT}")
string(REGEX MATCH "^[0-9]+\\.[0-9]+\\.[0-9]+" Torch_VERSION "${py_torch}")
set(Torch_FOUND TRUE)
foreach(lib IN ITEMS torch torch_cpu c10)
  set(var ${lib}_LIBRARY)
  if(lib STREQUAL "torch")
    set(var TORCH_LIBRARY)
  endif()
  find_library(${var} ${lib} PATHS "${TANDEM_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
  if(NOT ${var} OR NOT Torch_VERSION)
    message(STATUS "tandem: ${TANDEM_TORCH_ROOT} has no lib${lib}.so or no version.py: "
      "not a torch package")
    set(Torch_FOUND FALSE)
  endif()
endforeach()
if(Torch_FOUND AND NOT TARGET tandem_torch_root)
  add_library(tandem_torch_root INTERFACE IMPORTED)
  set_target_properties(tandem_torch_root PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES
      "${TANDEM_TORCH_ROOT}/include;${TANDEM_TORCH_ROOT}/include/torch/csrc/api/include"
    INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARY};${torch_cpu_LIBRARY};${c10_LIBRARY}")
  set(TORCH_LIBRARIES tandem_torch_root)
endif()
