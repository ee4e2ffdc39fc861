// Package audit checks fabric's promise that nothing is left behind:
// every created execution is terminal, or waits in a state whose reason
// and owner are stated (leased by worker W until T, delayed until T,
// blocked by B, suspended on waitpoint W, eligible and waiting for a
// worker of lane L, awaiting reclaim by a worker of lane L). Anything
// else — a state no scanner or worker will move, an execution missing
// from the index its state names or from every index (on Valkey, a core
// all_executions does not list), a due time long past — is a violation.
//
// Tests and soaks call Valkey or Postgres after a drain; `fabric
// executions stuck` prints the violations of a live deployment.
//
//	rep, err := audit.Valkey(ctx, client, audit.Options{})
//	for _, v := range rep.Violations { fmt.Println(v) }
package audit

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/fabric-host/fabric/model"
)

// Options tune a check.
type Options struct {
	// Grace is how far past its due time a timer may be before it counts
	// as missed (a lease not yet marked expired, a delay not promoted, a
	// suspension timeout not applied). Zero means 30 s.
	Grace time.Duration
	// ReclaimWithin is how long an expired lease may await reclaim before
	// it is a violation (no worker of its lane took it). Zero means
	// 2 minutes; negative means never.
	ReclaimWithin time.Duration
	// Limit caps the violations reported (0: 1000); Checked still counts
	// every execution.
	Limit int
	// Only, when set, restricts the check to these execution ids
	// ("{fp:N}:uuid", as the SDK gives them: a demo run's own on a shared
	// deployment); the rest are skipped, uncounted.
	// On Postgres the terminal ones among them are not read: Checked and
	// Terminal then count only the non-terminal ones.
	Only map[string]bool
}

func (o Options) withDefaults() Options {
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.ReclaimWithin == 0 {
		o.ReclaimWithin = 2 * time.Minute
	}
	if o.Limit <= 0 {
		o.Limit = 1000
	}
	return o
}

// Execution is one execution's standing.
type Execution struct {
	// ID is the execution id; Lane its lane.
	ID, Lane string
	// Phase, Ownership and Eligibility are its stored state dimensions.
	Phase, Ownership, Eligibility string
	// Waiting states why a non-terminal execution waits and for whom.
	Waiting string
	// Problem says what is wrong (violations only).
	Problem string
}

// String prints the execution, its state and its problem.
func (e Execution) String() string {
	s := fmt.Sprintf("%s lane=%s state=%s/%s/%s", e.ID, e.Lane, e.Phase, e.Ownership, e.Eligibility)
	if e.Waiting != "" {
		s += " waiting: " + e.Waiting
	}
	if e.Problem != "" {
		s += " PROBLEM: " + e.Problem
	}
	return s
}

// Report is the result of one check.
type Report struct {
	// At is the server time the check used.
	At time.Time
	// Checked counts executions read; Terminal those that ended.
	Checked, Terminal int
	// Waiting counts non-terminal executions by kind of wait ("leased",
	// "eligible", "delayed" (not yet due), "awaiting promotion" (due, the
	// promoter not there yet), "blocked:<reason>", "suspended",
	// "awaiting reclaim").
	Waiting map[string]int
	// Violations are executions that neither ended nor state a live
	// reason to wait, up to Options.Limit.
	Violations []Execution
	// More counts violations beyond the limit.
	More int
}

// OK reports whether the check found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 && r.More == 0 }

// Summary is one line: counts by kind and the number of violations.
func (r *Report) Summary() string {
	kinds := make([]string, 0, len(r.Waiting))
	for k, n := range r.Waiting {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	w := "none"
	if len(kinds) > 0 {
		w = strings.Join(kinds, ", ")
	}
	return fmt.Sprintf("%d executions: %d terminal; waiting: %s; violations: %d",
		r.Checked, r.Terminal, w, len(r.Violations)+r.More)
}

func (r *Report) violate(o Options, e Execution) {
	if len(r.Violations) >= o.Limit {
		r.More++
		return
	}
	r.Violations = append(r.Violations, e)
}

func (r *Report) wait(kind string) {
	if r.Waiting == nil {
		r.Waiting = map[string]int{}
	}
	r.Waiting[kind]++
}

// fmtAt prints a server time in ms as UTC RFC 3339 with milliseconds.
func fmtAt(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

// record is one execution as a backend stores it, in the terms the
// check needs.
type record struct {
	id, lane, phase, own, elig string
	reason, detail, worker     string
	waitpoint                  string
	// leaseExp is when the lease expires (leased), lostAt when it was
	// marked expired or revoked (ms; 0 unknown).
	leaseExp, lostAt int64
	// dueAt is the delay's end (delayed) or the suspension's timeout
	// (suspended; model.SuspendedNoTimeoutScore: none); 0 unknown.
	dueAt int64
	// missingFrom names the index the state calls for when the execution
	// is not in it (Valkey).
	missingFrom string
	inFlow      bool
	// checkID asks for the id to parse as a FlowFabric execution id.
	checkID bool
}

// scannerNames name the scanner plugin that moves each timer on a
// backend, for the hint of a missed one: the stock Valkey set's, and the
// pg_* set's on Postgres.
type scannerNames struct{ leaseExpiry, promoter, suspensionTimeout string }

var (
	valkeyScanners   = scannerNames{"lease_expiry", "delayed_promoter", "suspension_timeout"}
	postgresScanners = scannerNames{"pg_lease_expiry", "pg_delayed_promoter", "pg_suspension_timeout"}
)

// classify books one execution: terminal, waiting with its reason, or a
// violation; sc names the backend's scanners in the hint of a missed
// timer.
func classify(o Options, rep *Report, r record, nowMs int64, sc scannerNames) {
	e := Execution{ID: r.id, Lane: r.lane, Phase: r.phase, Ownership: r.own, Eligibility: r.elig}
	grace := o.Grace.Milliseconds()
	bad := func(format string, a ...any) {
		e.Problem = fmt.Sprintf(format, a...)
		rep.violate(o, e)
	}
	if r.checkID {
		if _, err := model.ParseExecutionID(r.id); err != nil {
			bad("malformed member of all_executions: %v", err)
			return
		}
	}
	switch {
	case r.phase == "":
		bad("listed but its core is missing or has no lifecycle_phase")
		return
	case r.missingFrom != "":
		bad("missing from %s, the index its state names (no scanner or worker will find it there)", r.missingFrom)
		return
	}
	switch r.phase {
	case model.PhaseTerminal:
		rep.Terminal++
		return
	case model.PhaseActive:
		switch r.own {
		case model.OwnershipLeased:
			e.Waiting = fmt.Sprintf("leased by worker %s until %s", r.worker, fmtAt(r.leaseExp))
			if r.leaseExp > 0 && nowMs-r.leaseExp > grace {
				bad("lease expired at %s and was not marked expired within %s (is %s running?)", fmtAt(r.leaseExp), o.Grace, sc.leaseExpiry)
				return
			}
			rep.wait("leased")
			return
		case model.OwnershipLeaseExpiredReclaimable, model.OwnershipLeaseRevoked:
			how := "expired"
			if r.own == model.OwnershipLeaseRevoked {
				how = "revoked"
			}
			e.Waiting = fmt.Sprintf("lease %s at %s, awaiting reclaim by a worker of lane %s", how, fmtAt(r.lostAt), r.lane)
			if o.ReclaimWithin > 0 && r.lostAt > 0 && nowMs-r.lostAt > o.ReclaimWithin.Milliseconds() {
				bad("no worker of lane %s reclaimed it within %s", r.lane, o.ReclaimWithin)
				return
			}
			rep.wait("awaiting reclaim")
			return
		}
		bad("active without a lease state (ownership %q)", r.own)
		return
	case model.PhaseRunnable:
		switch r.elig {
		case model.EligibleNow:
			e.Waiting = "eligible, waiting for a worker of lane " + r.lane
			rep.wait("eligible")
			return
		case model.EligibleNotUntilTime:
			if r.dueAt == 0 {
				bad("delayed without a time to wake (nothing will promote it)")
				return
			}
			e.Waiting = "delayed until " + fmtAt(r.dueAt)
			if nowMs-r.dueAt > grace {
				bad("delay ended at %s and was not promoted within %s (is %s running?)", fmtAt(r.dueAt), o.Grace, sc.promoter)
				return
			}
			if nowMs > r.dueAt {
				// Due, within the grace: the promoter has yet to reach it.
				e.Waiting += ", awaiting promotion"
				rep.wait("awaiting promotion")
				return
			}
			rep.wait("delayed")
			return
		case model.EligibleBlockedByDeps, model.EligibleBlockedByBudget, model.EligibleBlockedByQuota,
			model.EligibleBlockedByRoute, model.EligibleBlockedByOperator:
			reason := r.reason
			if reason == "" {
				reason = r.elig
			}
			e.Waiting = "blocked: " + reason
			if r.detail != "" {
				e.Waiting += " (" + r.detail + ")"
			}
			if r.elig == model.EligibleBlockedByDeps && !r.inFlow {
				bad("blocked on dependencies but in no flow")
				return
			}
			rep.wait("blocked:" + reason)
			return
		}
		bad("runnable with eligibility %q, which no scanner or worker acts on", r.elig)
		return
	case model.PhaseSuspended:
		e.Waiting = "suspended on waitpoint " + r.waitpoint
		if r.dueAt != 0 && r.dueAt != model.SuspendedNoTimeoutScore {
			e.Waiting += " until " + fmtAt(r.dueAt)
			if nowMs-r.dueAt > grace {
				bad("suspension timed out at %s and was not expired within %s (is %s running?)", fmtAt(r.dueAt), o.Grace, sc.suspensionTimeout)
				return
			}
		}
		rep.wait("suspended")
		return
	}
	bad("unknown lifecycle phase %q", r.phase)
}
