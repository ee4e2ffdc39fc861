package backend

import (
	"context"
	"log/slog"
	"time"

	"github.com/fabric-host/fabric/model"
)

// ClaimerDriver opens a worker's claim session: the claim engine a
// worker's hot path runs on (Claimer). Each driver implements it its own
// way (Valkey: server-picked heads on the lanes' solo partitions, buffered
// heads, partition windows and keyevent wake-ups; Postgres: one
// SKIP LOCKED statement per lane and LISTEN fabric_eligible).
type ClaimerDriver interface {
	// NewClaimer opens a claim session for one worker instance. ctx bounds
	// the set-up only (reading the lanes' configuration, subscribing to
	// notifications); the session lives until Claimer.Close.
	NewClaimer(ctx context.Context, cfg *ClaimerConfig) (Claimer, error)
}

// ClaimerConfig configures a Claimer: what the worker is and how it
// claims. WorkerID, WorkerInstanceID, Lanes and LeaseTTLMs are required.
type ClaimerConfig struct {
	WorkerID         string
	WorkerInstanceID string
	// Lanes are the lanes the worker claims from.
	Lanes []string
	// Capabilities the worker offers; an execution's required
	// capabilities must all be among them.
	Capabilities []string
	// LeaseTTLMs is the lease lifetime (> 0).
	LeaseTTLMs int64
	// GrantTTLMs is the lifetime of the claim grants the session issues
	// (Valkey; 5000 when 0).
	GrantTTLMs int64
	// Concurrency is how many executions the worker runs at once: it
	// sizes how many eligible heads one read fetches (1 when 0).
	Concurrency int
	// DisableReclaim stops the session from taking over expired or
	// revoked leases (both backends: a reclaim pass at most once a second
	// takes them over as new "reclaim" attempts, marking a due lease
	// expired first when no scanner has).
	DisableReclaim bool
	// PromoteDelayed makes the session promote due delayed executions of
	// its lanes while it reads heads (Valkey).
	PromoteDelayed bool
	// ResolveDependencies makes Claimer.ResolveDependencies resolve a
	// terminal flow member's outgoing edges (Valkey; on Postgres the
	// host's reconciler does).
	ResolveDependencies bool
	// Notifications subscribes the session to eligible-work notifications
	// of its lanes (Valkey: ZADD keyevents; Postgres: LISTEN
	// fabric_eligible): Wake fires on them. Without them the worker finds
	// work by polling only.
	Notifications bool
	// Clock is the session's time source (time.Now when nil).
	Clock func() time.Time
	// Logger receives the session's logs (slog.Default() when nil).
	Logger *slog.Logger
}

// Claimer is a worker's claim session: the claim and complete-and-claim
// hot path, and what the worker's run loop needs to pace itself. Claim,
// CompleteAndClaim and ClaimExecution are safe for concurrent use.
type Claimer interface {
	// Claim claims up to n (n < 1 counts as 1) eligible executions of the
	// worker's lanes whose required capabilities it offers, under new
	// leases. Nothing claimable is (nil, nil); leases taken before a
	// later step failed are returned beside its error. One call may read
	// only part of the backend (a window of partitions): a run loop
	// concludes the lanes are idle after SweepRounds empty calls in a row.
	Claim(ctx context.Context, n int) ([]*ClaimResult, error)
	// CompleteAndClaim completes the lease p fences (as
	// Driver.CompleteExecution, with p.Holder set) and claims up to n
	// next executions, in as few round trips as the backend allows (on
	// Valkey the completion rides with the next claim in one batch).
	// completeErr is the completion's outcome, to be treated as that of
	// Driver.CompleteExecution (a caller may retry the completion with
	// it); claimErr the claim's. A backend whose run loop frees the slot
	// before the lease-ending call (FreesSlotBeforeEnd) may claim
	// nothing here.
	CompleteAndClaim(ctx context.Context, p *CompleteExecutionParams, n int) (next []*ClaimResult, completeErr, claimErr error)
	// ClaimExecution claims one named execution of lane, honouring a
	// claim grant issued to this worker id. One that is not this
	// worker's to run now (not runnable and eligible, taken, or needing a
	// capability the worker lacks — Valkey then parks it until a capable
	// worker registers) is (nil, nil) or an error matching
	// ErrNotClaimable or ErrCapabilityMismatch; a missing one
	// ErrNotFound.
	ClaimExecution(ctx context.Context, id model.ExecutionID, lane string) (*ClaimResult, error)
	// ResolveDependencies resolves the outgoing edges of the flow member
	// id after it ended terminally, when the session was configured to
	// (ClaimerConfig.ResolveDependencies) and the backend leaves it to
	// the worker; otherwise it does nothing. flowID is the flow the claim
	// saw ("" reads it again: a member can be claimed before it was added
	// to its flow).
	ResolveDependencies(ctx context.Context, id model.ExecutionID, flowID string) error
	// Wake is ready when eligible work was just indexed on one of the
	// worker's lanes; nil (never ready) without notifications.
	Wake() <-chan struct{}
	// NotificationsUp reports whether the notification subscription is up.
	NotificationsUp() bool
	// SweepRounds is how many empty Claim calls in a row cover every
	// partition of the worker's lanes once.
	SweepRounds() int
	// FreesSlotBeforeEnd reports whether a run loop should free a
	// handler's slot once the handler returns, before its lease-ending
	// call (the backend group-commits those calls, and claiming meanwhile
	// keeps the slots busy), rather than let CompleteAndClaim hand the
	// slot its next execution.
	FreesSlotBeforeEnd() bool
	// SpreadPartitions returns the partitions the session reads round
	// robin for lanes that spread over many partitions (none when no lane
	// spreads, and always none on Postgres).
	SpreadPartitions() []model.Partition
	// Close ends the session's background work (notification
	// subscriptions) and waits for it. Leases it claimed stay leased.
	Close()
}

// LaneSpreadDriver reads and writes a lane's solo-partitioner choice
// (model.LaneSpread): where a lane's executions outside flows are placed.
type LaneSpreadDriver interface {
	// LaneSpread reads lane's choice; the zero LaneSpread (FlowFabric's
	// partition) when none was stored, and always on Postgres.
	LaneSpread(ctx context.Context, lane string) (model.LaneSpread, error)
	// SetLaneSpread stores lane's choice. Postgres: ErrUnsupported.
	SetLaneSpread(ctx context.Context, lane string, s model.LaneSpread) error
}

// LaneSpreadTTL is how long a producer or worker trusts a lane's
// solo-partitioner choice it read (LaneSpreadDriver.LaneSpread) before
// reading it again.
const LaneSpreadTTL = 30 * time.Second
