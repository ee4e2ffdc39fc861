package sdk

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// LaneSpreadTTL is how long a Client or Worker trusts the solo-partitioner
// choice it read from a lane's configuration hash (model.LaneConfigKey)
// before reading it again.
//
// The choice only decides where new executions go: an execution id
// carries its partition, so every later call finds the execution wherever
// it was placed. After SetLaneSpread changes a lane, other producers move
// to the new choice within LaneSpreadTTL; until then their executions land
// on the old choice's partitions, which workers still read (a spread
// worker always reads the lane's home partition, and the partition windows
// and eligible-work notifications cover the rest). The one thing that is
// not safe across a change is an idempotency key reused within the TTL:
// the two producers may look for its record on different partitions.
const LaneSpreadTTL = backend.LaneSpreadTTL

// laneSpreadCache holds lanes' solo-partitioner choices, each read once
// per LaneSpreadTTL.
type laneSpreadCache struct {
	mu sync.Mutex
	m  map[string]laneSpreadEntry
}

type laneSpreadEntry struct {
	s  model.LaneSpread
	at time.Time
}

func (c *laneSpreadCache) get(lane string, now time.Time) (model.LaneSpread, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[lane]
	if !ok || now.Sub(e.at) >= LaneSpreadTTL || now.Before(e.at) {
		return model.LaneSpread{}, false
	}
	return e.s, true
}

func (c *laneSpreadCache) put(lane string, s model.LaneSpread, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]laneSpreadEntry{}
	}
	c.m[lane] = laneSpreadEntry{s: s, at: now}
}

// LaneSpread returns lane's solo-partitioner choice (the zero LaneSpread,
// FlowFabric's crc16 partition, unless SetLaneSpread chose otherwise),
// read from the lane's configuration hash at most once per LaneSpreadTTL.
// On Postgres it is always the default (backend.LaneSpreadDriver).
func (c *Client) LaneSpread(ctx context.Context, lane string) (model.LaneSpread, error) {
	now := c.clock()
	if s, ok := c.spreads.get(lane, now); ok {
		return s, nil
	}
	s, err := readLaneSpread(ctx, c, lane)
	if err != nil {
		return model.LaneSpread{}, err
	}
	c.spreads.put(lane, s, now)
	return s, nil
}

func readLaneSpread(ctx context.Context, c *Client, lane string) (model.LaneSpread, error) {
	s, err := c.drv.LaneSpread(ctx, lane)
	if err != nil {
		return model.LaneSpread{}, fmt.Errorf("sdk: %w", err)
	}
	return s, nil
}

// SetLaneSpread stores lane's solo-partitioner choice in its configuration
// hash: s.Spread places the lane's new executions outside flows over
// s.K partitions (0: every flow partition) instead of FlowFabric's one, so
// that on a Valkey Cluster the lane's traffic spreads over the nodes.
// Every producer reads the choice (see LaneSpreadTTL); workers read it
// when they connect and every LaneSpreadTTL after. Valkey only.
func (c *Client) SetLaneSpread(ctx context.Context, lane string, s model.LaneSpread) error {
	if err := ValidateLane(lane); err != nil {
		return err
	}
	err := c.drv.SetLaneSpread(ctx, lane, s)
	if errors.Is(err, backend.ErrUnsupported) {
		return invalid("backend", "lane spreading needs Valkey")
	}
	if err != nil {
		return fmt.Errorf("sdk: %w", err)
	}
	c.spreads.put(lane, s, c.clock())
	return nil
}

// mintSoloID mints the id of a new execution of spec's lane outside any
// flow, on the partition the lane's solo partitioner picks.
func (c *Client) mintSoloID(ctx context.Context, spec *ExecutionSpec) (model.ExecutionID, error) {
	s, err := c.LaneSpread(ctx, spec.Lane)
	if err != nil {
		return "", err
	}
	if !s.Spread {
		return c.parts.NewSoloExecutionID(spec.Lane), nil
	}
	return c.parts.NewSoloExecutionIDWith(spec.Lane, spec.IdempotencyKey, s.Partitioner()), nil
}
