#!/usr/bin/env bash
# Builds every plugin main package into a .wasm with the standard Go
# toolchain (GOOS=wasip1, -buildmode=c-shared, //go:wasmexport):
#   plugins/<kind>/<name>/        -> bin/plugins/<name>.wasm
#   testdata/plugins/<name>/      -> testdata/plugins/<name>.wasm
# A package is rebuilt only when a .go file under it, pdk/, abi/ or model/
# is newer than its .wasm.
set -euo pipefail
# Whatever step fails says so (make alone reports only "Error 1").
trap 'rc=$?; echo "build-plugins.sh: failed (exit $rc) at line $LINENO: $BASH_COMMAND" >&2' ERR
cd "$(dirname "$0")/.."
GO=${GO:-go}
out=bin/plugins
mkdir -p "$out"
built=0
# stale lists "src dst" when dst is missing or older than a .go file under
# src, pdk/, abi/, model/ or internal/periodic/, and (a stock plugin, in
# bin/plugins) when it has no signature newer than itself: a stock file
# is only ever signed as built here, so one changed or unsigned since is
# built again from its source (then signed, below).
todo=()
total=0
stale() { # src dst
  local src=$1 dst=$2
  total=$((total+1))
  if [ -f "$dst" ] && [ -z "$(find "$src" pdk abi model internal/periodic -name '*.go' -newer "$dst" 2>/dev/null | head -1)" ]; then
    case $dst in
      "$out"/*) [ -f "$dst.sig" ] && [ "$dst.sig" -nt "$dst" ] && return ;;
      *) return ;;
    esac
  fi
  todo+=("$src $dst")
}
for dir in plugins/*/*/; do
  [ -d "$dir" ] || continue
  ls "$dir"*.go >/dev/null 2>&1 || continue
  stale "${dir%/}" "$out/$(basename "$dir").wasm"
done
for dir in testdata/plugins/*/; do
  [ -d "$dir" ] || continue
  ls "$dir"*.go >/dev/null 2>&1 || continue
  stale "${dir%/}" "testdata/plugins/$(basename "$dir").wasm"
done
# Build what is stale, as many at a time as there are cores, saying each
# one as it finishes (a first build takes minutes: say what is happening).
if [ ${#todo[@]} -gt 0 ]; then
  jobs=$(nproc 2>/dev/null || echo 2)
  echo "plugins: building ${#todo[@]} of $total wasm modules, $jobs at a time (GOOS=wasip1 go build)"
  export GO
  printf '%s\n' "${todo[@]}" | nl -w1 -s' ' | xargs -P "$jobs" -L 1 bash -c '
    i=$0 src=$1 dst=$2
    GOOS=wasip1 GOARCH=wasm $GO build -buildmode=c-shared -o "$dst" "./$src" || { echo "plugins: building $src failed" >&2; exit 1; }
    echo "plugins: built $(basename "$dst") ($i of '"${#todo[@]}"')"'
  built=${#todo[@]}
fi
# Corrupt fixtures are generated from a good module, never committed:
#   truncated.wasm  the first half of healthy.wasm (a half-written file)
#   corrupt.wasm    healthy.wasm with its first section header overwritten
#   notwasm.wasm    text with a .wasm name
good=testdata/plugins/healthy.wasm
if [ -f "$good" ]; then
  for f in truncated corrupt notwasm; do
    dst=testdata/plugins/$f.wasm
    [ -f "$dst" ] && [ "$dst" -nt "$good" ] && continue
    case $f in
      truncated) head -c $(( $(stat -c %s "$good") / 2 )) "$good" > "$dst" ;;
      corrupt) cp "$good" "$dst"; printf '\xff\xff\xff\xff\xff\xff\xff\xff' | dd of="$dst" bs=1 seek=8 conv=notrunc status=none ;;
      notwasm) echo "this is not a wasm module" > "$dst" ;;
    esac
    built=$((built+1))
  done
fi
# Hand-built fixtures (internal/wasmgen), for what no Go guest can do:
#   recurse_scan.wasm  a valid plugin whose fabric_scan recurses with no
#                      loop (rec(60): 2^61 calls), cut at its deadline
dst=testdata/plugins/recurse_scan.wasm
if [ ! -f "$dst" ] || [ -n "$(find internal/wasmgen abi -name '*.go' -newer "$dst" 2>/dev/null | head -1)" ]; then
  $GO run ./internal/wasmgen/cmd/wasmgen -recurse fabric_scan -depth 60 -name recurse_scan "$dst"
  built=$((built+1))
fi
echo "plugins: $built built"
# Sign the stock files built by this run (bin/plugins/NAME.wasm.sig) with
# FABRIC_SIGNING_KEY, else with a key generated here once
# (bin/plugin-signing.key; its public half bin/plugin-signing.pub is the
# key `fabric run` trusts by default for bin/plugins). Nothing else is
# signed: a file copied into bin/plugins that this tree did not build is
# left unsigned, and said so (review it, then sign it yourself).
key=${FABRIC_SIGNING_KEY:-bin/plugin-signing.key}
tosign=()
for t in ${todo[@]+"${todo[@]}"}; do
  dst=${t#* }
  case $dst in "$out"/*) tosign+=("$dst") ;; esac
done
unreviewed=()
for f in "$out"/*.wasm; do
  [ -f "$f" ] || continue
  [ -f "$f.sig" ] && [ "$f.sig" -nt "$f" ] && continue
  case " ${tosign[*]-} " in *" $f "*) continue ;; esac
  unreviewed+=("$f")
done
if [ ${#tosign[@]} -gt 0 ]; then
  if [ ! -f "$key" ] && [ -z "${FABRIC_SIGNING_KEY:-}" ]; then
    $GO run ./cmd/fabric plugins keygen --out "${key%.key}"
  fi
  $GO run ./cmd/fabric plugins sign --key "$key" "${tosign[@]}" >/dev/null
  echo "plugins: ${#tosign[@]} signed with $key"
fi
for f in ${unreviewed[@]+"${unreviewed[@]}"}; do
  echo "plugins: $f left unsigned: not built from this tree (review it, then: go run ./cmd/fabric plugins sign --key $key $f)"
done
# Prewarm the compilation cache (~/.cache/fabric/wazero) whenever it lacks
# a module, not only after a build (an interrupted first `make run`, a
# cleared cache): FABRIC_PREWARM=0 skips it.
#  - for the host `fabric run` starts: every file of bin/plugins, compiled
#    in parallel by `fabric plugins prewarm` (moments when all are cached);
#    FABRIC_PREWARM_BACKEND=valkey (`make run`) leaves out the Postgres
#    plugins, whose manifests a Valkey host reads without compiling them;
#  - for the tests (test binaries key their entries apart): every fixture
#    and plugin, with a non-race test binary, so `go test -race` loads
#    compiled modules instead of compiling under the race detector.
#    FABRIC_PREWARM_TESTS=0 skips this part (`make run` does).
# Either inspects every file it compiles: one the host would refuse fails
# it, and its output (which file, why) is shown.
if [ "${FABRIC_PREWARM:-1}" = 1 ]; then
  stock=("$out"/*.wasm)
  if [ -f "${stock[0]}" ]; then
    if ! $GO run ./cmd/fabric plugins prewarm --backend "${FABRIC_PREWARM_BACKEND:-all}" "${stock[@]}" | sed -e '/compiled already$/d' -e 's/^prewarm:/plugins: prewarm:/'; then
      echo "plugins: prewarm (fabric plugins prewarm bin/plugins/*.wasm) failed: a plugin file the host would refuse? (fabric plugins validate FILE says why; FABRIC_PREWARM=0 skips this step)" >&2
      trap - ERR
      exit 1
    fi
  fi
  if [ "${FABRIC_PREWARM_TESTS:-1}" = 1 ] && { [ "$built" -gt 0 ] || ! $GO run ./cmd/fabric plugins prewarm --check --tests "${stock[@]}" testdata/plugins/*.wasm >/dev/null 2>&1; }; then
    echo "plugins: compiling the modules for the tests' cache (once after a change; test hosts then load them in moments)"
    if ! log=$($GO test -count=1 -run '^TestFixturesValidate$' ./host/ 2>&1); then
      {
        echo "plugins: prewarm (go test -run TestFixturesValidate ./host/) failed: a plugin file the host would refuse?"
        grep -E '\.wasm: |fixture|panic|cannot|error' <<<"$log" | sed -e 's/^[[:space:]]*/  /' -e 's|\.\./bin/|bin/|' || echo "$log"
        echo "plugins: remove or rebuild the file(s) named above (fabric plugins validate FILE says why); FABRIC_PREWARM=0 skips this step"
      } >&2
      trap - ERR
      exit 1
    fi
    echo "plugins: compilation cache prewarmed for the tests"
  fi
fi
