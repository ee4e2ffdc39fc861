package valkey

import (
	"context"
	"fmt"
	"strconv"
	"strings"
)

// EnableZaddKeyevents adds the E (keyevent) and z (sorted set) flags to
// the server's notify-keyspace-events, keeping the flags already set, so
// that every ZADD publishes its key on ZaddKeyeventChannel. Due-time
// timers and workers use it to learn which partition has new work
// without polling. It fails where CONFIG is not permitted (managed
// servers); callers then fall back to polling.
func (c *Client) EnableZaddKeyevents(ctx context.Context) error {
	raw := c.Raw()
	kv, err := raw.Do(ctx, raw.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	if err != nil {
		return fmt.Errorf("config get notify-keyspace-events: %w", err)
	}
	cur := kv["notify-keyspace-events"]
	want := cur
	if !strings.Contains(want, "E") {
		want += "E"
	}
	if !strings.Contains(want, "z") && !strings.Contains(want, "A") {
		want += "z"
	}
	if want == cur {
		return nil
	}
	if err := raw.Do(ctx, raw.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", want).Build()).Error(); err != nil {
		return fmt.Errorf("config set notify-keyspace-events %s: %w", want, err)
	}
	return nil
}

// ZaddKeyeventChannel returns the keyevent channel ZADDs of the client's
// database are published on ("__keyevent@<db>__:zadd").
func (c *Client) ZaddKeyeventChannel(ctx context.Context) (string, error) {
	raw := c.Raw()
	info, err := raw.Do(ctx, raw.B().ClientInfo().Build()).ToString()
	if err != nil {
		return "", fmt.Errorf("client info: %w", err)
	}
	db := 0
	for _, f := range strings.Fields(info) {
		if v, ok := strings.CutPrefix(f, "db="); ok {
			db, _ = strconv.Atoi(v)
		}
	}
	return "__keyevent@" + strconv.Itoa(db) + "__:zadd", nil
}
