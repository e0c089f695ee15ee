#!/usr/bin/env bash
# The Debian packages the tests and `npm start` need, installed when missing (root on these machines; `apt-get update`
# once, only when something is missing). Called by scripts/test.sh (`npm test`) and .ci/run, so a fresh machine needs
# nothing installed by hand.
set -euo pipefail

need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v ccache >/dev/null 2>&1 || need+=(ccache)
command -v g++ >/dev/null 2>&1 || need+=(g++)
command -v git >/dev/null 2>&1 || need+=(git)
command -v openssl >/dev/null 2>&1 || need+=(openssl)
# The network lab (harness/netlab.ts, docs/netlab.md): namespaces and veths (iproute2), NAT and loss (iptables).
command -v ip >/dev/null 2>&1 || need+=(iproute2)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
# The cluster of hubs (issue 30): a real Redis.
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
# NAT traversal for peer slices (issue 29): coturn's STUN/TURN server.
command -v turnserver >/dev/null 2>&1 || need+=(coturn)
# WebGPU in Node (npm package `webgpu`) loads the system Vulkan loader and uses Chromium's SwiftShader ICD.
ldconfig -p | grep -q 'libvulkan.so.1 ' || need+=(libvulkan1)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing system packages: ${need[*]} (run as root, or install them: apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "== installing system packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
  # coturn's package starts a system service on install; the tests start their own servers.
  if command -v systemctl >/dev/null 2>&1; then systemctl disable --now coturn redis-server >/dev/null 2>&1 || true; fi
fi
