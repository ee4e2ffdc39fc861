package host

import (
	"context"
	"os"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/fabric-host/fabric/abi"
)

// TestDropCodeBodies: a compiled plugin's function bodies are dropped (a
// wazero upgrade that moves them fails here), and a module whose bodies
// were dropped still instantiates and runs: a fresh instance answers its
// manifest.
func TestDropCodeBodies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, err := os.ReadFile(benchFixture(t, "healthy"))
	if err != nil {
		t.Fatal(err)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(benchCache(t)))
	defer rt.Close(ctx)
	cm, err := rt.CompileModule(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if !dropCodeBodies(cm) {
		t.Fatal("dropCodeBodies found no bodies to drop (wazero's compiled module changed shape?)")
	}
	m, err := loadModule(ctx, benchFixture(t, "healthy"), benchLoader(t, benchCache(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	inst, err := m.newInstance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.close(ctx)
	out, err := m.callInstance(ctx, inst, abi.ExportManifest, nil, m.fns(m, ""))
	if err != nil {
		t.Fatal(err)
	}
	var man abi.Manifest
	if err := man.UnmarshalBinary(out); err != nil || man.Name == "" {
		t.Fatalf("manifest from a fresh instance: %+v, %v", man, err)
	}
}
