#!/bin/sh
# Install Debian's nsight-compute (component non-free) so the tests can run the real ncu's
# parser (tests/test_passes_real_ncu.py). Never fails the build: without apt-get, root or
# network it says why, and those tests skip with the same reason.
command -v ncu >/dev/null 2>&1 && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup-test: apt-get is not available, so the real ncu is not installed; its tests will be skipped"
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "setup-test: not root, so Debian's nsight-compute is not installed; the real-ncu tests will be skipped"
  exit 0
fi
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
if [ -n "$codename" ] && ! grep -rqs 'non-free' /etc/apt/sources.list /etc/apt/sources.list.d/; then
  printf 'Types: deb\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: non-free\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$codename" > /etc/apt/sources.list.d/ncuflow-non-free.sources
fi
echo "setup-test: installing Debian's nsight-compute (about 350 MB) for the real-ncu tests"
if apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nsight-compute >/dev/null; then
  exit 0
fi
echo "setup-test: apt-get could not install nsight-compute; the real-ncu tests will be skipped"
exit 0
