#!/usr/bin/env bash
# Installs what hvnet needs, builds it, and runs the demo: real TCP traffic
# between two network namespaces, captured on the wire, run through hvnet's
# software LRO and TSO engines. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-deps.sh
echo "demo: building hvnet (release)"
cargo build --release --quiet -p hvnet
HVNET_BIN="$PWD/target/release/hvnet" python3 scripts/demo.py "$@"
