package host

import (
	"reflect"
	"unsafe"

	"github.com/tetratelabs/wazero"
)

// decodedDataSegments returns pointers to the Init bytes of every data segment
// wazero keeps in a compiled module's decoded form, and that decoded
// module (*wasm.Module), whose life bounds theirs: an instance keeps its
// module as its Source, so once the module is unreachable no instance
// reads the bytes. ok is false when wazero's state has another shape (it
// is unexported; go.mod pins wazero v1.9.0); TestFileBackedData fails on
// such a change.
func decodedDataSegments(cm wazero.CompiledModule) (inits []*[]byte, module *byte, ok bool) {
	v := reflect.ValueOf(cm)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type().String() != "wazero.compiledModule" {
		return nil, nil, false
	}
	mod := v.Elem().FieldByName("module")
	if !mod.IsValid() || mod.Kind() != reflect.Pointer || mod.IsNil() || mod.Elem().Type().String() != "wasm.Module" {
		return nil, nil, false
	}
	data := mod.Elem().FieldByName("DataSection")
	if !data.IsValid() || data.Kind() != reflect.Slice || data.Type().Elem().Kind() != reflect.Struct {
		return nil, nil, false
	}
	sf, ok := data.Type().Elem().FieldByName("Init")
	if !ok || sf.Type != reflect.TypeFor[[]byte]() {
		return nil, nil, false
	}
	for i := range data.Len() {
		inits = append(inits, (*[]byte)(unsafe.Pointer(data.Index(i).Field(sf.Index[0]).UnsafeAddr())))
	}
	return inits, (*byte)(mod.UnsafePointer()), true
}
