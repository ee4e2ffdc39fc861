package env

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// Namespace is the import module of the Extism host ABI.
const Namespace = "extism:host/env"

// logOff is what get_log_level answers: Extism's "off", so that guests do
// not format lines nobody reads (as Extism's default).
const logOff = math.MaxInt32

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// Instantiate defines the Extism env module in r. Its functions serve the
// Kernel on the context of each guest call (WithKernel).
func Instantiate(ctx context.Context, r wazero.Runtime) error {
	b := r.NewHostModuleBuilder(Namespace)
	def := func(name string, params, results []api.ValueType, fn func(k *Kernel, stack []uint64)) {
		b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
			fn(must(ctx), stack)
		}), params, results).Export(name)
	}
	def("alloc", []api.ValueType{i64}, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.Alloc(s[0]) })
	def("free", []api.ValueType{i64}, nil, func(k *Kernel, s []uint64) { k.Free(s[0]) })
	def("length", []api.ValueType{i64}, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.Length(s[0]) })
	def("length_unsafe", []api.ValueType{i64}, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.Length(s[0]) })
	def("load_u8", []api.ValueType{i64}, []api.ValueType{i32}, func(k *Kernel, s []uint64) {
		s[0] = uint64(k.mustBytes(s[0], 1, "load_u8")[0])
	})
	def("load_u64", []api.ValueType{i64}, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.loadU64(s[0]) })
	def("store_u8", []api.ValueType{i64, i32}, nil, func(k *Kernel, s []uint64) {
		k.mustBytes(s[0], 1, "store_u8")[0] = byte(s[1])
	})
	def("store_u64", []api.ValueType{i64, i64}, nil, func(k *Kernel, s []uint64) {
		binary.LittleEndian.PutUint64(k.mustBytes(s[0], 8, "store_u64"), s[1])
	})
	def("input_length", nil, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.inputLen })
	def("input_offset", nil, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.input })
	def("input_load_u8", []api.ValueType{i64}, []api.ValueType{i32}, func(k *Kernel, s []uint64) {
		s[0] = uint64(k.inputBytes(s[0], 1)[0])
	})
	def("input_load_u64", []api.ValueType{i64}, []api.ValueType{i64}, func(k *Kernel, s []uint64) {
		s[0] = binary.LittleEndian.Uint64(k.inputBytes(s[0], 8))
	})
	def("input_set", []api.ValueType{i64, i64}, nil, func(k *Kernel, s []uint64) { k.input, k.inputLen = s[0], s[1] })
	def("output_set", []api.ValueType{i64, i64}, nil, func(k *Kernel, s []uint64) { k.output, k.outputLen = s[0], s[1] })
	def("output_length", nil, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.outputLen })
	def("output_offset", nil, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.output })
	def("error_set", []api.ValueType{i64}, nil, func(k *Kernel, s []uint64) { k.errPtr = s[0] })
	def("error_get", nil, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.errPtr })
	def("reset", nil, nil, func(k *Kernel, _ []uint64) { k.Reset() })
	def("memory_bytes", nil, []api.ValueType{i64}, func(k *Kernel, s []uint64) { s[0] = k.Memory() })
	def("config_get", []api.ValueType{i64}, []api.ValueType{i64}, func(k *Kernel, s []uint64) {
		v, ok := k.Config[string(k.mustBlock(s[0], "config_get"))]
		if !ok {
			s[0] = 0
			return
		}
		s[0] = k.Write([]byte(v))
	})
	def("var_get", []api.ValueType{i64}, []api.ValueType{i64}, func(k *Kernel, s []uint64) {
		name := string(k.mustBlock(s[0], "var_get"))
		k.Free(s[0])
		v, ok := k.vars[name]
		if !ok {
			s[0] = 0
			return
		}
		s[0] = k.Write(v)
	})
	def("var_set", []api.ValueType{i64, i64}, nil, func(k *Kernel, s []uint64) {
		name := string(k.mustBlock(s[0], "var_set"))
		k.Free(s[0])
		var v []byte
		if s[1] != 0 {
			v = append([]byte{}, k.mustBlock(s[1], "var_set")...)
			k.Free(s[1])
		}
		k.setVar(name, v)
	})
	def("http_request", []api.ValueType{i64, i64}, []api.ValueType{i64}, func(*Kernel, []uint64) {
		panic("extism kernel: http_request: this host allows no HTTP requests")
	})
	def("http_status_code", nil, []api.ValueType{i32}, func(_ *Kernel, s []uint64) { s[0] = 0 })
	def("http_headers", nil, []api.ValueType{i64}, func(_ *Kernel, s []uint64) { s[0] = 0 })
	def("get_log_level", nil, []api.ValueType{i32}, func(k *Kernel, s []uint64) {
		if k.Log == nil {
			s[0] = logOff
			return
		}
		s[0] = 1 // trace: every line
	})
	for name, level := range map[string]int{"log_trace": -8, "log_debug": -4, "log_info": 0, "log_warn": 4, "log_error": 8} {
		def(name, []api.ValueType{i64}, nil, func(k *Kernel, s []uint64) {
			if k.Log != nil {
				k.Log(level, string(k.mustBlock(s[0], name)))
			}
			k.Free(s[0])
		})
	}
	if _, err := b.Instantiate(ctx); err != nil {
		return fmt.Errorf("env: instantiate %s: %w", Namespace, err)
	}
	return nil
}

// mustBlock is the block at off (empty for 0, an empty block's offset).
func (k *Kernel) mustBlock(off uint64, what string) []byte {
	if off == 0 {
		return nil
	}
	b, ok := k.Block(off)
	if !ok {
		panic(fmt.Sprintf("extism kernel: %s: %d names no block", what, off))
	}
	return b
}
