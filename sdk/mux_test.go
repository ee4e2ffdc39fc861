package sdk_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

type emailArgs struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

// syncBuffer is a log sink safe for the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMux runs a Mux as a worker's handler on a real server: typed JSON
// handlers get their decoded arguments, plain handlers their payload,
// middlewares wrap every kind in the order added, a panic becomes an
// error the outer middlewares see, and an unknown kind or an undecodable
// payload fails permanently (no retry despite a retry policy).
func TestMux(t *testing.T) {
	t.Parallel()
	b := setup(t, 8)
	logs := &syncBuffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))

	var mu sync.Mutex
	var order []string
	seen := map[string]error{} // kind → error the outermost middleware saw
	got := make(chan emailArgs, 1)
	trace := func(name string) sdk.Middleware {
		return func(next sdk.Handler) sdk.Handler {
			return func(ctx context.Context, job *sdk.Job) error {
				mu.Lock()
				order = append(order, name+">"+job.Kind)
				mu.Unlock()
				return next(ctx, job)
			}
		}
	}
	mux := sdk.NewMux()
	mux.Use(sdk.Observe(func(_ context.Context, job *sdk.Job, err error, _ time.Duration) {
		mu.Lock()
		seen[job.Kind] = err
		mu.Unlock()
	}), sdk.Logging(logger), trace("outer"), sdk.Recover(logger), trace("inner"))
	sdk.HandleJSON(mux, "email.send", func(_ context.Context, job *sdk.Job, a emailArgs) error {
		got <- a
		job.SetResult([]byte("sent to " + a.To))
		return nil
	})
	mux.Handle("boom", func(context.Context, *sdk.Job) error { panic("kaboom") })
	if k := mux.Kinds(); len(k) != 2 || k[0] != "boom" || k[1] != "email.send" {
		t.Fatalf("kinds = %v", k)
	}

	retry := sdk.WithRetry(3, sdk.FixedBackoff(time.Millisecond))
	mail, err := sdk.EnqueueJSON(b.ctx, b.c, "email.send", emailArgs{To: "ann@example.com", Subject: "hi"}, sdk.WithLane("mux"))
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := b.c.Enqueue(b.ctx, "no.such.kind", nil, sdk.WithLane("mux"), retry)
	if err != nil {
		t.Fatal(err)
	}
	garbled, err := b.c.Enqueue(b.ctx, "email.send", []byte("{not json"), sdk.WithLane("mux"), retry)
	if err != nil {
		t.Fatal(err)
	}
	boom, err := b.c.Enqueue(b.ctx, "boom", nil, sdk.WithLane("mux"))
	if err != nil {
		t.Fatal(err)
	}

	w := b.worker(t, sdk.WorkerConfig{WorkerID: "mux", Lanes: []string{"mux"}, Concurrency: 2})
	stop := runWorker(t, b.ctx, w, mux.ServeJob)
	if a := <-got; a.To != "ann@example.com" || a.Subject != "hi" {
		t.Fatalf("typed args = %+v", a)
	}
	valkeytest.Eventually(t, 30*time.Second, "all four ended", func() bool {
		for _, id := range []model.ExecutionID{mail, unknown, garbled, boom} {
			if !b.state(t, id).Terminal() {
				return false
			}
		}
		return true
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if s := b.state(t, mail); s.PublicState != model.PublicCompleted || string(b.result(t, mail)) != "sent to ann@example.com" {
		t.Fatalf("mail: %s %q", s.PublicState, b.result(t, mail))
	}
	for id, want := range map[model.ExecutionID]string{unknown: `no handler for execution kind "no.such.kind"`, garbled: "decode email.send arguments"} {
		s := b.state(t, id)
		if s.PublicState != model.PublicFailed || !strings.Contains(s.FailureReason, want) || s.AttemptCount != 1 {
			t.Errorf("%s: state %s, %d attempts, reason %q; want failed after 1 attempt with %q", id, s.PublicState, s.AttemptCount, s.FailureReason, want)
		}
	}
	if s := b.state(t, boom); s.PublicState != model.PublicFailed || !strings.Contains(s.FailureReason, "handler panic: kaboom") {
		t.Errorf("boom: %s %q", s.PublicState, s.FailureReason)
	}
	mu.Lock()
	defer mu.Unlock()
	if err := seen["no.such.kind"]; !errors.Is(err, sdk.ErrUnknownKind) || sdk.Outcome(err) != "fail" {
		t.Errorf("middleware saw %v for the unknown kind", err)
	}
	if err := seen["boom"]; err == nil || sdk.Outcome(err) != "error" {
		t.Errorf("middleware saw %v for the panic", err)
	}
	if err := seen["email.send"]; err != nil && !strings.Contains(err.Error(), "decode") {
		t.Errorf("middleware saw %v for email.send", err)
	}
	for i := 0; i+1 < len(order); i += 2 {
		if !strings.HasPrefix(order[i], "outer>") || !strings.HasPrefix(order[i+1], "inner>") {
			t.Fatalf("middleware order = %v, want outer before inner for each job", order)
		}
	}
	if len(order) != 8 {
		t.Fatalf("middleware calls = %v, want 2 per job", order)
	}
	out := logs.String()
	for _, want := range []string{"job ended", "kind=email.send", "outcome=complete", "outcome=fail", "handler panicked"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "ann@example.com") {
		t.Error("a payload reached the log")
	}
}

// TestMuxWiring: registration mistakes panic at start-up, not per job.
func TestMuxWiring(t *testing.T) {
	t.Parallel()
	mustPanic := func(name string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", name)
			}
		}()
		f()
	}
	m := sdk.NewMux()
	m.Handle("a", func(context.Context, *sdk.Job) error { return nil })
	mustPanic("duplicate kind", func() { m.Handle("a", func(context.Context, *sdk.Job) error { return nil }) })
	mustPanic("empty kind", func() { m.Handle("", func(context.Context, *sdk.Job) error { return nil }) })
	mustPanic("nil handler", func() { m.Handle("b", nil) })
	mustPanic("nil middleware", func() { m.Use(nil) })
	// Fallback replaces the unknown-kind failure.
	m.Fallback(func(context.Context, *sdk.Job) error { return sdk.DelayFor(time.Second) })
	if err := m.ServeJob(context.Background(), &sdk.Job{Kind: "zzz"}); sdk.Outcome(err) != "delay" {
		t.Fatalf("fallback result = %v", err)
	}
	// Timeout bounds the handler's context.
	m2 := sdk.NewMux()
	m2.Use(sdk.Timeout(20 * time.Millisecond))
	m2.Handle("slow", func(ctx context.Context, _ *sdk.Job) error { <-ctx.Done(); return ctx.Err() })
	if err := m2.ServeJob(context.Background(), &sdk.Job{Kind: "slow"}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("timeout result = %v", err)
	}
}
