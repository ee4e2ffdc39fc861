package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/internal/redact"
	"github.com/fabric-host/fabric/model"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// URL is a libpq/pgx connection URL or DSN. Required. TLS is its
	// sslmode (up to verify-full), sslrootcert, sslcert and sslkey; pgx
	// also reads PGPASSWORD, PGPASSFILE and the other PG* variables.
	URL string
	// Password, when set, wins over the URL's and the environment's. It
	// is never logged or quoted in an error.
	Password string
	// MaxConns caps the pool (0: pgxpool's default, max(4, NumCPU)).
	MaxConns int32
	// Now is the clock every operation reads "now" from (default
	// time.Now). Tests and replay inject their own.
	Now func() time.Time
	// Partitions is the deployment's partition config (default 256/32/32);
	// ClaimForWorker reads a lane's solo partition from it.
	Partitions model.PartitionConfig
	// Logger receives client logs (default slog.Default()).
	Logger *slog.Logger
	// MaxPayloadBytes caps an execution's payload at create (0:
	// backend.DefaultMaxPayloadBytes, 2 MiB; negative: no limit). A larger
	// one is refused with backend.ErrInvalidInput before anything is
	// written.
	MaxPayloadBytes int
}

// Client is fabric's Postgres backend client: a pgx pool and one typed
// method per operation. It is safe for concurrent use.
type Client struct {
	pool  *pgxpool.Pool
	parts model.PartitionConfig
	now   func() time.Time
	log   *slog.Logger
	// maxPayload caps a created execution's payload (0: none).
	maxPayload int
	// completes is the group commit of CompleteExecution.
	completes completeGroup
	// hot holds the literal-partition texts of the hot path (hotplan.go).
	hot hotPlans
	// eligible paces the fabric_eligible NOTIFYs of creates
	// (eligible_notes.go).
	eligible eligibleNotes
}

// IsUnreachable reports whether err, from Connect, means the server is
// not there yet (refused, no socket yet, a timeout, still starting up or
// shutting down) rather than refusing this client: such a connect may
// succeed later. Authentication and TLS failures are not.
func IsUnreachable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// 57P03 cannot_connect_now: starting up, shutting down, in recovery.
		return pgErr.Code == "57P03"
	}
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ENOENT, syscall.EHOSTUNREACH, syscall.ENETUNREACH} {
		if errors.Is(err, e) {
			return true
		}
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// ParsePoolConfig parses url into a pool config with password, when set,
// winning over the URL's; its error quotes no password.
func ParsePoolConfig(url, password string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("postgres: parse url: %w", err), append(redact.Secrets(url), password)...)
	}
	if password != "" {
		pc.ConnConfig.Password = password // fallback hosts share it
	}
	return pc, nil
}

// Connect opens a pool on cfg.URL and checks it with a ping.
func Connect(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.URL == "" {
		return nil, errors.New("postgres: ClientConfig.URL is required")
	}
	// pgx redacts the URLs it quotes; scrub its errors anyway, since a
	// password must reach no log whatever a driver version does.
	secrets := redact.Secrets(cfg.URL)
	if cfg.Password != "" {
		secrets = append(secrets, cfg.Password)
	}
	pc, err := ParsePoolConfig(cfg.URL, cfg.Password)
	if err != nil {
		return nil, err
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	// Every hot table has 256 hash partitions. A generic plan of a
	// prepared statement prunes only at run time, and Postgres 15 still
	// locks every partition of it on each execution; custom plans prune
	// while planning. Measured: several times faster claims.
	// The hot path's statements get generic plans another way
	// (hotplan.go), unless the URL sets plan_cache_mode itself.
	_, userPlans := pc.ConnConfig.RuntimeParams["plan_cache_mode"]
	if !userPlans {
		pc.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, redact.Error(fmt.Errorf("postgres: connect: %w", err), secrets...)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, redact.Error(fmt.Errorf("postgres: connect: %w", err), secrets...)
	}
	c := &Client{pool: pool, parts: cfg.Partitions, now: cfg.Now, log: cfg.Logger, maxPayload: backend.PayloadLimit(cfg.MaxPayloadBytes)}
	c.hot.off = userPlans
	c.hot.child = c.childOf
	if c.parts == (model.PartitionConfig{}) {
		c.parts = model.DefaultPartitionConfig()
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	return c, nil
}

// Close closes the pool.
func (c *Client) Close() {
	c.waitCompletes()
	c.eligible.close()
	c.pool.Close()
}

// Partitions returns the partition config the client mints and claims
// with.
func (c *Client) Partitions() model.PartitionConfig { return c.parts }

// Pool is the underlying pgx pool, for tests and migrations.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// nowMs is the injected clock in epoch milliseconds.
func (c *Client) nowMs() int64 { return c.now().UnixMilli() }

// inTx runs fn in one READ COMMITTED transaction: committed when fn returns
// nil, rolled back (leaving the database unchanged) on any error or panic.
// A missing ff_ table answers ErrNotMigrated.
func (c *Client) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return notMigrated(pgx.BeginFunc(ctx, c.pool, fn))
}

// ErrorCode is a logical error of an operation, matched with errors.Is.
// The values are the flowfabric library's codes (backend/valkey), so a
// conformance suite can compare both backends by code.
type ErrorCode string

// Error returns the code.
func (e ErrorCode) Error() string { return string(e) }

// FlowFabricCode implements backend.CodedError: the code itself.
func (e ErrorCode) FlowFabricCode() string { return string(e) }

// Logical errors of the Postgres operations.
const (
	CodeExecutionNotFound    ErrorCode = "execution_not_found"
	CodeInvalidInput         ErrorCode = "invalid_input"
	CodeStaleLease           ErrorCode = "stale_lease"
	CodeLeaseExpired         ErrorCode = "lease_expired"
	CodeExecutionNotActive   ErrorCode = "execution_not_active"
	CodeExecutionNotEligible ErrorCode = "execution_not_eligible"
	CodeCapabilityMismatch   ErrorCode = "capability_mismatch"
	CodeInvalidPolicyJSON    ErrorCode = "invalid_policy_json"
	// CodeExecutionConflict: a create re-sent an existing id (without an
	// idempotency key) with another payload.
	CodeExecutionConflict ErrorCode = "execution_conflict"
	// CodeNoEligibleExecution: ClaimForWorker found nothing to claim.
	CodeNoEligibleExecution ErrorCode = "no_eligible_execution"
)

// execKey is an execution id split into its stored form.
type execKey struct {
	part int16
	uuid model.UUID
}

func splitExecID(id model.ExecutionID) (execKey, error) {
	if _, err := model.ParseExecutionID(string(id)); err != nil {
		return execKey{}, fmt.Errorf("%w: %v", CodeInvalidInput, err)
	}
	u, err := model.ParseUUID(id.UUIDString())
	if err != nil {
		return execKey{}, fmt.Errorf("%w: %v", CodeInvalidInput, err)
	}
	p := id.Partition().Index
	if p > 32767 {
		return execKey{}, fmt.Errorf("%w: partition %d out of range", CodeInvalidInput, p)
	}
	return execKey{part: int16(p), uuid: u}, nil
}

// uuidText is the uuid in the text form Postgres accepts for a uuid
// parameter.
func (k execKey) id() string { return k.uuid.String() }

func (k execKey) execID() model.ExecutionID {
	return model.NewExecutionID(model.Partition{Family: model.FamilyFlow, Index: uint16(k.part)}, k.uuid)
}

// isSerialization reports SQLSTATE 40001/40P01 (retryable contention).
func isSerialization(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}
