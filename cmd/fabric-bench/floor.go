package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	vk "github.com/valkey-io/valkey-go"

	"github.com/fabric-host/fabric/backend/valkey"
	"github.com/fabric-host/fabric/model"
	"github.com/fabric-host/fabric/sdk"
)

// The contract's floor: the writes one execution's create → claim →
// complete must leave (captured with MONITOR from the commands the
// functions run), replayed for fresh executions as plain pipelined
// commands and as one EVALSHA of literal redis.call lines, against the
// functions themselves run the same way. Server main-thread CPU per
// execution (INFO cpu) for each says how far fabric's functions are from
// the cheapest exact keyspace, and how far that is from asynq.

// floorCmd is one captured write: its arguments, where ids are
// placeholders (see floorIDs).
type floorCmd []string

// floorIDs are the per-execution strings a captured command carries.
type floorIDs struct{ eid, lease, attempt string }

const (
	phEID     = "\x00EID\x00"
	phLease   = "\x00LEASE\x00"
	phAttempt = "\x00ATTEMPT\x00"
)

func (ids floorIDs) fill(s string) string {
	if !strings.Contains(s, "\x00") {
		return s
	}
	return strings.NewReplacer(phEID, ids.eid, phLease, ids.lease, phAttempt, ids.attempt).Replace(s)
}

// floorReads are the commands the functions run that leave nothing: the
// floor replays everything else.
var floorReads = map[string]bool{
	"TIME": true, "HMGET": true, "HGET": true, "HGETALL": true, "EXISTS": true, "ZSCORE": true, "GET": true,
	"ZRANGE": true, "ZRANGEBYSCORE": true, "ZCARD": true, "SCARD": true, "SISMEMBER": true, "HEXISTS": true,
	"TYPE": true, "PTTL": true, "TTL": true, "XLEN": true, "SMEMBERS": true, "ZRANK": true, "HLEN": true,
	"MGET": true, "STRLEN": true, "ZCOUNT": true, "XRANGE": true, "XREVRANGE": true, "HKEYS": true,
	"HVALS": true, "LRANGE": true, "LLEN": true, "ECHO": true, "PING": true, "PEXPIRETIME": true,
}

// monitorConn is a raw RESP connection in MONITOR mode.
type monitorConn struct {
	c net.Conn
	r *bufio.Reader
}

func openMonitor(socket string) (*monitorConn, error) {
	c, err := net.Dial("unix", socket)
	if err != nil {
		return nil, fmt.Errorf("monitor: %w", err)
	}
	m := &monitorConn{c: c, r: bufio.NewReader(c)}
	if _, err := c.Write([]byte("*1\r\n$7\r\nMONITOR\r\n")); err != nil {
		c.Close()
		return nil, fmt.Errorf("monitor: %w", err)
	}
	if line, err := m.r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		c.Close()
		return nil, fmt.Errorf("monitor: %q %v", line, err)
	}
	return m, nil
}

// next returns the next monitored command: whether a script ran it, and
// its arguments.
func (m *monitorConn) next() (bool, []string, error) {
	_ = m.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := m.r.ReadString('\n')
	if err != nil {
		return false, nil, fmt.Errorf("monitor: %w", err)
	}
	line = strings.TrimRight(line, "\r\n")
	if !strings.HasPrefix(line, "+") {
		return false, nil, fmt.Errorf("monitor: unexpected %q", line)
	}
	_, rest, ok := strings.Cut(line, "] ")
	if !ok {
		return false, nil, fmt.Errorf("monitor: unexpected %q", line)
	}
	return strings.Contains(line[:len(line)-len(rest)], "lua]"), parseMonitorArgs(rest), nil
}

// parseMonitorArgs splits MONITOR's quoted arguments ("a" "b\x00c").
func parseMonitorArgs(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		if s[i] != '"' {
			i++
			continue
		}
		var b strings.Builder
		i++
		for i < len(s) && s[i] != '"' {
			if s[i] == '\\' && i+1 < len(s) {
				i++
				switch s[i] {
				case 'n':
					b.WriteByte('\n')
				case 'r':
					b.WriteByte('\r')
				case 't':
					b.WriteByte('\t')
				case 'a':
					b.WriteByte('\a')
				case 'b':
					b.WriteByte('\b')
				case 'x':
					if i+2 < len(s) {
						v, _ := strconv.ParseUint(s[i+1:i+3], 16, 8)
						b.WriteByte(byte(v))
						i += 2
					}
				default:
					b.WriteByte(s[i])
				}
				i++
				continue
			}
			b.WriteByte(s[i])
			i++
		}
		out = append(out, b.String())
		i++
	}
	return out
}

// floorExec runs one execution the way the SDK does (create, one
// fabric_claim_execution, ff_complete_execution built from the lease).
func floorExec(ctx context.Context, vc *valkey.Client, id model.ExecutionID, payload string) (floorIDs, error) {
	cp := &valkey.CreateExecutionParams{ExecutionID: id, Namespace: sdk.DefaultNamespace, LaneID: benchLane,
		ExecutionKind: "default", CreatorIdentity: "bench", Payload: payload}
	if _, err := vc.CreateExecution(ctx, cp); err != nil {
		return floorIDs{}, err
	}
	return floorClaimComplete(ctx, vc, id)
}

func floorClaim(ctx context.Context, vc *valkey.Client, id model.ExecutionID) (*valkey.FabricClaimResult, error) {
	return vc.ClaimWithGrant(ctx, &valkey.FabricClaimParams{Claim: valkey.ClaimExecutionParams{ExecutionID: id,
		WorkerID: "bench", WorkerInstanceID: "bench-floor", LaneID: benchLane, LeaseTTLMs: 30_000},
		GrantTTLMs: 5000, AttemptTimeoutFromPolicy: true})
}

func floorComplete(ctx context.Context, vc *valkey.Client, id model.ExecutionID, cr *valkey.FabricClaimResult) error {
	p := &valkey.CompleteExecutionParams{ExecutionID: id, Fence: cr.Fence()}
	c := p.CallFor(benchLane, cr.AttemptIndex, "bench-floor")
	_, err := vc.FCall(ctx, c.Function, c.Keys, c.Args)
	return err
}

func floorClaimComplete(ctx context.Context, vc *valkey.Client, id model.ExecutionID) (floorIDs, error) {
	cr, err := floorClaim(ctx, vc, id)
	if err != nil {
		return floorIDs{}, err
	}
	return floorIDs{eid: string(id), lease: cr.LeaseID, attempt: cr.AttemptID}, floorComplete(ctx, vc, id, cr)
}

// captureFloor runs one execution under MONITOR and returns the writes
// its functions ran, ids replaced by placeholders.
func captureFloor(ctx context.Context, e *benchEnv, vc *valkey.Client, part model.Partition) ([]floorCmd, error) {
	m, err := openMonitor(e.vsrv.Socket())
	if err != nil {
		return nil, err
	}
	defer m.c.Close()
	id := model.NewExecutionID(part, model.NewUUID())
	ids, err := floorExec(ctx, vc, id, "x")
	if err != nil {
		return nil, err
	}
	const end = "fabric-bench-floor-end"
	raw := vc.Raw()
	if err := raw.Do(ctx, raw.B().Echo().Message(end).Build()).Error(); err != nil {
		return nil, err
	}
	rep := strings.NewReplacer(ids.eid, phEID, ids.lease, phLease, ids.attempt, phAttempt)
	var out []floorCmd
	for {
		lua, args, err := m.next()
		if err != nil {
			return nil, err
		}
		if len(args) == 2 && strings.EqualFold(args[0], "echo") && args[1] == end {
			break
		}
		if !lua || len(args) == 0 || floorReads[strings.ToUpper(args[0])] {
			continue
		}
		c := make(floorCmd, len(args))
		for i, a := range args {
			c[i] = rep.Replace(a)
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("MONITOR saw no write of the functions")
	}
	return out, nil
}

// luaQuote renders s as a Lua string literal.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' || c == '\'':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 32 || c > 126:
			fmt.Fprintf(&b, "\\%03d", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// floorScript renders the captured writes as one script of literal
// redis.call lines: arguments that carry an id are ARGV entries, the
// rest literals. It returns the script and, per execution, its ARGV.
func floorScript(cmds []floorCmd) (string, func(floorIDs) []string) {
	var b strings.Builder
	var varying []string
	for _, c := range cmds {
		b.WriteString("redis.call(")
		for i, a := range c {
			if i > 0 {
				b.WriteString(", ")
			}
			if strings.Contains(a, "\x00") {
				varying = append(varying, a)
				fmt.Fprintf(&b, "ARGV[%d]", len(varying))
			} else {
				b.WriteString(luaQuote(a))
			}
		}
		b.WriteString(")\n")
	}
	b.WriteString("return 1\n")
	return b.String(), func(ids floorIDs) []string {
		out := make([]string, len(varying))
		for i, v := range varying {
			out[i] = ids.fill(v)
		}
		return out
	}
}

// parallel runs f(i) for i in [0, n) on k goroutines, returning the first
// error.
func parallel(n, k int, f func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, k)
	for g := 0; g < k; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += k {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// cpuOver runs f and returns the server main-thread CPU µs it took per
// unit of n.
func (e *benchEnv) cpuOver(ctx context.Context, n int, f func() error) (float64, cpuSample, error) {
	c0, err0 := e.serverCPU(ctx)
	if err := f(); err != nil {
		return nan(), cpuSample{}, err
	}
	c1, err1 := e.serverCPU(ctx)
	return cpuPerJob(c0, c1, err0 == nil, err1 == nil, int64(n)), c1, nil
}

// floorSetup connects to the bench server, bootstraps the bench lane and
// captures the writes of one execution on its solo partition (the floor's
// replay); the caller closes vc.
func floorSetup(ctx context.Context, e *benchEnv) (vc *valkey.Client, part model.Partition, cmds []floorCmd, err error) {
	if vc, err = e.dial(ctx); err != nil {
		return nil, part, nil, err
	}
	if err = vc.Bootstrap(ctx, valkey.BootstrapConfig{Lanes: []string{benchLane}}); err != nil {
		vc.Close()
		return nil, part, nil, err
	}
	cl, err := sdk.NewClient(ctx, sdk.ClientConfig{Backend: vc, Logger: e.log})
	if err != nil {
		vc.Close()
		return nil, part, nil, err
	}
	part = cl.Partitions().SoloPartition(benchLane)
	if cmds, err = captureFloor(ctx, e, vc, part); err != nil {
		vc.Close()
		return nil, part, nil, err
	}
	return vc, part, cmds, nil
}

// floorConcurrency is how many executions the floor runs have in flight.
const floorConcurrency = 8

// runFloor measures scenario 1's floor rows over n executions.
func runFloor(ctx context.Context, e *benchEnv, sc *Scenario, n int) error {
	vc, part, cmds, err := floorSetup(ctx, e)
	if err != nil {
		return err
	}
	defer vc.Close()
	fresh := func() []floorIDs { return freshFloorIDs(part, n) }

	createUs, claimUs, completeUs, cpu, err := floorFunctions(ctx, e, vc, part, n, floorConcurrency)
	if err != nil {
		return err
	}
	c1, l1, d1, _, err := floorFunctions(ctx, e, vc, part, max(n/4, 1), 1)
	if err != nil {
		return err
	}
	serialUs := c1 + l1 + d1
	fnUs := createUs + claimUs + completeUs

	pipeUs, evalUs, err := floorReplay(ctx, e, vc, cmds, n, fresh)
	if err != nil {
		return err
	}

	counts := map[string]int{}
	for _, c := range cmds {
		counts[strings.ToUpper(c[0])]++
	}
	var mix []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		mix = append(mix, fmt.Sprintf("%d %s", counts[k], k))
	}
	what := fmt.Sprintf("%d executions, %d in flight, create → fabric_claim_next → complete as the SDK sends them (one call in flight instead: %s µs)", n, floorConcurrency, fmtNum(serialUs, ""))
	sc.Rows = append(sc.Rows,
		Row{Measure: "contract floor: server CPU µs per execution, plain pipelined writes", Fabric: fnUs, Versus: "the same writes, one pipeline",
			Peer: pipeUs, Unit: "µs",
			Note: fmt.Sprintf("%s, functions run phase by phase (ff_create_execution %s, fabric_claim_next %s, ff_complete_execution %s µs); the floor replays the %d writes the three functions leave (MONITOR on one execution: %s) with fresh ids, one pipeline per execution; %s",
				what, fmtNum(createUs, ""), fmtNum(claimUs, ""), fmtNum(completeUs, ""), len(cmds), strings.Join(mix, ", "), cpuLabel(cpu))},
		Row{Measure: "contract floor: server CPU µs per execution, one EVALSHA of the writes", Fabric: fnUs, Versus: "the same writes, one EVALSHA",
			Peer: evalUs, Unit: "µs",
			Note: fmt.Sprintf("%s; the floor replays the same %d writes as literal redis.call lines of one cached script (ids as ARGV), one EVALSHA per execution", what, len(cmds))})
	return nil
}

// freshFloorIDs mints n executions' ids on part for a replay.
func freshFloorIDs(part model.Partition, n int) []floorIDs {
	out := make([]floorIDs, n)
	for i := range out {
		out[i] = floorIDs{eid: string(model.NewExecutionID(part, model.NewUUID())),
			lease: model.NewUUID().String(), attempt: model.NewUUID().String()}
	}
	return out
}

// floorReplay replays the captured writes for n fresh executions (ids
// from fresh), first as one pipeline of plain commands per execution,
// then as one EVALSHA of literal redis.call lines per execution, and
// returns the server CPU µs per execution of each.
func floorReplay(ctx context.Context, e *benchEnv, vc *valkey.Client, cmds []floorCmd, n int, fresh func() []floorIDs) (pipeUs, evalUs float64, err error) {
	raw := vc.Raw()
	// (a) the writes as plain commands, one pipeline per execution.
	pipeIDs := fresh()
	pipeUs, _, err = e.cpuOver(ctx, n, func() error {
		return parallel(n, floorConcurrency, func(i int) error {
			batch := make(vk.Commands, 0, len(cmds))
			for _, c := range cmds {
				args := make([]string, len(c)-1)
				for j, a := range c[1:] {
					args[j] = pipeIDs[i].fill(a)
				}
				batch = append(batch, raw.B().Arbitrary(c[0]).Args(args...).Build())
			}
			for _, r := range raw.DoMulti(ctx, batch...) {
				if err := r.Error(); err != nil {
					return err
				}
			}
			return nil
		})
	})
	if err != nil {
		return nan(), nan(), fmt.Errorf("floor pipeline: %w", err)
	}

	// (b) the writes as one script of literal redis.call lines.
	script, argv := floorScript(cmds)
	sha, err := raw.Do(ctx, raw.B().ScriptLoad().Script(script).Build()).ToString()
	if err != nil {
		return nan(), nan(), fmt.Errorf("floor SCRIPT LOAD: %w", err)
	}
	evalIDs := fresh()
	evalUs, _, err = e.cpuOver(ctx, n, func() error {
		return parallel(n, floorConcurrency, func(i int) error {
			return raw.Do(ctx, raw.B().Evalsha().Sha1(sha).Numkeys(0).Arg(argv(evalIDs[i])...).Build()).Error()
		})
	})
	if err != nil {
		return nan(), nan(), fmt.Errorf("floor EVALSHA: %w", err)
	}
	return pipeUs, evalUs, nil
}

// floorFunctions runs n executions through the functions one phase at a
// time (every create, then every claim, then every completion), inflight
// calls at once, and returns the server CPU µs per execution of each
// phase.
func floorFunctions(ctx context.Context, e *benchEnv, vc *valkey.Client, part model.Partition, n, inflight int) (createUs, claimUs, completeUs float64, cpu cpuSample, err error) {
	// The functions, one phase at a time: every create, then every claim,
	// then every completion.
	ids := make([]model.ExecutionID, n)
	for i := range ids {
		ids[i] = model.NewExecutionID(part, model.NewUUID())
	}
	claims := make([]*valkey.FabricClaimResult, n)
	createUs, _, err = e.cpuOver(ctx, n, func() error {
		return parallel(n, inflight, func(i int) error {
			_, err := vc.CreateExecution(ctx, &valkey.CreateExecutionParams{ExecutionID: ids[i], Namespace: sdk.DefaultNamespace,
				LaneID: benchLane, ExecutionKind: "default", CreatorIdentity: "bench", Payload: "x"})
			return err
		})
	})
	if err != nil {
		return nan(), nan(), nan(), cpuSample{}, fmt.Errorf("floor create: %w", err)
	}
	// Claims as the SDK's workers make them: fabric_claim_next, one each.
	claimed := make([]model.ExecutionID, n)
	claimUs, _, err = e.cpuOver(ctx, n, func() error {
		return parallel(n, inflight, func(i int) error {
			items, err := vc.ClaimNext(ctx, &valkey.FabricClaimNextParams{Partition: part, Lane: benchLane, WorkerID: "bench",
				WorkerInstanceID: "bench-floor", LeaseTTLMs: 30_000, GrantTTLMs: 5000, Claims: 1, Heads: 1})
			if err != nil {
				return err
			}
			if len(items) != 1 || items[0].Result == nil {
				return fmt.Errorf("fabric_claim_next claimed nothing: %+v", items)
			}
			claims[i], claimed[i] = items[0].Result, items[0].ExecutionID
			return nil
		})
	})
	if err != nil {
		return nan(), nan(), nan(), cpuSample{}, fmt.Errorf("floor claim: %w", err)
	}
	completeUs, cpu, err = e.cpuOver(ctx, n, func() error {
		return parallel(n, inflight, func(i int) error { return floorComplete(ctx, vc, claimed[i], claims[i]) })
	})
	if err != nil {
		return nan(), nan(), nan(), cpuSample{}, fmt.Errorf("floor complete: %w", err)
	}
	return createUs, claimUs, completeUs, cpu, nil
}
