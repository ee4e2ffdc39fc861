package valkey

import (
	"context"
	"fmt"
	"strconv"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/model"
)

// The worker-registry keys (ff:worker:<ns>:<wiid>:alive|caps,
// ff:idx:<ns>:workers) carry no hash tag, so ff_register_worker and
// ff_heartbeat_worker are cross-slot FCALLs that a cluster refuses
// (CROSSSLOT), upstream too. On a cluster the wrappers do the functions'
// writes as single-key commands instead: same keys, same fields, same
// replies, but not atomic as a whole. The alive key is written first and
// read-and-set in one command (SET ... GET), so "registered" versus
// "refreshed" is still decided atomically; a crash between the writes
// leaves at worst a caps hash that expires with its TTL or an index
// member, both of which the functions' own readers already tolerate.

// registerWorkerSplit is RegisterWorker on a cluster.
func (c *Client) registerWorkerSplit(ctx context.Context, p *RegisterWorkerParams) (string, error) {
	const fn = "ff_register_worker"
	alive := model.WorkerAliveKey(p.Namespace, p.InstanceID)
	caps := model.WorkerCapsKey(p.Namespace, p.InstanceID)
	ttl, now := schedMS(p.TTLMs), schedMS(p.NowMs)
	b := c.c.B()
	_, err := c.c.Do(ctx, b.Set().Key(alive).Value("1").Get().PxMilliseconds(p.TTLMs).Build()).ToString()
	existed := err == nil
	if err != nil && !vk.IsValkeyNil(err) {
		return "", schedWrap(fn, fmt.Errorf("SET %s: %w", alive, err))
	}
	res := c.c.DoMulti(ctx,
		b.Hset().Key(caps).FieldValue().
			FieldValue("worker_id", p.WorkerID).
			FieldValue("lanes_csv", CapabilityCSV(p.Lanes)).
			FieldValue("caps_csv", CapabilityCSV(p.Capabilities)).
			FieldValue("ttl_ms", ttl).
			FieldValue("registered_at_ms", now).
			FieldValue("last_heartbeat_ms", now).Build(),
		b.Pexpire().Key(caps).Milliseconds(p.TTLMs).Build(),
		b.Sadd().Key(model.WorkersIndexKey(p.Namespace)).Member(p.InstanceID).Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return "", schedWrap(fn, err)
		}
	}
	if existed {
		return WorkerRefreshed, nil
	}
	return WorkerRegistered, nil
}

// heartbeatWorkerSplit is HeartbeatWorker on a cluster.
func (c *Client) heartbeatWorkerSplit(ctx context.Context, ns, instanceID string, nowMs int64) (*HeartbeatResult, error) {
	const fn = "ff_heartbeat_worker"
	alive, caps := model.WorkerAliveKey(ns, instanceID), model.WorkerCapsKey(ns, instanceID)
	b := c.c.B()
	raw, err := c.c.Do(ctx, b.Hget().Key(caps).Field("ttl_ms").Build()).ToString()
	if vk.IsValkeyNil(err) {
		return &HeartbeatResult{}, nil
	}
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	ttl, perr := strconv.ParseInt(raw, 10, 64)
	if perr != nil {
		return &HeartbeatResult{}, nil
	}
	n, err := c.c.Do(ctx, b.Pexpire().Key(alive).Milliseconds(ttl).Build()).AsInt64()
	if err != nil {
		return nil, schedWrap(fn, err)
	}
	if n == 0 {
		return &HeartbeatResult{}, nil
	}
	res := c.c.DoMulti(ctx,
		b.Pexpire().Key(caps).Milliseconds(ttl).Build(),
		b.Hset().Key(caps).FieldValue().FieldValue("last_heartbeat_ms", schedMS(nowMs)).Build())
	for _, r := range res {
		if err := r.Error(); err != nil {
			return nil, schedWrap(fn, err)
		}
	}
	return &HeartbeatResult{Registered: true, TTLMs: ttl, NextExpiryMs: nowMs + ttl}, nil
}
