package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/internal/periodic"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/model/pgsql"
)

var _ backend.PeriodicDriver = (*Driver)(nil)

// AddPeriodic implements backend.PeriodicDriver: one upsert of the
// fabric_periodic row (keyed by name, so a re-added name moves to its new
// lane's partition).
func (d *Driver) AddPeriodic(ctx context.Context, s *backend.PeriodicSchedule) error {
	var policy, every any
	if s.PolicyJSON != "" {
		policy = s.PolicyJSON
	}
	if s.EveryMs > 0 {
		every = s.EveryMs
	}
	var next any
	if s.NextDueMs > 0 {
		next = s.NextDueMs
	}
	tags := s.Tags
	if tags == nil {
		tags = map[string]string{}
	}
	caps := requiredCapabilities(s.PolicyJSON)
	if caps == nil {
		caps = []string{}
	}
	part := int16(d.c.Partitions().SoloPartition(s.LaneID).Index)
	_, err := d.c.pool.Exec(ctx, `INSERT INTO fabric_periodic (name, partition_key, lane_id, kind, namespace, payload, priority,
    policy, required_capabilities, tags, every_ms, cron, anchor_ms, next_due_ms, created_at_ms, creator)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11, $12, $13, $14, $15, $16)
ON CONFLICT (name) DO UPDATE SET partition_key = EXCLUDED.partition_key, lane_id = EXCLUDED.lane_id,
    kind = EXCLUDED.kind, namespace = EXCLUDED.namespace, payload = EXCLUDED.payload, priority = EXCLUDED.priority,
    policy = EXCLUDED.policy, required_capabilities = EXCLUDED.required_capabilities, tags = EXCLUDED.tags,
    every_ms = EXCLUDED.every_ms, cron = EXCLUDED.cron, anchor_ms = EXCLUDED.anchor_ms,
    next_due_ms = EXCLUDED.next_due_ms, last_tick_ms = NULL, last_execution_id = NULL,
    created_at_ms = EXCLUDED.created_at_ms, creator = EXCLUDED.creator`,
		s.Name, part, s.LaneID, s.ExecutionKind, s.Namespace, s.Payload, s.Priority, policy, caps, tags,
		every, s.Cron, s.AnchorMs, next, s.CreatedAtMs, s.Creator)
	if err != nil {
		return mapErr(fmt.Errorf("add periodic %s: %w", s.Name, notMigrated(err)), false)
	}
	return nil
}

// RemovePeriodic implements backend.PeriodicDriver.
func (d *Driver) RemovePeriodic(ctx context.Context, name string) error {
	tag, err := d.c.pool.Exec(ctx, `DELETE FROM fabric_periodic WHERE name = $1`, name)
	if err != nil {
		return mapErr(fmt.Errorf("remove periodic %s: %w", name, notMigrated(err)), false)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("remove periodic %s: %w", name, backend.ErrPeriodicNotFound)
	}
	return nil
}

// ListPeriodic implements backend.PeriodicDriver.
func (d *Driver) ListPeriodic(ctx context.Context) ([]backend.PeriodicSchedule, error) {
	rows, err := d.c.pool.Query(ctx, `SELECT name, lane_id, kind, namespace, payload, priority, COALESCE(policy::text, ''),
    tags, COALESCE(every_ms, 0), cron, anchor_ms, COALESCE(next_due_ms, 0), COALESCE(last_tick_ms, 0),
    COALESCE(last_execution_id, ''), created_at_ms, creator, partition_key
  FROM fabric_periodic ORDER BY name`)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list periodic: %w", notMigrated(err)), false)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (backend.PeriodicSchedule, error) {
		var s backend.PeriodicSchedule
		var last string
		var pk int16
		err := r.Scan(&s.Name, &s.LaneID, &s.ExecutionKind, &s.Namespace, &s.Payload, &s.Priority, &s.PolicyJSON,
			&s.Tags, &s.EveryMs, &s.Cron, &s.AnchorMs, &s.NextDueMs, &s.LastTickMs, &last, &s.CreatedAtMs, &s.Creator, &pk)
		if u, perr := model.ParseUUID(last); err == nil && perr == nil {
			// periodic.fire records the bare uuid, on the schedule's partition.
			s.LastExecutionID = model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(pk)}, u)
		}
		return s, err
	})
	if err != nil {
		return nil, fmt.Errorf("list periodic: %w", err)
	}
	return out, nil
}

// FirePeriodic implements backend.PeriodicDriver with the statements the
// pg_periodic plugin runs (model/pgsql's periodic.due_scan and
// periodic.fire): each due schedule's ticks (periodic.Timing.Steps) fire
// in one transaction, each a compare-and-set that another firer's commit
// makes a no-op.
func (d *Driver) FirePeriodic(ctx context.Context, p *backend.FirePeriodicParams) (*backend.FirePeriodicResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	part := model.Partition{Family: model.FamilyFlow, Index: p.Partition}
	rows, err := d.c.pool.Query(ctx, pgsql.PeriodicDueScan.SQL, int16(p.Partition), p.NowMs, limit)
	if err != nil {
		return nil, mapErr(fmt.Errorf("fire periodic: %w", notMigrated(err)), false)
	}
	type due struct {
		name   string
		tick   int64
		every  *int64
		cron   string
		anchor int64
	}
	dues, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (due, error) {
		var x due
		return x, r.Scan(&x.name, &x.tick, &x.every, &x.cron, &x.anchor)
	})
	if err != nil {
		return nil, fmt.Errorf("fire periodic: %w", err)
	}
	res := &backend.FirePeriodicResult{}
	var errs []error
	for _, x := range dues {
		var every time.Duration
		if x.every != nil {
			every = time.Duration(*x.every) * time.Millisecond
		}
		timing, err := periodic.ParseTiming(every, x.anchor, x.cron)
		if err != nil {
			errs = append(errs, fmt.Errorf("fire periodic %s: %w", x.name, err))
			continue
		}
		var fired []model.ExecutionID
		err = d.c.inTx(ctx, func(tx pgx.Tx) error {
			fired = fired[:0]
			for _, s := range timing.Steps(x.tick, p.NowMs) {
				eid := periodic.TickID(part, x.name, s.Tick)
				var n int64
				if err := tx.QueryRow(ctx, pgsql.PeriodicFire.SQL, int16(p.Partition), x.name, s.Tick, s.Next,
					eid.UUIDString(), p.NowMs).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					break // another firer moved it (or it was removed)
				}
				fired = append(fired, eid)
			}
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("fire periodic %s: %w", x.name, err))
			continue
		}
		res.Fired = append(res.Fired, fired...)
	}
	var next *int64
	if err := d.c.pool.QueryRow(ctx, pgsql.PeriodicNextDue.SQL, int16(p.Partition)).Scan(&next); err != nil {
		errs = append(errs, fmt.Errorf("fire periodic: next due: %w", err))
	} else if next != nil {
		res.NextDueMs = *next
	}
	return res, errors.Join(errs...)
}
