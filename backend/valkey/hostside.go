package valkey

import (
	"context"
	"errors"
	"sync"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend"
)

// This file holds the methods by which *Client implements what the host
// needs of its backend (host.Backend) beyond plugin data: a channel
// subscription for the completion listener and the wake probe's reads.

// SubscribeChannel holds one subscription to channel on a dedicated
// connection named connName (CLIENT SETNAME, so operators can tell it
// from other subscribers) until the connection breaks or ctx ends. It
// calls onSubscribed (when not nil) once the SUBSCRIBE is confirmed and
// onMessage with every message of channel (on the connection's
// goroutine: blocking it blocks the connection). It reports whether the SUBSCRIBE was
// confirmed, and the error that ended it (nil when ctx ended).
func (c *Client) SubscribeChannel(ctx context.Context, channel, connName string, onMessage func(msg string), onSubscribed func()) (bool, error) {
	dc, release := c.c.Dedicate()
	defer release()
	if err := dc.Do(ctx, dc.B().ClientSetname().ConnectionName(connName).Build()).Error(); err != nil {
		dc.Close()
		return false, err
	}
	var once sync.Once
	confirmed := make(chan struct{})
	broken := dc.SetPubSubHooks(vk.PubSubHooks{
		OnMessage: func(m vk.PubSubMessage) {
			if m.Channel == channel {
				onMessage(m.Message)
			}
		},
		OnSubscription: func(s vk.PubSubSubscription) {
			if s.Kind == "subscribe" && s.Channel == channel {
				once.Do(func() { close(confirmed) })
			}
		},
	})
	if err := dc.Do(ctx, dc.B().Subscribe().Channel(channel).Build()).Error(); err != nil {
		dc.Close()
		return false, err
	}
	select {
	case <-confirmed:
	case err := <-broken:
		return false, err
	case <-ctx.Done():
		dc.Close()
		return false, nil
	}
	if onSubscribed != nil {
		onSubscribed()
	}
	select {
	case err := <-broken:
		if err == nil {
			err = errors.New("subscription ended")
		}
		return true, err
	case <-ctx.Done():
		dc.Close()
		return true, nil
	}
}

// LowestScores reads, in one pipelined round trip, the lowest-scored
// member of every sorted set in keys (ZRANGE key 0 0 WITHSCORES);
// out[i] is keys[i]'s.
func (c *Client) LowestScores(ctx context.Context, keys []string) []backend.LowestScore {
	if len(keys) == 0 {
		return nil
	}
	cmds := make(vk.Commands, len(keys))
	for i, k := range keys {
		cmds[i] = c.c.B().Zrange().Key(k).Min("0").Max("0").Withscores().Build()
	}
	out := make([]backend.LowestScore, len(keys))
	for i, r := range c.c.DoMulti(ctx, cmds...) {
		zs, err := r.AsZScores()
		switch {
		case err != nil:
			out[i].Err = err
		case len(zs) == 0:
			out[i].Empty = true
		default:
			out[i].Score = zs[0].Score
		}
	}
	return out
}
