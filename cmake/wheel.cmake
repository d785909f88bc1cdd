# pip install . / pip wheel . (scikit-build-core, pyproject.toml) and make wheel
# (scripts/wheel.sh, which installs this component of the main build): what the wheel holds,
# all under the package directory tandem/ of site-packages, component "python":
#   tandem/_backend*.so    the extension (its RPATH: tandem/lib)
#   tandem/lib/            libtandem, and libtandem_cuda where CUDA was found (libtandem loads
#                          it from its own directory)
#   tandem/bin/tandemrun   the launcher, which the console script `tandemrun` and
#                          `python -m tandem.run` start
#   tandem/_build.py       the torch release it was built against (tandem.torch checks it)
# The Python files come from src/python/tandem (wheel.packages).
if(NOT TANDEM_HAVE_PYTHON AND NOT SKBUILD)
  return()
elseif(NOT TANDEM_HAVE_PYTHON)
  message(FATAL_ERROR "tandem: pip cannot build the torch.distributed backend: it needs torch "
    ">= ${TANDEM_TORCH_MIN_VERSION} installed in the environment pip installs into (pip install "
    "torch first), the Python headers (apt-get install python3-dev) and the Debian packages of "
    "scripts/install-deps.sh. Configure output above says which is missing.")
endif()
install(TARGETS tandem LIBRARY DESTINATION tandem/lib NAMELINK_SKIP COMPONENT python)
install(TARGETS tandem_python LIBRARY DESTINATION tandem COMPONENT python)
install(TARGETS tandemrun RUNTIME DESTINATION tandem/bin COMPONENT python)
install(FILES ${CMAKE_BINARY_DIR}/python/tandem/_build.py DESTINATION tandem COMPONENT python)
set_target_properties(tandem_python PROPERTIES INSTALL_RPATH "$ORIGIN/lib")
set_target_properties(tandemrun PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")
if(TANDEM_HAVE_CUDA)
  # libtandem loads it at run time (no link dependency): build it with the extension.
  add_dependencies(tandem_python tandem_cuda)
  install(TARGETS tandem_cuda LIBRARY DESTINATION tandem/lib COMPONENT python)
endif()
