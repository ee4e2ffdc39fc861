//go:build !(linux && amd64)

package host

import "github.com/tetratelabs/wazero/api"

// termStub is a no-op here: calls keep wazero's termination check at
// every loop header (termcheck_amd64.go thins them on linux/amd64).
type termStub struct{}

func newTermStub() *termStub { return nil }

func (s *termStub) patch(api.Function) bool { return false }

func (s *termStub) close() {}
