package host

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/fabric-host/fabric/host/env"
	"github.com/fabric-host/fabric/host/hostfn"
)

// Faults of a plugin call, told apart. Each quarantines the plugin; its
// label (FaultKind) names it in PluginStatus.Reason, Fault and /metrics.
var (
	// ErrPluginError: the plugin returned an error of its own (a non-zero
	// status, with or without a message): it ran and said no.
	ErrPluginError = errors.New("host: plugin returned an error")
	// ErrOverMemory: the plugin died for want of memory under its cap.
	ErrOverMemory = errors.New("host: plugin ran out of memory under its cap")
	// ErrOverOutput: the plugin's output is larger than the host takes;
	// its size is read first and the bytes are never copied.
	ErrOverOutput = errors.New("host: plugin output over its limit")
	// ErrOverBudget: the plugin made more host calls or backend commands
	// than its budget allows (each refused with abi.CodeBudget).
	ErrOverBudget = errors.New("host: plugin over its host-call budget")
)

// Fault labels, as FaultKind returns them.
const (
	FaultTrap        = "trap"
	FaultPluginError = "plugin error"
	FaultTimeout     = "timeout"
	FaultOverMemory  = "over memory"
	FaultOverOutput  = "over output"
	FaultOverBudget  = "over budget"
	FaultBadOutput   = "bad output"
	// FaultDenied labels a host call refused for want of a grant: the
	// plugin sees abi.CodeDenied and carries on; it is counted
	// (PluginStatus.Denied, fabric_plugin_host_calls_refused_total), not a
	// fault.
	FaultDenied = "denied"
)

// FaultKind labels a plugin call's failure: trap, plugin error, timeout
// (its own timeout or the deadline of its partition leases), over memory,
// over output, over budget, bad output (a malformed message); "" for an
// error that is none of these.
func FaultKind(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, ErrOverBudget):
		return FaultOverBudget
	case errors.Is(err, ErrTimeout):
		return FaultTimeout
	case errors.Is(err, ErrOverMemory):
		return FaultOverMemory
	case errors.Is(err, ErrOverOutput):
		return FaultOverOutput
	case errors.Is(err, ErrPluginError):
		return FaultPluginError
	case errors.Is(err, ErrBadOutput):
		return FaultBadOutput
	case errors.Is(err, ErrTrap):
		return FaultTrap
	}
	return ""
}

// export returns the instance's exported function name, or nil, resolved
// once per instance.
func (inst *instance) export(name string) api.Function {
	if f, ok := inst.exports[name]; ok {
		return f
	}
	f := inst.mod.ExportedFunction(name)
	if f != nil {
		inst.exports[name] = f
	}
	return f
}

// initGuest runs the guest's language runtime initialisation once, as
// Extism would before a first call: a WASI reactor's _initialize (then a
// Haskell hs_init), else a command's __wasm_call_ctors.
func initGuest(ctx context.Context, main api.Module) error {
	call := func(name string, args ...uint64) error {
		f := main.ExportedFunction(name)
		if f == nil {
			return nil
		}
		_, err := f.Call(ctx, args...)
		if exit, ok := err.(*sys.ExitError); ok && exit.ExitCode() == 0 {
			err = nil
		}
		return err
	}
	if main.ExportedFunction("_initialize") == nil {
		return call("__wasm_call_ctors")
	}
	if err := call("_initialize"); err != nil {
		return err
	}
	return call("hs_init", 0, 0)
}

// initInstance runs inst's guest runtime initialisation (initGuest) ahead
// of its first call.
func (m *Module) initInstance(ctx context.Context, inst *instance) error {
	inst.kernel.Reset()
	if err := initGuest(env.WithKernel(ctx, inst.kernel), inst.mod); err != nil {
		return m.callFailed(ctx, inst, "runtime init", err)
	}
	inst.inited = true
	trimCode(m.codeKey)
	return nil
}

// callInstance calls export with input on inst: it resolves the caller
// for host functions, checks the output's size before reading it, and
// tells the failures apart (see FaultKind).
//
// The call is Extism's call sequence with the kernel host-side (package
// env): reset the blocks, set the input, call the export once, then read
// the error or the output the guest set. One wasm call per plugin call.
func (m *Module) callInstance(ctx context.Context, inst *instance, export string, input []byte, c *hostfn.Caller) ([]byte, error) {
	inst.stderr.Reset()
	defer hostfn.EndCall(ctx, c) // roll back an sql transaction the call left open
	k := inst.kernel
	k.Reset()
	if uint64(len(input)) > uint64(m.memoryBytes()) {
		return nil, fmt.Errorf("%w: %s: input of %d bytes above the plugin's %d bytes of memory", ErrTrap, export, len(input), m.memoryBytes())
	}
	if err := k.SetInput(input); err != nil {
		return nil, fmt.Errorf("%w (%d MiB): %s: %w", ErrOverMemory, m.memoryBytes()>>20, export, err)
	}
	cctx := env.WithKernel(hostfn.WithCaller(ctx, c), k)
	if !inst.inited {
		if err := initGuest(cctx, inst.mod); err != nil {
			return nil, m.callFailed(ctx, inst, export+" (runtime init)", err)
		}
		inst.inited = true
		trimCode(m.codeKey)
	}
	f := inst.export(export)
	if f == nil {
		return nil, fmt.Errorf("%w: %s is not exported", ErrTrap, export)
	}
	if err := ctx.Err(); err != nil {
		// Done before it started: the loops' checks would see it only
		// after thousands of iterations.
		return nil, m.callFailed(ctx, inst, export, err)
	}
	res, err := f.Call(cctx)
	if exit, ok := err.(*sys.ExitError); ok && exit.ExitCode() == 0 {
		err = nil
	}
	if err != nil {
		return nil, m.callFailed(ctx, inst, export, err)
	}
	var rc uint32
	if len(res) > 0 {
		rc = api.DecodeU32(res[0])
	}
	if msg, ok := k.Error(); ok {
		msg = msg[:min(len(msg), 1024)]
		return nil, fmt.Errorf("%w: %s: %s (status %d)", ErrPluginError, export, strings.ToValidUTF8(string(msg), "?"), rc)
	}
	if rc != 0 {
		return nil, fmt.Errorf("%w: %s returned status %d", ErrPluginError, export, rc)
	}
	off, n := k.Output()
	if m.maxOut > 0 && n > uint64(m.maxOut) {
		return nil, fmt.Errorf("%w: %s returned %d bytes, above the %d limit", ErrOverOutput, export, n, m.maxOut)
	}
	if n == 0 {
		return nil, nil
	}
	view, ok := k.Bytes(off, n)
	if !ok {
		return nil, fmt.Errorf("%w: %s: output of %d bytes at %d is outside kernel memory", ErrBadOutput, export, n, off)
	}
	return append([]byte(nil), view...), nil
}

// callFailed classifies a call that did not return: cut at its deadline
// or by the host stopping, out of memory, or a trap.
func (m *Module) callFailed(ctx context.Context, inst *instance, what string, err error) error {
	if cut := budgetOfCall(ctx).cutCause(); cut != nil {
		return cut
	}
	if ctx.Err() != nil {
		cause := context.Cause(ctx)
		if errors.Is(cause, ErrTimeout) || errors.Is(cause, ErrLeaseEnded) {
			return leaseCut(ctx, cause)
		}
		return fmt.Errorf("host: %s cancelled: %w", what, cause)
	}
	msg, _, _ := strings.Cut(err.Error(), "\n")
	guest := guestFatal(inst.stderr.String())
	if guest != "" {
		msg += "; guest: " + guest
	}
	if errors.Is(err, hostfn.ErrMalformedRequest) {
		return fmt.Errorf("%w: %s: %s", ErrBadOutput, what, msg)
	}
	if errors.Is(err, env.ErrOutOfMemory) || strings.Contains(msg, "out of memory") || strings.Contains(msg, "memory limit") {
		return fmt.Errorf("%w (%d MiB): %s: %s", ErrOverMemory, m.memoryBytes()>>20, what, msg)
	}
	return fmt.Errorf("%w: %s: %s", ErrTrap, what, msg)
}
