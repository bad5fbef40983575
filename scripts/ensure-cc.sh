#!/usr/bin/env bash
# Make sure a C compiler is there: clawrig compiles its small sandbox launcher and init
# (src/clawrig/sandbox/sandbox_launch.c) on first use, ~5 ms of CPU less per trial than perl.
# Install Debian's gcc with apt-get when we are root, and musl-tools: the program built
# statically with musl starts ~15x cheaper than with glibc (glibc's start-up reads the CPU's
# cache sizes by cpuid, a trap to the hypervisor on a virtual machine). Never fatal: without a
# compiler perl does the same work, and the program's tests skip with the reason.
set -uo pipefail
have_cc() { command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1; }
have_musl() { command -v musl-gcc >/dev/null 2>&1; }
if have_cc && have_musl; then exit 0; fi
# one package set per apt-get command: a repository without musl-tools must not keep gcc out
install() {
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq --no-install-recommends "$@" >/dev/null 2>&1; }
}
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  if ! have_cc; then
    echo "no C compiler: installing Debian's gcc with apt-get (clawrig's sandbox launcher)" >&2
    install gcc libc6-dev
  fi
  if have_cc && ! have_musl; then
    echo "installing Debian's musl-tools with apt-get (clawrig's sandbox launcher, built statically)" >&2
    install musl-tools
  fi
fi
if have_cc; then
  have_musl \
    || echo "note: no musl-gcc: clawrig's sandbox launcher is built with glibc, whose start costs more CPU (Debian/Ubuntu: sudo apt-get install musl-tools)" >&2
  exit 0
fi
echo "no C compiler found: sandboxes start with perl instead (Debian/Ubuntu: sudo apt-get install gcc)" >&2
exit 0
