package valkey_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/lua"
	"github.com/fabric-host/fabric/model"
)

func TestMain(m *testing.M) { os.Exit(valkeytest.Run(m)) }

func TestLibrary(t *testing.T) {
	t.Parallel()

	t.Run("VersionIs34", func(t *testing.T) {
		t.Parallel()
		c := valkeytest.Client(t)
		ctx := valkeytest.Context(t, 10*time.Second)
		v, err := c.LibraryVersion(ctx)
		if err != nil || v != "34" {
			t.Fatalf("ff_version = %q, %v; want 34", v, err)
		}
		// FCALL ff_version 0 through the raw client, as the issue states it.
		raw, err := c.Raw().Do(ctx, c.Raw().B().Fcall().Function("ff_version").Numkeys(0).Build()).ToString()
		if err != nil || raw != "34" {
			t.Fatalf("FCALL ff_version 0 = %q, %v", raw, err)
		}
	})

	t.Run("ReloadsAfterFlushAndRestart", func(t *testing.T) {
		t.Parallel()
		srv := valkeytest.NewServer(t)
		c := valkeytest.Dial(t, srv.URL(), 0)
		ctx := valkeytest.Context(t, 30*time.Second)
		act, err := c.EnsureLibrary(ctx)
		if err != nil || act != valkey.LibraryLoaded {
			t.Fatalf("first EnsureLibrary = %s, %v", act, err)
		}
		if act, err := c.EnsureLibrary(ctx); err != nil || act != valkey.LibraryUpToDate {
			t.Fatalf("second EnsureLibrary = %s, %v", act, err)
		}
		if err := c.Raw().Do(ctx, c.Raw().B().FunctionFlush().Build()).Error(); err != nil {
			t.Fatal(err)
		}
		// The next call finds the library gone, reloads it and succeeds.
		rep, err := c.FCall(ctx, "ff_version_probe_missing", nil, nil)
		if err == nil || rep != nil {
			t.Fatalf("unknown function should still fail after reload, got %v", rep)
		}
		if v, err := c.LibraryVersion(ctx); err != nil || v != lua.Version {
			t.Fatalf("after reload-on-miss, ff_version = %q, %v", v, err)
		}
		// Restart the server: it comes back empty; the wrapper reloads.
		if err := srv.Restart(ctx); err != nil {
			t.Fatal(err)
		}
		valkeytest.Eventually(t, 30*time.Second, "library reloaded after restart", func() bool {
			c.FCall(ctx, "ff_version_probe_missing", nil, nil)
			v, err := c.LibraryVersion(ctx)
			return err == nil && v == lua.Version
		})
	})

	// ff_version stays FlowFabric's 34 whatever fabric changes in its
	// bodies: a server still running an older fabric body is reloaded, a
	// library of the same version without fabric's marker (FlowFabric's
	// own) is left alone.
	t.Run("ReplacesAnOlderFabricBodyOnly", func(t *testing.T) {
		t.Parallel()
		srv := valkeytest.NewServer(t)
		c := valkeytest.Dial(t, srv.URL(), 0)
		ctx := valkeytest.Context(t, 30*time.Second)
		raw := c.Raw()
		load := func(code string) {
			t.Helper()
			if err := raw.Do(ctx, raw.B().FunctionLoad().Replace().FunctionCode(code).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		code := func() string {
			t.Helper()
			libs, err := raw.Do(ctx, raw.B().FunctionList().Libraryname(lua.LibraryName).Withcode().Build()).ToArray()
			if err != nil || len(libs) != 1 {
				t.Fatalf("FUNCTION LIST: %d libraries, %v", len(libs), err)
			}
			m, err := libs[0].AsMap()
			if err != nil {
				t.Fatal(err)
			}
			src := m["library_code"]
			s, err := src.ToString()
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		if _, err := c.EnsureLibrary(ctx); err != nil {
			t.Fatal(err)
		}
		older := strings.Replace(lua.Source(), "-- source: lua/helpers.lua\n", "-- source: lua/helpers.lua\n-- an older body\n", 1)
		load(older)
		if act, err := c.EnsureLibrary(ctx); err != nil || act != valkey.LibraryReplaced {
			t.Fatalf("EnsureLibrary over an older fabric body = %s, %v; want replaced", act, err)
		}
		if code() != lua.Source() {
			t.Fatal("the older fabric body is still loaded")
		}
		foreign := strings.Replace(older, lua.BuildMarker+"\n", "", 1)
		load(foreign)
		if act, err := c.EnsureLibrary(ctx); err != nil || act != valkey.LibraryUpToDate {
			t.Fatalf("EnsureLibrary over a library without fabric's marker = %s, %v; want up to date", act, err)
		}
		if code() != foreign {
			t.Fatal("a library without fabric's marker was replaced")
		}
	})

	t.Run("PartitionConfigMismatchIsRefused", func(t *testing.T) {
		t.Parallel()
		c := valkeytest.Client(t)
		ctx := valkeytest.Context(t, 10*time.Second)
		if err := c.Bootstrap(ctx, valkey.BootstrapConfig{WaitpointHMACSecret: "00ff"}); err != nil {
			t.Fatal(err)
		}
		for _, idx := range []uint16{0, 255} {
			key := model.KeysOn(model.Partition{Family: model.FamilyFlow, Index: idx}).WaitpointHMACSecrets()
			sec, err := c.Raw().Do(ctx, c.Raw().B().Hget().Key(key).Field("secret:k1").Build()).ToString()
			if err != nil || sec != "00ff" {
				t.Fatalf("keystore %s secret:k1 = %q, %v", key, sec, err)
			}
		}
		got, found, err := c.ReadPartitionConfig(ctx)
		if err != nil || !found || got != model.DefaultPartitionConfig() {
			t.Fatalf("ReadPartitionConfig = %+v %v %v", got, found, err)
		}
		c.Raw().Do(ctx, c.Raw().B().Hset().Key(model.KeyConfigPartitions).FieldValue().FieldValue(model.ConfigFieldFlowPartitions, "128").Build())
		err = c.EnsurePartitionConfig(ctx)
		if err == nil || !strings.Contains(err.Error(), "partition_mismatch") {
			t.Fatalf("mismatch not reported: %v", err)
		}
	})
}

func TestServerStopKillsChild(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := valkey.StartServer(ctx, valkey.ServerConfig{Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	pid, dir := s.PID(), s.Dir()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("server dir %s left behind: %v", dir, err)
	}
	if _, err := os.Stat("/proc/" + valkeytest.Sprint(pid)); !os.IsNotExist(err) {
		t.Fatalf("server process %d still exists", pid)
	}
}
