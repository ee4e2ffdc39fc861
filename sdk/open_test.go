package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/backend/postgres/pgtest"
	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestOpen: sdk.Open goes from a URL to a ready client on both backends —
// on a new Valkey server the library is loaded and ff:config:partitions
// written, on a migrated Postgres database the schema is checked — and
// its NewWorker runs a job over the same connection; Close closes it.
func TestOpen(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		url  func(t *testing.T) string
		// check inspects the backend after Open.
		check func(t *testing.T, ctx context.Context, url string)
	}{
		{"Valkey", func(t *testing.T) string { return valkeytest.NewServer(t).URL() },
			func(t *testing.T, ctx context.Context, url string) {
				vc := valkeytest.Dial(t, url, 0)
				raw := vc.Raw()
				m, err := raw.Do(ctx, raw.B().Hgetall().Key(model.KeyConfigPartitions).Build()).AsStrMap()
				if err != nil || m[model.ConfigFieldFlowPartitions] == "" {
					t.Fatalf("partition config after Open: %v %v", m, err)
				}
				if v, err := raw.Do(ctx, raw.B().Fcall().Function("ff_version").Numkeys(0).Build()).ToString(); err != nil || v == "" {
					t.Fatalf("library after Open: %q %v", v, err)
				}
			}},
		{"Postgres", func(t *testing.T) string { return pgtest.NewDatabase(t, true) }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := valkeytest.Context(t, 3*time.Minute)
			url := tc.url(t)
			c, err := sdk.Open(ctx, url, sdk.ClientConfig{Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if tc.check != nil {
				tc.check(t, ctx, url)
			}
			id, err := c.CreateExecution(ctx, sdk.ExecutionSpec{Lane: "open", Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			w, err := c.NewWorker(ctx, sdk.WorkerConfig{WorkerID: "open", Lanes: []string{"open"}, Logger: valkeytest.Logger()})
			if err != nil {
				t.Fatal(err)
			}
			l := claimOne(t, ctx, w)
			if l.ID != id {
				t.Fatalf("claimed %s, want %s", l.ID, id)
			}
			if err := l.Complete(ctx, []byte("ok")); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// The worker's Close leaves the client's connection open.
			if st, err := c.State(ctx, id); err != nil || st.PublicState != model.PublicCompleted {
				t.Fatalf("after the worker closed: %+v %v", st, err)
			}
		})
	}
}

// TestOpenRefusals: what sdk.Open refuses, and that no refusal quotes the
// URL's password.
func TestOpenRefusals(t *testing.T) {
	t.Parallel()
	ctx := valkeytest.Context(t, 2*time.Minute)
	const secret = "hunter2-secret"
	unmigrated := pgtest.NewDatabase(t, false)
	for _, tc := range []struct {
		name, url string
		cfg       sdk.ClientConfig
		want      error
	}{
		{"unknown scheme", "mysql://root:" + secret + "@localhost/db", sdk.ClientConfig{}, backend.ErrNoDriver},
		{"no scheme", "localhost:6379", sdk.ClientConfig{}, nil},
		{"unreachable", "redis://u:" + secret + "@127.0.0.1:1", sdk.ClientConfig{}, nil},
		{"backend given", "redis://127.0.0.1:1", sdk.ClientConfig{Backend: (*valkey.Client)(nil)}, sdk.ErrInvalidInput},
		{"not migrated", unmigrated, sdk.ClientConfig{}, backend.ErrNotMigrated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := tc.cfg
			cfg.Logger = valkeytest.Logger()
			c, err := sdk.Open(ctx, tc.url, cfg)
			if err == nil {
				c.Close()
				t.Fatal("Open succeeded")
			}
			t.Logf("refused: %v", err)
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want %v", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Fatalf("the error quotes the password: %v", err)
			}
		})
	}
}
