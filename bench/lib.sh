# shellcheck shell=bash
# Shared by the bench/ scripts, sourced once `repo` is set: the defaults of a size sweep and
# the installation of missing Debian packages.

BUILD_DIR=${BUILD_DIR:-$repo/build}
MIN=${MIN:-8}
MAX=${MAX:-128M}
FACTOR=${FACTOR:-4}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
NP=${NP:-2}
COLLECTIVES=${COLLECTIVES:-"allreduce broadcast allgather"}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}

# install_packages WHAT PKG...: installs the Debian packages PKG (as root); otherwise says
# that WHAT is missing and how to install it, and exits 1.
install_packages() {
  local what=$1 me
  shift
  me=$(basename "$0")
  if [ "$(id -u)" -ne 0 ]; then
    echo "$me: $what is missing; run as root, or: sudo apt-get install -y $*" >&2
    exit 1
  fi
  echo "$me: installing $*"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "$@"
}
