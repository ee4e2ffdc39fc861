package host

import (
	"reflect"
	"unsafe"

	"github.com/tetratelabs/wazero"
)

// dropCodeBodies frees the function bodies wazero keeps in a compiled
// module's decoded form. They are read only to validate and compile the
// module, both done by then (instantiation uses the machine code, the
// data segments and the types), yet they stay on the Go heap for the
// module's life: 3.6 MiB of the 6.6 MiB a Go plugin's version holds.
//
// The bodies are unexported wazero state (go.mod pins wazero v1.9.0): it
// reports false and changes nothing when their shape differs;
// TestDropCodeBodies fails on such a change.
func dropCodeBodies(cm wazero.CompiledModule) bool {
	v := reflect.ValueOf(cm)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type().String() != "wazero.compiledModule" {
		return false
	}
	mod := v.Elem().FieldByName("module")
	if !mod.IsValid() || mod.Kind() != reflect.Pointer || mod.IsNil() || mod.Elem().Type().String() != "wasm.Module" {
		return false
	}
	code := mod.Elem().FieldByName("CodeSection")
	if !code.IsValid() || code.Kind() != reflect.Slice || code.Type().Elem().Kind() != reflect.Struct {
		return false
	}
	sf, ok := code.Type().Elem().FieldByName("Body")
	if !ok || sf.Type != reflect.TypeFor[[]byte]() {
		return false
	}
	for i := range code.Len() {
		body := code.Index(i).Field(sf.Index[0])
		*(*[]byte)(unsafe.Pointer(body.UnsafeAddr())) = nil
	}
	return true
}
