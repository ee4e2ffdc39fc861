package fabrictest

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// Enqueued is what RequireEnqueued looks for: an execution of Kind (the
// only required field), on Lane when it is set, whose payload equals
// Args encoded as JSON when Args is not nil (compared as JSON values, so
// field order does not matter), and carrying at least Tags.
type Enqueued struct {
	Kind string
	Lane string
	Args any
	Tags map[string]string
}

// RequireEnqueued fails tb unless c's backend holds an execution matching
// want, in any state, and returns the first one found (its whole history,
// as Client.Inspect reads it). Payloads over backend.DetailPreviewBytes
// cannot be compared with Args and do not match.
func RequireEnqueued(tb testing.TB, c *sdk.Client, want Enqueued) *backend.ExecutionDetail {
	tb.Helper()
	if want.Kind == "" {
		tb.Fatal("fabrictest: RequireEnqueued: Enqueued.Kind is required")
	}
	var args any
	if want.Args != nil {
		b, err := json.Marshal(want.Args)
		if err != nil {
			tb.Fatalf("fabrictest: RequireEnqueued: encode Args: %v", err)
		}
		_ = json.Unmarshal(b, &args)
	}
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	var seen []string
	p := backend.ListExecutionsParams{Lane: want.Lane, Limit: 1000}
	for {
		page, err := c.Executions(ctx, p)
		if err != nil {
			tb.Fatalf("fabrictest: RequireEnqueued: %v", err)
		}
		for _, row := range page.Executions {
			if row.Kind != want.Kind {
				seen = append(seen, row.Kind)
				continue
			}
			d, err := c.Inspect(ctx, model.ExecutionID(row.ID))
			if err != nil {
				tb.Fatalf("fabrictest: RequireEnqueued: %v", err)
			}
			if why := mismatch(d, args, want.Tags); why != "" {
				seen = append(seen, row.Kind+" ("+why+")")
				continue
			}
			return d
		}
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	tb.Fatalf("fabrictest: no execution of kind %q (lane %q) matching %+v was enqueued; found: %v", want.Kind, want.Lane, want, seen)
	return nil
}

// mismatch says why d does not match args and tags ("" when it does).
func mismatch(d *backend.ExecutionDetail, args any, tags map[string]string) string {
	if args != nil {
		if d.PayloadBytes > int64(len(d.Payload)) {
			return fmt.Sprintf("payload of %d bytes, too long to compare", d.PayloadBytes)
		}
		var got any
		if err := json.Unmarshal([]byte(d.Payload), &got); err != nil || !reflect.DeepEqual(got, args) {
			return "args " + d.Payload
		}
	}
	for k, v := range tags {
		if d.Tags[k] != v {
			return fmt.Sprintf("tag %s=%q", k, d.Tags[k])
		}
	}
	return ""
}
