#!/usr/bin/env bash
# Builds every plugin main package into a .wasm with the standard Go
# toolchain (GOOS=wasip1, -buildmode=c-shared, //go:wasmexport):
#   plugins/<kind>/<name>/        -> bin/plugins/<name>.wasm
#   testdata/plugins/<name>/      -> testdata/plugins/<name>.wasm
# A package is rebuilt only when a .go file under it, pdk/, abi/ or model/
# is newer than its .wasm.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=bin/plugins
mkdir -p "$out"
built=0
build() { # src dst
  local src=$1 dst=$2
  if [ -f "$dst" ] && [ -z "$(find "$src" pdk abi model -name '*.go' -newer "$dst" 2>/dev/null | head -1)" ]; then
    return
  fi
  GOOS=wasip1 GOARCH=wasm $GO build -buildmode=c-shared -o "$dst" "./$src"
  built=$((built+1))
}
for dir in plugins/*/*/; do
  [ -d "$dir" ] || continue
  ls "$dir"*.go >/dev/null 2>&1 || continue
  build "${dir%/}" "$out/$(basename "$dir").wasm"
done
for dir in testdata/plugins/*/; do
  [ -d "$dir" ] || continue
  ls "$dir"*.go >/dev/null 2>&1 || continue
  build "${dir%/}" "testdata/plugins/$(basename "$dir").wasm"
done
echo "plugins: $built built"
