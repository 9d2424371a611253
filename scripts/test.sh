#!/usr/bin/env bash
# Runs every hvnet test, as root: formatting and lints, the Rust unit,
# property and doc tests, the fuzz corpora (replayed), the lab's
# statistics (no root needed), and the system tests that drive real Linux
# traffic in network namespaces they create and remove.
#
#   HVNET_FUZZ_SECONDS   explore each fuzz target this long after the
#                        replay (default 0: no exploration; see
#                        docs/testing.md)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/.cargo/bin:$PATH"
scripts/install-deps.sh

started=$SECONDS
step() { printf '\n== %s (at %dm%02ds)\n' "$*" $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)); }

step "format"
cargo fmt --all --check

step "lints"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "rust tests (unit, property, doc)"
# The binaries as scripts/install.sh builds them (the packaging test's install
# then reuses them), then the tests with the dev-dependencies' features.
cargo build --release -p hvnet -p hvnet-cni
cargo test --workspace --profile citest --all-features

step "fuzz corpora replay"
cargo test --profile replay --manifest-path fuzz/Cargo.toml

fuzz_seconds="${HVNET_FUZZ_SECONDS:-0}"
if [ "$fuzz_seconds" -gt 0 ]; then
    step "fuzz exploration (${fuzz_seconds}s per target)"
    command -v cargo-fuzz >/dev/null 2>&1 || cargo install --quiet --locked cargo-fuzz
    if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
        fuzz=(cargo +nightly fuzz run --fuzz-dir fuzz)
    else
        # No nightly: build with the stable compiler's bootstrap switch and
        # no sanitizer (coverage guidance still works).
        export RUSTC_BOOTSTRAP=1
        fuzz=(cargo fuzz run --fuzz-dir fuzz --sanitizer none)
    fi
    scratch="$(mktemp -d)"
    trap 'rm -rf "$scratch"' EXIT
    for t in $(ls fuzz/fuzz_targets | sed 's/\.rs$//'); do
        mkdir -p "$scratch/$t"
        # New inputs go to the scratch directory; the committed corpus is read.
        "${fuzz[@]}" "$t" "$scratch/$t" "fuzz/corpus/$t" -- -max_total_time="$fuzz_seconds" 2>&1 |
            grep -E '^(Done|==[0-9]+==ERROR|SUMMARY)|panicked' || true
        test "${PIPESTATUS[0]}" -eq 0
    done
fi

step "lab statistics, parsers and report (no root, no namespaces)"
python3 -m pytest -q lab/tests

step "system tests (network namespaces, real traffic)"
HVNET_BIN="$PWD/target/release/hvnet" python3 -m pytest -q --durations=20 tests/py
step "done"
