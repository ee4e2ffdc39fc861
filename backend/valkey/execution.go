package valkey

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/fabric-host/fabric/model"
)

// DefaultDedupTTL is the create-idempotency window FlowFabric uses when an
// idempotency key is given (24 h).
const DefaultDedupTTL = 24 * time.Hour

// Reply statuses of the execution family.
const (
	// StatusDuplicate is ff_create_execution's status for an execution that
	// already exists (by id or by idempotency key).
	StatusDuplicate = "DUPLICATE"
)

func msStr(ms int64) string {
	if ms == 0 {
		return ""
	}
	return strconv.FormatInt(ms, 10)
}

func partitionIndex(eid model.ExecutionID) string {
	return strconv.FormatUint(uint64(eid.Partition().Index), 10)
}

// CreateExecutionParams are the inputs of ff_create_execution. The caller
// mints ExecutionID (model.PartitionConfig.NewSoloExecutionID or
// NewFlowExecutionID); nothing here generates ids.
type CreateExecutionParams struct {
	ExecutionID     model.ExecutionID
	Namespace       string
	LaneID          string
	ExecutionKind   string
	Priority        int
	CreatorIdentity string
	// PolicyJSON is the ExecutionPolicy document; "" sends "{}" as
	// FlowFabric does when there is no policy.
	PolicyJSON string
	// Payload is the opaque input payload; empty stores nothing.
	Payload string
	// DelayUntil, in server ms, delays the first claim; 0 means none.
	DelayUntil int64
	// IdempotencyKey makes the create idempotent within its partition for
	// DedupTTL (DefaultDedupTTL when zero).
	IdempotencyKey string
	DedupTTL       time.Duration
	// Tags are written to the tags hash.
	Tags map[string]string
	// ExecutionDeadlineAt, in server ms, indexes an absolute deadline; 0
	// means none.
	ExecutionDeadlineAt int64
}

// Call builds the FCALL of ff_create_execution.
//
//	KEYS[1] exec_core          KEYS[5] lane eligible (or delayed when DelayUntil>0)
//	KEYS[2] payload            KEYS[6] idempotency key (or ff:noop:{fp:N})
//	KEYS[3] policy             KEYS[7] execution_deadline
//	KEYS[4] tags               KEYS[8] all_executions
//	ARGV[1] execution_id  ARGV[2] namespace  ARGV[3] lane_id  ARGV[4] execution_kind
//	ARGV[5] priority  ARGV[6] creator_identity  ARGV[7] policy_json  ARGV[8] payload
//	ARGV[9] delay_until|""  ARGV[10] dedup_ttl_ms|""  ARGV[11] tags_json
//	ARGV[12] execution_deadline_at|""  ARGV[13] partition index
func (p *CreateExecutionParams) Call() Call {
	k := model.KeysFor(p.ExecutionID)
	pk := model.KeysOn(k.Partition())
	sched := pk.LaneEligible(p.LaneID)
	if p.DelayUntil > 0 {
		sched = pk.LaneDelayed(p.LaneID)
	}
	idem, ttl := pk.Noop(), ""
	if p.IdempotencyKey != "" {
		idem = pk.Idempotency(p.Namespace, p.IdempotencyKey)
		d := p.DedupTTL
		if d <= 0 {
			d = DefaultDedupTTL
		}
		ttl = strconv.FormatInt(d.Milliseconds(), 10)
	}
	policy := p.PolicyJSON
	if policy == "" {
		policy = "{}"
	}
	tags := "{}"
	if len(p.Tags) > 0 {
		b, _ := json.Marshal(p.Tags) // map[string]string always marshals
		tags = string(b)
	}
	return Call{
		Function: "ff_create_execution",
		Keys: []string{k.Core(), k.Payload(), k.Policy(), k.Tags(), sched, idem,
			pk.ExecutionDeadline(), pk.AllExecutions()},
		Args: []string{string(p.ExecutionID), p.Namespace, p.LaneID, p.ExecutionKind,
			strconv.Itoa(p.Priority), p.CreatorIdentity, policy, p.Payload,
			msStr(p.DelayUntil), ttl, tags, msStr(p.ExecutionDeadlineAt),
			partitionIndex(p.ExecutionID)},
	}
}

// CreateExecutionResult is the reply of ff_create_execution.
type CreateExecutionResult struct {
	// ExecutionID is the created id, or on a duplicate the id stored under
	// the idempotency key (which may differ from the one sent).
	ExecutionID model.ExecutionID
	// PublicState is "waiting" or "delayed"; empty on a duplicate.
	PublicState string
	// Duplicate reports that nothing was created.
	Duplicate bool
}

// CreateExecution creates an execution (ff_create_execution): exec_core,
// payload, policy, tags and the scheduling indexes. It is idempotent by id
// and, with an IdempotencyKey, by key.
func (c *Client) CreateExecution(ctx context.Context, p *CreateExecutionParams) (*CreateExecutionResult, error) {
	call := p.Call()
	rep, err := c.FCall(ctx, call.Function, call.Keys, call.Args)
	if err != nil {
		return nil, fmt.Errorf("create execution %s: %w", p.ExecutionID, err)
	}
	res := &CreateExecutionResult{ExecutionID: model.ExecutionID(rep.Field(0))}
	if rep.Status == StatusDuplicate {
		res.Duplicate = true
		return res, nil
	}
	res.PublicState = rep.Field(1)
	return res, nil
}

// ExecutionCore returns the exec_core hash of eid as a map (HGETALL); an
// absent execution yields an error matching CodeExecutionNotFound.
func (c *Client) ExecutionCore(ctx context.Context, eid model.ExecutionID) (map[string]string, error) {
	m, err := c.c.Do(ctx, c.c.B().Hgetall().Key(model.KeysFor(eid).Core()).Build()).AsStrMap()
	if err != nil {
		return nil, fmt.Errorf("read exec_core %s: %w", eid, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("read exec_core %s: %w", eid, CodeExecutionNotFound)
	}
	return m, nil
}
