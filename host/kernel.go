package host

import (
	"context"
	"fmt"

	"github.com/tetratelabs/wazero/api"
)

// kernelModule is an instance's Extism kernel module with its exported
// functions resolved once. Extism's env functions (alloc, input_load_u8,
// output_set, ...) look the kernel up in the call's context and call
// ExportedFunction on every guest call; in wazero each ExportedFunction
// makes a fresh call engine with its own stack, which was most of an
// empty plugin call's cost (BenchmarkScanEmpty: ten kernel lookups, their
// garbage and the GC it drove). An instance runs one call at a time, so
// the functions are not shared between goroutines.
//
// What remains per kernel call is wazero's own: with CloseOnContextDone
// (which a plugin's timeout needs) every Call starts a goroutine watching
// the context, the kernel's short functions included.
type kernelModule struct {
	api.Module
	fns map[string]api.Function
}

func newKernelModule(m api.Module) *kernelModule {
	return &kernelModule{Module: m, fns: make(map[string]api.Function, 24)}
}

// ExportedFunction implements api.Module, resolving each name once.
func (k *kernelModule) ExportedFunction(name string) api.Function {
	if f, ok := k.fns[name]; ok {
		return f
	}
	inner := k.Module.ExportedFunction(name)
	if inner == nil {
		return nil
	}
	k.fns[name] = inner
	return inner
}

// call runs the kernel export name with args and returns its one result.
func (k *kernelModule) call(ctx context.Context, name string, args ...uint64) (uint64, error) {
	f := k.ExportedFunction(name)
	if f == nil {
		return 0, fmt.Errorf("extism kernel has no %s export", name)
	}
	r, err := f.Call(ctx, args...)
	if err != nil || len(r) == 0 {
		return 0, err
	}
	return r[0], nil
}
