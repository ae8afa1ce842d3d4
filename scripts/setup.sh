#!/usr/bin/env bash
# Idempotent set-up for a fresh Debian 12 machine: system packages, a virtual
# environment in .venv and the pinned Python dependencies. Sourced by the other
# scripts; safe to run again (it skips what is already in place).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

# chromium: the build report test renders the page headless.
# qemu-system-misc, gcc-riscv64-unknown-elf, picolibc-riscv64-unknown-elf: the riscv32 target (virt).
# nginx: the remote cache tests start one (WebDAV PUT) on 127.0.0.1 from a generated config (openssl makes its
# certificate for HTTPS); the package's own service is not needed.
debs=(chromium flatbuffers-compiler gcc-arm-none-eabi gcc-riscv64-unknown-elf libnewlib-arm-none-eabi nginx openssl
      picolibc-riscv64-unknown-elf qemu-system-arm qemu-system-misc)
missing=()
for pkg in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

venv="$root/.venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
stamp="$venv/.kiln-requirements"
want="$(cat "$root/requirements.txt" "$root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -r "$root/requirements.txt"
  # An environment made before the distribution was named kiln-mcu holds this checkout as `kiln` too.
  "$venv/bin/python" -m pip uninstall -q -y kiln 2>/dev/null || true
  "$venv/bin/python" -m pip install -q --no-deps -e "$root"
  # The wheels of Kiln's runtime dependencies (pyproject.toml) at the pinned versions: tests/test_package.py
  # installs the built Kiln wheel into a fresh virtual environment from them, without the network.
  mapfile -t deps < <("$venv/bin/python" -c 'import sys, tomllib; print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' "$root/pyproject.toml")
  "$venv/bin/python" -m pip download -q --only-binary=:all: -d "$venv/wheelhouse" -c "$root/requirements.txt" "${deps[@]}"
  echo "$want" > "$stamp"
fi

# A second environment, only for the tests that convert Keras models with TensorFlow's own TFLite
# converter (tests/tflite_convert.py runs in it as a subprocess): TensorFlow's dependencies never
# touch the pinned environment above.
tf_venv="$root/.venv-tf"
tf_stamp="$tf_venv/.kiln-requirements"
tf_want="$(sha256sum "$root/requirements-tf.txt" | cut -d' ' -f1)"
if [ ! -f "$tf_stamp" ] || [ "$(cat "$tf_stamp")" != "$tf_want" ]; then
  [ -x "$tf_venv/bin/python" ] || python3 -m venv "$tf_venv"
  "$tf_venv/bin/python" -m pip install -q -r "$root/requirements-tf.txt"
  echo "$tf_want" > "$tf_stamp"
fi
export PATH="$venv/bin:$PATH"
