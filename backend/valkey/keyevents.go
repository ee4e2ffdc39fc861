package valkey

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
)

// EnableZaddKeyevents adds the E (keyevent) and z (sorted set) flags to
// the server's notify-keyspace-events, keeping the flags already set, so
// that every ZADD publishes its key on ZaddKeyeventChannel. Due-time
// timers and workers use it to learn which partition has new work
// without polling. It fails where CONFIG is not permitted (managed
// servers); callers then fall back to polling. On a cluster it sets the
// flags on every reachable primary (CONFIG is per node, and a restarted
// node comes back without them).
func (c *Client) EnableZaddKeyevents(ctx context.Context) error {
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if err := enableZaddKeyeventsOn(ctx, n.Client); err != nil {
			return c.onNode(n, err)
		}
	}
	return nil
}

func enableZaddKeyeventsOn(ctx context.Context, node vk.Client) error {
	kv, err := node.Do(ctx, node.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
	if err != nil {
		return fmt.Errorf("config get notify-keyspace-events: %w", err)
	}
	cur := kv["notify-keyspace-events"]
	if hasZaddKeyevents(cur) {
		return nil
	}
	want := cur
	if !strings.Contains(want, "E") {
		want += "E"
	}
	if !strings.Contains(want, "z") && !strings.Contains(want, "A") {
		want += "z"
	}
	if err := node.Do(ctx, node.B().ConfigSet().ParameterValue().ParameterValue("notify-keyspace-events", want).Build()).Error(); err != nil {
		return fmt.Errorf("config set notify-keyspace-events %s: %w", want, err)
	}
	return nil
}

// ZaddKeyeventChannel returns the keyevent channel ZADDs of the client's
// database are published on ("__keyevent@<db>__:zadd"; a cluster has only
// database 0).
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

// ErrPrimariesChanged ends a WatchZaddKeyevents whose view of the cluster
// primaries is out of date: the set of primaries changed, or one of them
// lacks the keyevent notify flags the others have (it restarted, or it
// came up between the caller setting the flags and subscribing). The
// caller sets the notify flags and subscribes again. It matches
// backend.ErrTopologyChanged.
var ErrPrimariesChanged error = primariesChanged{}

type primariesChanged struct{}

func (primariesChanged) Error() string { return "cluster primaries changed" }

func (primariesChanged) Is(target error) bool { return target == backend.ErrTopologyChanged }

// primariesWatchInterval is how often WatchZaddKeyevents checks the set of
// reachable cluster primaries.
const primariesWatchInterval = 2 * time.Second

// WatchZaddKeyevents subscribes to the ZADD keyevents of the client's
// database and calls onKey with every key ZADDed to, until a subscription
// breaks (its error), the cluster's primaries change (ErrPrimariesChanged)
// or ctx ends (nil). onUp runs once every subscription is confirmed.
//
// Keyspace notifications are node-local: on a cluster only the node that
// owns a key announces its ZADD, so there is one subscription per
// primary, each on a dedicated connection.
func (c *Client) WatchZaddKeyevents(ctx context.Context, onKey func(key string), onUp func()) error {
	channel, err := c.ZaddKeyeventChannel(ctx)
	if err != nil {
		return err
	}
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	// Every goroutine started here ends before the call returns, so a
	// caller that closes the client afterwards races with none of them.
	var running sync.WaitGroup
	defer running.Wait()
	defer cancel()
	errs := make(chan error, len(nodes)+1)
	var confirmed atomic.Int32
	for _, n := range nodes {
		running.Add(1)
		go func() {
			defer running.Done()
			err := subscribeOn(ctx, n.Client, channel, onKey, func() {
				if int(confirmed.Add(1)) == len(nodes) {
					onUp()
				}
			})
			if err != nil {
				err = c.onNode(n, err)
			}
			errs <- err
		}()
	}
	if c.cluster {
		running.Add(1)
		go func() {
			defer running.Done()
			errs <- c.watchPrimaries(ctx, nodes)
		}()
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-errs:
		if err == nil && ctx.Err() == nil {
			err = errors.New("keyevent subscription ended")
		}
		return err
	}
}

// subscribeOn holds one SUBSCRIBE to channel on node until the connection
// breaks or ctx ends.
func subscribeOn(ctx context.Context, node vk.Client, channel string, onKey func(string), onConfirmed func()) error {
	dc, release := node.Dedicate()
	defer release()
	broken := dc.SetPubSubHooks(vk.PubSubHooks{
		OnMessage: func(m vk.PubSubMessage) { onKey(m.Message) },
		OnSubscription: func(s vk.PubSubSubscription) {
			if s.Kind == "subscribe" {
				onConfirmed()
			}
		},
	})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(channel).Build()).Error(); err != nil {
		return fmt.Errorf("subscribe %s: %w", channel, err)
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-broken:
		return err
	}
}

// watchPrimaries returns ErrPrimariesChanged once the reachable primaries
// differ from nodes, or once some of nodes have the zadd keyevent flags
// and others do not (nil when ctx ends first). A primary restarted on its
// old address keeps the set unchanged but comes back without the flags;
// one that came up between EnableZaddKeyevents and the subscription never
// got them. Where nobody may read or set the flags (CONFIG refused
// everywhere, or set on none) there is nothing to compare.
func (c *Client) watchPrimaries(ctx context.Context, nodes []Node) error {
	t := time.NewTicker(primariesWatchInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		now, err := c.Primaries(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if !sameAddrs(now, nodes) {
			return fmt.Errorf("%w: %s -> %s", ErrPrimariesChanged, addrList(nodes), addrList(now))
		}
		if lacking := lackingZaddFlags(ctx, nodes); lacking != "" {
			return fmt.Errorf("%w: %s lacks the zadd keyevent flags the other primaries have (restarted?)", ErrPrimariesChanged, lacking)
		}
	}
}

// lackingZaddFlags returns the address of a node of nodes without the
// zadd keyevent flags while another node has them ("" when all agree or
// a node cannot be asked).
func lackingZaddFlags(ctx context.Context, nodes []Node) string {
	var with int
	lacking := ""
	for _, n := range nodes {
		kv, err := n.Client.Do(ctx, n.Client.B().ConfigGet().Parameter("notify-keyspace-events").Build()).AsStrMap()
		if err != nil {
			return ""
		}
		if hasZaddKeyevents(kv["notify-keyspace-events"]) {
			with++
		} else if lacking == "" {
			lacking = n.Addr
		}
	}
	if with == 0 {
		return ""
	}
	return lacking
}

// hasZaddKeyevents reports whether notify-keyspace-events flags publish
// ZADDs on the keyevent channel (E, and z or the A alias).
func hasZaddKeyevents(flags string) bool {
	return strings.Contains(flags, "E") && (strings.Contains(flags, "z") || strings.Contains(flags, "A"))
}

func sameAddrs(a, b []Node) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a { // Primaries sorts by address
		if a[i].Addr != b[i].Addr {
			return false
		}
	}
	return true
}

func addrList(ns []Node) string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Addr
	}
	return strings.Join(out, ",")
}
