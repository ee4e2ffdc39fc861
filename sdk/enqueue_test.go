package sdk_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fabric-host/fabric/backend/valkey/valkeytest"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// TestEnqueueOptions: every option lands in the stored execution, and
// every bad option fails with ErrInvalidInput on a client whose
// connection is closed, so none of them touched the network.
func TestEnqueueOptions(t *testing.T) {
	t.Parallel()
	b := setup(t, 16)
	deadline := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	id, err := sdk.EnqueueJSON(b.ctx, b.c, "render", map[string]int{"frame": 42},
		sdk.WithLane("gpu"), sdk.WithPriority(7), sdk.WithCapabilities("cuda", "gpu"),
		sdk.WithAttemptTimeout(90*time.Second), sdk.WithRetry(4, sdk.ExponentialBackoff(time.Second, time.Minute, 2)),
		sdk.WithTags(map[string]string{"app.project": "demo"}), sdk.WithTag("app.frame", "42"),
		sdk.WithDeadline(deadline), sdk.WithNamespace("studio"))
	if err != nil {
		t.Fatal(err)
	}
	s := b.state(t, id)
	if s.Lane != "gpu" || s.Kind != "render" || s.Namespace != "studio" || s.Fields["priority"] != "7" ||
		s.Fields["required_capabilities"] != "cuda,gpu" || s.PublicState != model.PublicWaiting {
		t.Fatalf("state = %+v", s.Fields)
	}
	raw := b.vc.Raw()
	k := model.KeysFor(id)
	tags, err := raw.Do(b.ctx, raw.B().Hgetall().Key(k.Tags()).Build()).AsStrMap()
	if err != nil || tags["app.project"] != "demo" || tags["app.frame"] != "42" {
		t.Fatalf("tags = %v, %v", tags, err)
	}
	polDoc, err := raw.Do(b.ctx, raw.B().Get().Key(k.Policy()).Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	var pol struct {
		Retry struct {
			Max     int `json:"max_retries"`
			Backoff struct {
				Type string `json:"type"`
			} `json:"backoff"`
		} `json:"retry_policy"`
		Timeout struct {
			Attempt  int64 `json:"attempt_timeout_ms"`
			Deadline int64 `json:"execution_deadline_ms"`
		} `json:"timeout_policy"`
	}
	if err := json.Unmarshal([]byte(polDoc), &pol); err != nil {
		t.Fatal(err)
	}
	if pol.Retry.Max != 4 || pol.Retry.Backoff.Type != "exponential" || pol.Timeout.Attempt != 90_000 || pol.Timeout.Deadline != deadline.UnixMilli() {
		t.Fatalf("policy = %s", polDoc)
	}
	payload, _ := raw.Do(b.ctx, raw.B().Get().Key(k.Payload()).Build()).ToString()
	if payload != `{"frame":42}` {
		t.Fatalf("payload = %s", payload)
	}

	// Delay, RunAt and idempotency.
	d, err := b.c.Enqueue(b.ctx, "later", nil, sdk.WithDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	at, err := b.c.Enqueue(b.ctx, "later", nil, sdk.WithRunAt(time.Now().Add(time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	past, err := b.c.Enqueue(b.ctx, "now", nil, sdk.WithRunAt(time.Now().Add(-time.Hour)))
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[model.ExecutionID]string{d: model.PublicDelayed, at: model.PublicDelayed, past: model.PublicWaiting} {
		if got := b.state(t, id).PublicState; got != want || b.state(t, id).Lane != sdk.DefaultLane {
			t.Errorf("%s: state %s on lane %s, want %s on %s", id, got, b.state(t, id).Lane, want, sdk.DefaultLane)
		}
	}
	u1, err := b.c.Enqueue(b.ctx, "once", nil, sdk.WithIdempotencyKey("order-7"))
	if err != nil {
		t.Fatal(err)
	}
	u2, err := b.c.Enqueue(b.ctx, "once", []byte("other"), sdk.WithIdempotencyKey("order-7"))
	if err != nil || u2 != u1 {
		t.Fatalf("second enqueue with the key = %s, %v; want %s", u2, err, u1)
	}

	// Bad options, on a closed connection.
	vc := valkeytest.Dial(t, valkeytest.Server(t).URL(), 0)
	closed, err := sdk.NewClient(b.ctx, sdk.ClientConfig{Backend: vc, Logger: valkeytest.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	vc.Close()
	bad := map[string][]sdk.EnqueueOption{
		"EmptyLane":         {sdk.WithLane("")},
		"LongLane":          {sdk.WithLane(strings.Repeat("l", 65))},
		"PriorityHigh":      {sdk.WithPriority(9001)},
		"PriorityNegative":  {sdk.WithPriority(-1)},
		"ZeroDelay":         {sdk.WithDelay(0)},
		"NegativeDelay":     {sdk.WithDelay(-time.Second)},
		"DelayAndRunAt":     {sdk.WithDelay(time.Second), sdk.WithRunAt(time.Now().Add(time.Hour))},
		"ZeroRunAt":         {sdk.WithRunAt(time.Time{})},
		"EmptyIdemKey":      {sdk.WithIdempotencyKey("")},
		"LongIdemKey":       {sdk.WithIdempotencyKey(strings.Repeat("k", sdk.IdempotencyKeyMaxBytes+1))},
		"NoCapabilities":    {sdk.WithCapabilities()},
		"CapabilityComma":   {sdk.WithCapabilities("a,b")},
		"TinyTimeout":       {sdk.WithAttemptTimeout(time.Microsecond)},
		"NegativeRetries":   {sdk.WithRetry(-1, sdk.Backoff{})},
		"BadBackoff":        {sdk.WithRetry(1, sdk.ExponentialBackoff(time.Minute, time.Second, 2))},
		"EmptyTagKey":       {sdk.WithTag("", "v")},
		"ZeroDeadline":      {sdk.WithDeadline(time.Time{})},
		"EmptyNamespace":    {sdk.WithNamespace("")},
		"NilOption":         {nil},
		"GoodThenBadOption": {sdk.WithPriority(1), sdk.WithLane("a\nb")},
	}
	for name, opts := range bad {
		if _, err := closed.Enqueue(b.ctx, "k", nil, opts...); !errors.Is(err, sdk.ErrInvalidInput) {
			t.Errorf("%s: err = %v, want ErrInvalidInput", name, err)
		}
	}
	if _, err := closed.Enqueue(b.ctx, "", nil); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("empty kind: %v", err)
	}
	if _, err := sdk.EnqueueJSON(b.ctx, closed, "k", func() {}); !errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("unencodable args: %v", err)
	}
	// The closed client does fail on the network for a valid enqueue: the
	// cases above really were refused before it.
	if _, err := closed.Enqueue(b.ctx, "k", nil); err == nil || errors.Is(err, sdk.ErrInvalidInput) {
		t.Errorf("valid enqueue on a closed client: %v, want a network error", err)
	}
}
