package host

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"unsafe"

	"github.com/tetratelabs/wazero"
)

// compiledCode returns the machine code wazero holds for a compiled
// module (the executable of its engine's compiled module); known is false
// when wazero's state has another shape, and the code nil when the engine
// no longer holds the module. The state is unexported (go.mod pins
// wazero v1.9.0); TestFileBackedCode fails on such a change.
//
// The engine is shared by every runtime of one compilation cache, so the
// code of one module (one wasm binary, one termination setting) is mapped
// once however many Modules compiled it.
func compiledCode(cm wazero.CompiledModule) (code []byte, known bool) {
	v := reflect.ValueOf(cm)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type().String() != "wazero.compiledModule" {
		return nil, false
	}
	mod := v.Elem().FieldByName("module")
	eng := v.Elem().FieldByName("compiledEngine")
	if !mod.IsValid() || mod.Kind() != reflect.Pointer || mod.IsNil() || !eng.IsValid() || eng.Kind() != reflect.Interface || eng.IsNil() {
		return nil, false
	}
	id := mod.Elem().FieldByName("ID")
	e := eng.Elem()
	if !id.IsValid() || e.Kind() != reflect.Pointer || e.IsNil() || e.Elem().Type().String() != "wazevo.engine" {
		return nil, false
	}
	mp, mux := e.Elem().FieldByName("compiledModules"), e.Elem().FieldByName("mux")
	if !mp.IsValid() || mp.Kind() != reflect.Map || mp.Type().Key() != id.Type() || !mux.IsValid() || mux.Type() != reflect.TypeFor[sync.RWMutex]() {
		return nil, false
	}
	// Unexported fields are read-only to reflect: re-make them as values
	// of their own type at their own address.
	mp = reflect.NewAt(mp.Type(), unsafe.Pointer(mp.UnsafeAddr())).Elem()
	key := reflect.NewAt(id.Type(), unsafe.Pointer(id.UnsafeAddr())).Elem()
	mu := (*sync.RWMutex)(unsafe.Pointer(mux.UnsafeAddr()))
	mu.RLock()
	c := mp.MapIndex(key)
	mu.RUnlock()
	if !c.IsValid() {
		return nil, true
	}
	if c.Kind() != reflect.Pointer || c.IsNil() || c.Elem().Kind() != reflect.Struct {
		return nil, false
	}
	exs := c.Elem().FieldByName("executables")
	if !exs.IsValid() || exs.Kind() != reflect.Pointer || exs.IsNil() {
		return nil, false
	}
	exe := exs.Elem().FieldByName("executable")
	if !exe.IsValid() || exe.Type() != reflect.TypeFor[[]byte]() {
		return nil, false
	}
	code = *(*[]byte)(unsafe.Pointer(exe.UnsafeAddr()))
	if len(code) == 0 {
		return nil, false
	}
	return code, true
}

// codeDirName is the directory under Config.CacheDir that holds machine
// code files (fileBackCode); the cache's pruning bounds it with the rest.
const codeDirName = "fabric-code"

// liveCode counts the Modules using each compiled module's machine code
// (keyed by its address: one per module in the shared engine), so that
// the compiled module is closed, and its code unmapped, when the last of
// them closes, and its code is moved onto a file once.
var liveCode = struct {
	mu   sync.Mutex
	uses map[uintptr]*codeUse
}{uses: map[uintptr]*codeUse{}}

type codeUse struct {
	refs int
	code []byte
	// backed: the code is a file mapping (fileBackCode), whose resident
	// pages may be dropped (trimCode).
	backed bool
}

// errCodeGone: the compiled module was closed by its last other user
// between compiling and holdCode; compiling again makes a fresh one.
var errCodeGone = errors.New("host: compiled module closed meanwhile")

// holdCode registers a Module's use of cm's machine code; on its first
// use the code is moved onto a file under dir (when dir is set; a failure
// there only leaves the code where it was, and is returned as moved). It
// returns the key for releaseCode and trimCode, 0 when wazero's state
// could not be read (the compiled module is then never closed, as
// before), and errCodeGone when the compiled module was closed meanwhile.
func holdCode(cm wazero.CompiledModule, dir string) (key uintptr, moved error, err error) {
	liveCode.mu.Lock()
	defer liveCode.mu.Unlock()
	code, known := compiledCode(cm)
	if !known {
		return 0, nil, nil
	}
	if code == nil {
		return 0, nil, errCodeGone
	}
	key = uintptr(unsafe.Pointer(unsafe.SliceData(code)))
	u := liveCode.uses[key]
	if u == nil {
		u = &codeUse{code: code}
		liveCode.uses[key] = u
		if dir != "" {
			moved = fileBackCode(code, dir)
			u.backed = moved == nil
		}
	}
	u.refs++
	return key, moved, nil
}

// trimCode drops the resident pages of file-backed machine code. A Go
// guest's runtime initialisation executes most of its code once (7 of
// 12 MiB for a stock scanner), its calls afterwards a few MiB of it: run
// after an instance's initialisation, only what calls execute stays
// resident.
func trimCode(key uintptr) {
	if key == 0 {
		return
	}
	liveCode.mu.Lock()
	defer liveCode.mu.Unlock()
	if u := liveCode.uses[key]; u != nil && u.backed {
		_ = dropCodePages(u.code)
	}
}

// releaseCode drops a Module's use of its machine code and closes the
// compiled module when it was the last, under the same lock as holdCode
// so that no new user picks it up half-closed.
func releaseCode(ctx context.Context, key uintptr, cm wazero.CompiledModule) error {
	if key == 0 {
		return nil
	}
	liveCode.mu.Lock()
	defer liveCode.mu.Unlock()
	u := liveCode.uses[key]
	if u == nil {
		return nil
	}
	if u.refs--; u.refs > 0 {
		return nil
	}
	delete(liveCode.uses, key)
	return cm.Close(ctx)
}
