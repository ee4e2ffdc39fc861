package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Worker registry (upstream worker_registry.rs, RFC-025): one
// ff_worker_registry row per live worker instance, keyed by (namespace,
// instance id) on partition_key = FNV1a64(instance id) % 256, and an
// append-only ff_worker_registry_event log.

// RegisterWorker outcomes.
const (
	// WorkerRegistered: no live registration existed (a new row, or one
	// whose TTL had lapsed).
	WorkerRegistered = backend.WorkerRegistered
	// WorkerRefreshed: a live registration of the same worker id was
	// overwritten.
	WorkerRefreshed = backend.WorkerRefreshed
	// WorkerAlive: a live registration exists and RefuseLive kept it.
	WorkerAlive = backend.WorkerAlive
)

// CodeInstanceReassigned: the instance id is registered under another
// worker id (upstream's "instance_id reassigned").
const CodeInstanceReassigned ErrorCode = "instance_id_reassigned"

// MarkWorkerDeadReasonMax is the longest reason MarkWorkerDead accepts, in
// bytes (upstream MARK_WORKER_DEAD_REASON_MAX_BYTES).
const MarkWorkerDeadReasonMax = 256

// WorkerPartitionKey is the registry partition_key of an instance id.
func WorkerPartitionKey(instanceID string) int16 {
	return int16(model.FNV1a64(instanceID) % 256)
}

// RegisterWorkerParams are the inputs of RegisterWorker.
type RegisterWorkerParams = backend.RegisterWorkerParams

// RegisterWorker registers or refreshes a worker instance in one
// transaction: the row is locked, an instance registered under another
// worker id is refused (CodeInstanceReassigned), then upserted, and a
// 'registered' event appended.
//
//	ff_worker_registry: upsert (worker_id, lanes, capabilities_csv,
//	  last_heartbeat_ms = now, liveness_ttl_ms; registered_at_ms on insert)
//	ff_worker_registry_event: registered
func (c *Client) RegisterWorker(ctx context.Context, p *RegisterWorkerParams) (string, error) {
	if p.Namespace == "" || p.InstanceID == "" || p.WorkerID == "" || p.TTLMs <= 0 {
		return "", fmt.Errorf("register worker: %w: namespace, instance id, worker id and a positive TTL are required", CodeInvalidInput)
	}
	pk := WorkerPartitionKey(p.InstanceID)
	lanes := append([]string{}, slices.Sorted(slices.Values(p.Lanes))...) // never NULL
	caps := slices.Sorted(slices.Values(p.Capabilities))
	var status string
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		var worker string
		var expiry int64
		err := tx.QueryRow(ctx, `SELECT worker_id, last_heartbeat_ms + liveness_ttl_ms FROM ff_worker_registry
 WHERE partition_key = $1 AND namespace = $2 AND worker_instance_id = $3 FOR UPDATE`,
			pk, p.Namespace, p.InstanceID).Scan(&worker, &expiry)
		live := err == nil && expiry > p.NowMs
		switch {
		case err != nil && !errors.Is(err, pgx.ErrNoRows):
			return err
		case err == nil && worker != p.WorkerID:
			return fmt.Errorf("%w: %s is registered by worker %q", CodeInstanceReassigned, p.InstanceID, worker)
		case live && p.RefuseLive:
			status = WorkerAlive
			return nil
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_worker_registry (partition_key, namespace, worker_instance_id, worker_id,
    lanes, capabilities_csv, last_heartbeat_ms, liveness_ttl_ms, registered_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7)
ON CONFLICT (partition_key, namespace, worker_instance_id) DO UPDATE SET
    worker_id = EXCLUDED.worker_id, lanes = EXCLUDED.lanes, capabilities_csv = EXCLUDED.capabilities_csv,
    last_heartbeat_ms = EXCLUDED.last_heartbeat_ms, liveness_ttl_ms = EXCLUDED.liveness_ttl_ms`,
			pk, p.Namespace, p.InstanceID, p.WorkerID, lanes, strings.Join(caps, ","), p.NowMs, p.TTLMs); err != nil {
			return err
		}
		status = WorkerRegistered
		if live {
			status = WorkerRefreshed
		}
		return workerEvent(ctx, tx, pk, p.Namespace, p.InstanceID, "registered", p.NowMs, nil)
	})
	if err != nil {
		return "", fmt.Errorf("register worker %s: %w", p.InstanceID, err)
	}
	return status, nil
}

func workerEvent(ctx context.Context, tx pgx.Tx, pk int16, ns, instance, kind string, now int64, reason *string) error {
	_, err := tx.Exec(ctx, `INSERT INTO ff_worker_registry_event (partition_key, namespace, worker_instance_id, event_kind, event_at_ms, reason)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`, pk, ns, instance, kind, now, reason)
	if err != nil {
		return fmt.Errorf("worker event %s: %w", kind, err)
	}
	return nil
}

// HeartbeatResult is the outcome of HeartbeatWorker.
type HeartbeatResult = backend.HeartbeatResult

// HeartbeatWorker refreshes a live registration (last_heartbeat_ms = now)
// and appends a 'heartbeat' event; a lapsed registration is not revived.
func (c *Client) HeartbeatWorker(ctx context.Context, ns, instanceID string, nowMs int64) (*HeartbeatResult, error) {
	pk := WorkerPartitionKey(instanceID)
	res := &HeartbeatResult{}
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		var ttl int64
		err := tx.QueryRow(ctx, `UPDATE ff_worker_registry SET last_heartbeat_ms = $4
 WHERE partition_key = $1 AND namespace = $2 AND worker_instance_id = $3 AND last_heartbeat_ms + liveness_ttl_ms > $4
RETURNING liveness_ttl_ms`, pk, ns, instanceID, nowMs).Scan(&ttl)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		res.Registered, res.NextExpiryMs = true, nowMs+ttl
		return workerEvent(ctx, tx, pk, ns, instanceID, "heartbeat", nowMs, nil)
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat worker %s: %w", instanceID, err)
	}
	return res, nil
}

// MarkWorkerDead deletes a registration and appends a 'marked_dead' event
// with reason (at most MarkWorkerDeadReasonMax bytes, no control
// characters); it reports whether a registration existed.
func (c *Client) MarkWorkerDead(ctx context.Context, ns, instanceID, reason string, nowMs int64) (bool, error) {
	if len(reason) > MarkWorkerDeadReasonMax {
		return false, fmt.Errorf("mark worker dead %s: %w: reason exceeds %d bytes (got %d)", instanceID, CodeInvalidInput, MarkWorkerDeadReasonMax, len(reason))
	}
	if strings.ContainsFunc(reason, unicode.IsControl) {
		return false, fmt.Errorf("mark worker dead %s: %w: reason must not contain control characters", instanceID, CodeInvalidInput)
	}
	pk := WorkerPartitionKey(instanceID)
	found := false
	err := c.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM ff_worker_registry WHERE partition_key = $1 AND namespace = $2 AND worker_instance_id = $3`,
			pk, ns, instanceID)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		found = true
		return workerEvent(ctx, tx, pk, ns, instanceID, "marked_dead", nowMs, &reason)
	})
	if err != nil {
		return false, fmt.Errorf("mark worker dead %s: %w", instanceID, err)
	}
	return found, nil
}

// WorkerInfo is one registration as ListWorkers returns it.
type WorkerInfo struct {
	Namespace, InstanceID, WorkerID string
	Lanes, Capabilities             []string
	LastHeartbeatMs, TTLMs          int64
	RegisteredAtMs                  int64
}

// ListWorkers returns up to limit (0: 1000) registrations of namespace
// ordered by instance id, after the instance id after ("" from the
// start). Lapsed registrations not swept yet are included; compare
// LastHeartbeatMs + TTLMs with the clock.
func (c *Client) ListWorkers(ctx context.Context, ns, after string, limit int) ([]WorkerInfo, error) {
	if ns == "" {
		return nil, fmt.Errorf("list workers: %w: a namespace is required", CodeInvalidInput)
	}
	if limit <= 0 {
		limit = 1000
	}
	rows, err := c.pool.Query(ctx, `SELECT namespace, worker_instance_id, worker_id, lanes, capabilities_csv,
       last_heartbeat_ms, liveness_ttl_ms, registered_at_ms
  FROM ff_worker_registry WHERE namespace = $1 AND worker_instance_id > $2
 ORDER BY worker_instance_id LIMIT $3`, ns, after, limit)
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", notMigrated(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (WorkerInfo, error) {
		var w WorkerInfo
		var caps string
		err := r.Scan(&w.Namespace, &w.InstanceID, &w.WorkerID, &w.Lanes, &caps, &w.LastHeartbeatMs, &w.TTLMs, &w.RegisteredAtMs)
		if caps != "" {
			w.Capabilities = strings.Split(caps, ",")
		}
		return w, err
	})
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
