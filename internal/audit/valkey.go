package audit

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
	vk "github.com/valkey-io/valkey-go"
)

// betweenReads, when set (by tests), runs between the read of a page's
// cores and the read of their index scores.
var betweenReads func()

// coreFields are the exec_core fields a Valkey check reads, in order.
var coreFields = []string{"lifecycle_phase", "ownership_state", "eligibility_state", "lane_id",
	"blocking_reason", "blocking_detail", "current_worker_id", "lease_expires_at", "lease_expired_at",
	"lease_revoked_at", "current_waitpoint_id", "flow_id"}

const (
	fPhase = iota
	fOwn
	fElig
	fLane
	fReason
	fDetail
	fWorker
	fLeaseExp
	fExpiredAt
	fRevokedAt
	fWaitpoint
	fFlow
)

// Valkey checks every execution of c's deployment (each flow partition's
// all_executions set, read in pages of 500: one pipelined HMGET of the
// cores and one of ZSCOREs in the expected lane indexes per page), then
// looks for executions in no index at all: a core that all_executions does
// not list (strays).
func Valkey(ctx context.Context, c *valkey.Client, o Options) (*Report, error) {
	o = o.withDefaults()
	nowMs, err := c.ServerTime(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit: server time: %w", err)
	}
	rep := &Report{At: time.UnixMilli(nowMs)}
	raw := c.Raw()
	for i := range int(c.Partitions().Flow) {
		p := model.Partition{Family: model.FamilyFlow, Index: uint16(i)}
		pk := model.KeysOn(p)
		var cursor uint64
		for {
			page, err := raw.Do(ctx, raw.B().Sscan().Key(pk.AllExecutions()).Cursor(cursor).Count(500).Build()).AsScanEntry()
			if err != nil {
				return nil, fmt.Errorf("audit: SSCAN %s: %w", pk.AllExecutions(), err)
			}
			if err := checkPage(ctx, raw, o, rep, p, pk, page.Elements, nowMs); err != nil {
				return nil, err
			}
			if cursor = page.Cursor; cursor == 0 {
				break
			}
		}
	}
	if err := strays(ctx, c, o, rep); err != nil {
		return nil, err
	}
	return rep, nil
}

// coreKeyPattern matches every exec_core key (ff:exec:<tag>:<id>:core).
const coreKeyPattern = "ff:exec:*:core"

// strays reports the executions whose core exists but that all_executions
// does not list — a create that failed part way, or a member removed by
// hand: no scanner, worker or listing finds them. It scans each primary's
// keyspace for cores in pages of 1,000 and asks SISMEMBER of each, in one
// pipeline a page; a non-member is read again with its core in one script
// (a retention trim may remove both meanwhile).
func strays(ctx context.Context, c *valkey.Client, o Options, rep *Report) error {
	nodes, err := c.Primaries(ctx)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	raw := c.Raw()
	for _, n := range nodes {
		var cursor uint64
		for {
			page, err := n.Client.Do(ctx, n.Client.B().Scan().Cursor(cursor).Match(coreKeyPattern).Count(1000).Build()).AsScanEntry()
			if err != nil {
				return fmt.Errorf("audit: SCAN %s on %s: %w", coreKeyPattern, n.Addr, err)
			}
			if err := strayPage(ctx, raw, o, rep, page.Elements); err != nil {
				return err
			}
			if cursor = page.Cursor; cursor == 0 {
				break
			}
		}
	}
	return nil
}

// strayScript answers the core fields (ARGV[2:]) of the execution ARGV[1]
// whose core is KEYS[1], or nil when all_executions (KEYS[2]) lists it or
// the core is gone.
var strayScript = vk.NewLuaScript(`if redis.call('SISMEMBER', KEYS[2], ARGV[1]) == 1 or redis.call('EXISTS', KEYS[1]) == 0 then
  return false
end
return redis.call('HMGET', KEYS[1], unpack(ARGV, 2))`)

// strayPage books the strays among the core keys of one SCAN page.
func strayPage(ctx context.Context, raw vk.Client, o Options, rep *Report, keys []string) error {
	var ids []model.ExecutionID
	var cmds vk.Commands
	for _, k := range keys {
		id, ok := coreKeyID(k)
		if !ok || (o.Only != nil && !o.Only[string(id)]) {
			continue
		}
		ids = append(ids, id)
		cmds = append(cmds, raw.B().Sismember().Key(model.KeysOn(id.Partition()).AllExecutions()).Member(string(id)).Build())
	}
	for i, r := range raw.DoMulti(ctx, cmds...) {
		listed, err := r.AsBool()
		if err != nil {
			return fmt.Errorf("audit: SISMEMBER %s: %w", ids[i], err)
		}
		if listed {
			continue
		}
		id := ids[i]
		vals, err := strayScript.Exec(ctx, raw, []string{model.KeysFor(id).Core(), model.KeysOn(id.Partition()).AllExecutions()},
			append([]string{string(id)}, coreFields...)).ToArray()
		if vk.IsValkeyNil(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("audit: re-read %s: %w", id, err)
		}
		f := make([]string, len(coreFields))
		for j := range f {
			if j < len(vals) {
				f[j], _ = vals[j].ToString()
			}
		}
		r := recordOf(string(id), f)
		rep.Checked++
		rep.violate(o, Execution{ID: r.id, Lane: r.lane, Phase: r.phase, Ownership: r.own, Eligibility: r.elig,
			Problem: "in no index: its core exists but all_executions does not list it (a create that failed part way?)"})
	}
	return nil
}

// coreKeyID is the execution id of an exec_core key, false for a key of
// another shape.
func coreKeyID(key string) (model.ExecutionID, bool) {
	rest, ok := strings.CutPrefix(key, "ff:exec:")
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, ":core")
	_, id, cut := strings.Cut(rest, "}:")
	if !ok || !cut {
		return "", false
	}
	eid, err := model.ParseExecutionID(id)
	if err != nil || model.KeysFor(eid).Core() != key {
		return "", false
	}
	return eid, true
}

func checkPage(ctx context.Context, raw vk.Client, o Options, rep *Report, p model.Partition, pk model.PartitionKeys, members []string, nowMs int64) error {
	if o.Only != nil {
		members = slices.DeleteFunc(slices.Clone(members), func(m string) bool { return !o.Only[m] })
	}
	if len(members) == 0 {
		return nil
	}
	cmds := make(vk.Commands, len(members))
	for i, m := range members {
		cmds[i] = raw.B().Hmget().Key(model.KeysForOn(p, model.ExecutionID(m)).Core()).Field(coreFields...).Build()
	}
	cores := make([][]string, len(members))
	for i, r := range raw.DoMulti(ctx, cmds...) {
		vals, err := r.ToArray()
		if err != nil {
			return fmt.Errorf("audit: read core of %s: %w", members[i], err)
		}
		f := make([]string, len(coreFields))
		for j := range f {
			if j < len(vals) {
				f[j], _ = vals[j].ToString()
			}
		}
		cores[i] = f
	}
	if betweenReads != nil {
		betweenReads()
	}
	// The expected index of each, with its score (the due time of a
	// delayed or suspended execution).
	var zcmds vk.Commands
	var which []int
	for i, m := range members {
		f := cores[i]
		if idx := model.ExpectedLaneIndex(pk, f[fPhase], f[fElig], f[fOwn], laneOf(f)); idx != "" {
			zcmds = append(zcmds, raw.B().Zscore().Key(idx).Member(m).Build())
			which = append(which, i)
		}
	}
	scores := make([]*float64, len(members))
	for j, r := range raw.DoMulti(ctx, zcmds...) {
		s, err := r.AsFloat64()
		if vk.IsValkeyNil(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("audit: ZSCORE: %w", err)
		}
		scores[which[j]] = &s
	}
	for i, m := range members {
		f := cores[i]
		r := recordOf(m, f)
		if idx := model.ExpectedLaneIndex(pk, r.phase, r.elig, r.own, r.lane); idx != "" && scores[i] == nil {
			// The cores and the scores were read in two round trips: a
			// scanner or worker may have moved the execution between them
			// (a promotion takes it out of the delayed index). Read both
			// again in one script, and judge that reading.
			again, score, err := recheck(ctx, raw, model.KeysForOn(p, model.ExecutionID(m)).Core(), m, pk, idx)
			if err != nil {
				return err
			}
			f = again
			r = recordOf(m, f)
			scores[i] = score
		}
		if idx := model.ExpectedLaneIndex(pk, r.phase, r.elig, r.own, r.lane); idx != "" && scores[i] == nil {
			r.missingFrom = idx
		} else if scores[i] != nil {
			r.dueAt = int64(*scores[i]) // the delay's end or the suspension's timeout, where they apply
		}
		rep.Checked++
		classify(o, rep, r, nowMs, valkeyScanners)
	}
	return nil
}

func atoi(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

func laneOf(f []string) string {
	if f[fLane] == "" {
		return "default"
	}
	return f[fLane]
}

// recheckScript reads an execution's core fields (ARGV[2:]) and its score
// in one index (KEYS[2], member ARGV[1]) at one moment. The index the
// caller names is the one the state it read before called for; when the
// state read here calls for another, recheck reads again.
var recheckScript = vk.NewLuaScript(`local f = redis.call('HMGET', KEYS[1], unpack(ARGV, 2))
return {f, redis.call('ZSCORE', KEYS[2], ARGV[1])}`)

// recheck returns an execution's core fields and its score in the index
// its state calls for (nil: not there, or its state calls for none), read
// together, starting with idx. The state may have moved on since the read
// that named idx: it reads until the index it asked for is the one the
// state it got calls for (at most 5 times, else the last reading).
func recheck(ctx context.Context, raw vk.Client, core, member string, pk model.PartitionKeys, idx string) ([]string, *float64, error) {
	var f []string
	var score *float64
	for range 5 {
		vals, err := recheckScript.Exec(ctx, raw, []string{core, idx}, append([]string{member}, coreFields...)).ToArray()
		if err != nil || len(vals) != 2 {
			return nil, nil, fmt.Errorf("audit: re-read %s: %w", member, err)
		}
		fv, err := vals[0].ToArray()
		if err != nil {
			return nil, nil, fmt.Errorf("audit: re-read %s: %w", member, err)
		}
		f = make([]string, len(coreFields))
		for j := range f {
			if j < len(fv) {
				f[j], _ = fv[j].ToString()
			}
		}
		want := model.ExpectedLaneIndex(pk, f[fPhase], f[fElig], f[fOwn], laneOf(f))
		score = nil
		if s, err := vals[1].AsFloat64(); err == nil {
			score = &s
		}
		switch want {
		case idx:
			return f, score, nil
		case "":
			return f, nil, nil
		}
		idx = want
	}
	return f, score, nil
}

// recordOf is the record of execution m from its core fields f
// (coreFields' order).
func recordOf(m string, f []string) record {
	r := record{id: m, lane: laneOf(f), phase: f[fPhase], own: f[fOwn], elig: f[fElig], reason: f[fReason],
		detail: f[fDetail], worker: f[fWorker], leaseExp: atoi(f[fLeaseExp]), inFlow: f[fFlow] != "",
		waitpoint: f[fWaitpoint], checkID: true}
	r.lostAt = atoi(f[fExpiredAt])
	if r.own == model.OwnershipLeaseRevoked {
		r.lostAt = atoi(f[fRevokedAt])
	}
	return r
}
