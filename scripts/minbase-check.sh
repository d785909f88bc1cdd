#!/usr/bin/env bash
# The wheel where nothing else is installed: a minimal Debian 12 root (debootstrap
# --variant=minbase, plus python3 and python3-venv: no compiler, no -dev package, no fmt,
# yaml-cpp, hwloc or UCX), a fresh virtual environment in it with the wheel's torch and the
# wheel, then
#   1. ldd of every ELF file of the installed package: each library it needs resolves inside
#      the wheel, inside torch, or to the manylinux base (glibc, libstdc++, libgcc_s, zlib);
#      only libtandem_cuda may name CUDA's runtime and NCCL unresolved (a CUDA torch has them);
#   2. a 2-rank DDP check (tests/python/workers/ddp_check.py) under the wheel's tandemrun and
#      under torchrun.
# Prints "minbase: OK ..." and exits 0 when all of it holds.
#
#   scripts/minbase-check.sh dist/tandem-*.whl
#
# Needs root (debootstrap, chroot, mounts in a private mount namespace). The root is made once
# and kept in ROOT (/var/cache/tandem/minbase-bookworm); the wheels it installs (torch and what
# torch needs, fetched once with the host's pip) in ROOT/../minbase-wheels. Environment:
# PYTHON (.venv/bin/python: the torch to install is its version), MIRROR.
set -euo pipefail
cd "$(dirname "$0")/.."
wheel=$(realpath "${1:?usage: scripts/minbase-check.sh <wheel>}")
ROOT=${ROOT:-/var/cache/tandem/minbase-bookworm}
WHEELS=${WHEELS:-$(dirname "$ROOT")/minbase-wheels}
PYTHON=${PYTHON:-$PWD/.venv/bin/python}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

[ "$(id -u)" = 0 ] || { echo "minbase: needs root (debootstrap, chroot)" >&2; exit 1; }
command -v debootstrap >/dev/null ||
  { echo "minbase: debootstrap is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }

if [ ! -x "$ROOT/usr/bin/python3" ]; then
  rm -rf "$ROOT.new"
  mkdir -p "$(dirname "$ROOT")"
  debootstrap --variant=minbase --include=python3,python3-venv bookworm "$ROOT.new" "$MIRROR" \
    >"$ROOT.log" 2>&1 || { tail -30 "$ROOT.log" >&2; exit 1; }
  mv "$ROOT.new" "$ROOT"
fi
# debootstrap writes no /etc/hosts, and torchrun --standalone meets at this host's name.
printf '127.0.0.1 localhost\n127.0.1.1 %s\n::1 localhost ip6-localhost\n' "$(hostname)" \
  >"$ROOT/etc/hosts"

# The exact build (2.13.0+cpu): a bare version could fetch another build of it (CUDA's, GBs).
torch_version=$("$PYTHON" -c 'import torch; print(torch.__version__)')
if ! ls "$WHEELS"/torch-"$torch_version"*.whl >/dev/null 2>&1; then
  mkdir -p "$WHEELS"
  "$PYTHON" -m pip download -q --only-binary=:all: -d "$WHEELS" "torch==$torch_version" \
    2> >(grep -v "^WARNING: Location" >&2)
fi

# What runs inside the root, in a mount namespace of its own (the mounts end with it).
inner=$(cat <<'EOF'
set -euo pipefail
mount -t proc proc "$ROOT/proc"
mount --rbind /sys "$ROOT/sys"
mount --rbind /dev "$ROOT/dev"
mkdir -p "$ROOT/mnt/wheels" "$ROOT/mnt/work"
mount --bind "$WHEELS" "$ROOT/mnt/wheels"
mount --bind "$WORK" "$ROOT/mnt/work"
exec chroot "$ROOT" /usr/bin/env -i PATH=/usr/bin:/bin HOME=/root OMP_NUM_THREADS=1 \
  /bin/bash /mnt/work/check.sh
EOF
)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$wheel" "$work/"
cp tests/python/workers/ddp_check.py "$work/"
cat >"$work/check.sh" <<EOF
set -euo pipefail
cd /mnt/work
rm -rf /opt/venv
python3 -m venv /opt/venv
start=\$(date +%s.%N)
# --no-compile: byte-compiling all of torch is half its install; in this root (env -i) Python
# writes the bytecode of what it imports at the first import.
/opt/venv/bin/pip install -q --no-compile --no-index --find-links /mnt/wheels "torch==$torch_version"
mid=\$(date +%s.%N)
/opt/venv/bin/pip install -q --no-index --find-links /mnt/wheels /mnt/work/$(basename "$wheel")
end=\$(date +%s.%N)
echo "minbase: pip install: torch \$(python3 -c "print(round(\$mid - \$start, 1))") s, the wheel \$(python3 -c "print(round(\$end - \$mid, 1))") s"
site=\$(/opt/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
torchlib=\$site/torch/lib
bad=0
elves=0
while IFS= read -r f; do
  head -c4 "\$f" | grep -q "ELF" || continue
  elves=\$((elves + 1))
  while IFS= read -r line; do
    case "\$line" in
      *libcudart.so*"not found"*|*libnccl.so*"not found"*)
        # CUDA's runtime and NCCL: a CUDA build of torch loads them (its nvidia wheels) before
        # libtandem_cuda is loaded, at the first CUDA tensor; a CPU torch never loads it.
        [ "\$(basename "\$f")" = libtandem_cuda.so ] || { echo "minbase: \$f: \$line" >&2; bad=1; } ;;
      *"not found"*) echo "minbase: \$f: \$line" >&2; bad=1 ;;
      *"=> "/*)
        lib=\$(sed -E 's/.*=> ([^ ]+).*/\1/' <<<"\$line")
        case "\$lib" in
          "\$site"/tandem/*|"\$site"/tandem.libs/*|"\$torchlib"/*) ;;
          */libc.so.6|*/libm.so.6|*/libdl.so.2|*/librt.so.1|*/libpthread.so.0|*/ld-linux-x86-64.so.2|*/libstdc++.so.6|*/libgcc_s.so.1|*/libz.so.1) ;;
          *) echo "minbase: \$f needs \$lib, outside the wheel and torch" >&2; bad=1 ;;
        esac ;;
    esac
  done < <(LD_LIBRARY_PATH=\$torchlib ldd "\$f")
done < <(find "\$site/tandem" "\$site/tandem.libs" -type f)
[ \$bad = 0 ] || exit 1
echo "minbase: \$elves ELF files, every library inside the wheel, torch or the manylinux base"
out=\$(timeout 300 /opt/venv/bin/tandemrun --nproc-per-node 2 ddp_check.py 2>&1) || { echo "\$out" >&2; exit 1; }
grep -q "ddp_check: OK rank 1 world 2" <<<"\$out" || { echo "\$out" >&2; exit 1; }
out=\$(timeout 300 /opt/venv/bin/torchrun --standalone --nproc-per-node 2 ddp_check.py 2>&1) || { echo "\$out" >&2; exit 1; }
grep -q "ddp_check: OK rank 1 world 2" <<<"\$out" || { echo "\$out" >&2; exit 1; }
echo "minbase: OK: 2-rank DDP under tandemrun and torchrun with $(basename "$wheel")"
EOF
ROOT=$ROOT WHEELS=$WHEELS WORK=$work unshare --mount --propagation private bash -c "$inner"
