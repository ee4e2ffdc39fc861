package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// Pending waitpoints and multi-waitpoint (composite) conditions on
// Postgres.
//
// A pending waitpoint is an ff_waitpoint_pending row in state 'pending'
// whose expires_at_ms is its expiry (what pg_pending_wp_expiry closes)
// and whose condition column, until the attempt suspends on it, holds
// the pendingDoc: the attempt it belongs to and the signals buffered for
// it. Suspending on it replaces that with the suspension's condition,
// moves the buffered signals into ff_suspension_current.member_map under
// its key, and makes it 'active' with the suspension's timeout.

// pendingDoc is ff_waitpoint_pending.condition of a pending waitpoint.
type pendingDoc struct {
	AttemptIndex int            `json:"attempt_index"`
	Buffered     []signalRecord `json:"buffered_signals"`
}

// CreatePendingWaitpointParams are the inputs of CreatePendingWaitpoint.
type CreatePendingWaitpointParams = backend.CreatePendingWaitpointParams

func isUniqueViolation(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23505"
}

// CreatePendingWaitpoint creates a pending waitpoint of the fenced
// attempt (upstream's create_waitpoint), in one transaction:
//
//	ff_waitpoint_hmac: a random secret under kid "fabric-1" when the keystore is empty
//	ff_waitpoint_pending: state pending, its token, expires_at_ms = ExpiresAt,
//	  condition = {attempt_index, buffered_signals: []}
//
// A stale fence writes nothing (CodeStaleLease, CodeLeaseExpired,
// CodeExecutionNotActive); an existing waitpoint id is CodeInvalidInput.
func (c *Client) CreatePendingWaitpoint(ctx context.Context, p *CreatePendingWaitpointParams) (*backend.Waitpoint, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("create pending waitpoint: %w", err)
	}
	wp, err := model.ParseUUID(p.WaitpointID)
	if err != nil || p.WaitpointKey == "" || p.ExpiresAt <= 0 {
		return nil, fmt.Errorf("create pending waitpoint of %s: %w: a UUID id, a key and an expiry are required",
			p.ExecutionID, CodeInvalidInput)
	}
	doc, _ := json.Marshal(pendingDoc{AttemptIndex: p.Fence.AttemptIndex, Buffered: []signalRecord{}})
	out := &backend.Waitpoint{ID: wp.String(), Key: p.WaitpointKey}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		kid, secret, err := signingKey(ctx, tx, now)
		if err != nil {
			return err
		}
		out.Token = signToken(kid, secret, k.execID(), out.ID)
		_, err = tx.Exec(ctx, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token,
    created_at_ms, expires_at_ms, condition, waitpoint_key, state, required_signal_names)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, 'pending', '{}')`,
			k.part, [16]byte(wp), [16]byte(k.uuid), kid, out.Token, now, p.ExpiresAt, string(doc), p.WaitpointKey)
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: waitpoint %s exists", CodeInvalidInput, wp)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create pending waitpoint of %s: %w", p.ExecutionID, err)
	}
	return out, nil
}

// CreatePendingWaitpoint implements backend.WaitpointDriver.
func (d *Driver) CreatePendingWaitpoint(ctx context.Context, p *backend.CreatePendingWaitpointParams) (*backend.Waitpoint, error) {
	r, err := d.c.CreatePendingWaitpoint(ctx, p)
	return r, mapControlErr(err, true)
}

// pendingWaitpoint is what SuspendExecution reads of a pending waitpoint
// it activates.
type pendingWaitpoint struct {
	key, token string
	buffered   []signalRecord
}

// activatePending locks the pending waitpoint wp of the execution's
// attempt and returns it; one that is missing, no longer pending or
// expired is CodeWaitpointNotFound, one of another execution or attempt
// CodeInvalidToken (upstream: invalid_waitpoint_for_execution).
func activatePending(ctx context.Context, tx pgx.Tx, k execKey, wp model.UUID, attempt int, now int64) (*pendingWaitpoint, error) {
	var owner [16]byte
	var state string
	var expires *int64
	var raw []byte
	pw := &pendingWaitpoint{}
	err := tx.QueryRow(ctx, `SELECT execution_id, waitpoint_key, token, state, expires_at_ms, condition
  FROM ff_waitpoint_pending WHERE partition_key = $1 AND waitpoint_id = $2 FOR UPDATE`, k.part, [16]byte(wp)).Scan(
		&owner, &pw.key, &pw.token, &state, &expires, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: pending waitpoint %s", CodeWaitpointNotFound, wp)
	}
	if err != nil {
		return nil, err
	}
	var doc pendingDoc
	if state == "pending" {
		if err := json.Unmarshal(raw, &doc); err != nil {
			return nil, fmt.Errorf("pending waitpoint %s: %w", wp, err)
		}
	}
	switch {
	case owner != [16]byte(k.uuid) || state == "pending" && doc.AttemptIndex != attempt:
		return nil, fmt.Errorf("%w: waitpoint %s is not of this attempt", CodeInvalidToken, wp)
	case state != "pending":
		return nil, fmt.Errorf("%w: waitpoint %s is %s, not pending", CodeWaitpointNotFound, wp, state)
	case expires != nil && *expires < now:
		return nil, fmt.Errorf("%w: pending waitpoint %s expired", CodeWaitpointNotFound, wp)
	}
	pw.buffered = doc.Buffered
	return pw, nil
}

// bufferSignal records a signal for a pending waitpoint (upstream's
// buffer_signal_for_pending_waitpoint): appended to its pendingDoc (a
// repeat of an idempotency key among its buffered signals is a
// duplicate: nothing written), with its ff_signal_event; evaluated when
// the attempt suspends on the waitpoint.
func bufferSignal(ctx context.Context, tx pgx.Tx, k execKey, wp model.UUID, raw []byte, p *DeliverSignalParams,
	now int64, res *DeliverSignalResult) error {
	var doc pendingDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		return fmt.Errorf("pending waitpoint %s: %w", wp, err)
	}
	if p.IdempotencyKey != "" {
		for _, x := range doc.Buffered {
			if x.IdempotencyKey == p.IdempotencyKey {
				res.SignalID, res.Duplicate = x.SignalID, true
				return nil
			}
		}
	}
	doc.Buffered = append(doc.Buffered, newSignalRecord(p, wp, now))
	b, _ := json.Marshal(doc)
	if _, err := tx.Exec(ctx, `UPDATE ff_waitpoint_pending SET condition = $3::jsonb WHERE partition_key = $1 AND waitpoint_id = $2`,
		k.part, [16]byte(wp), string(b)); err != nil {
		return err
	}
	res.Effect = backend.EffectBuffered
	return insertSignalEvent(ctx, tx, k, p, wp, now)
}

// Composite conditions (backend.CompositeCondition): a tree of AllOf,
// Count and Single nodes over waitpoint keys, evaluated over the signals
// ff_suspension_current.member_map holds per key.

// compositeDoc is the composite resume condition document.
type compositeDoc struct {
	Composite bool          `json:"composite"`
	Tree      compositeNode `json:"tree"`
}

type compositeNode struct {
	Kind         string          `json:"kind"`
	Path         string          `json:"path"`
	Members      []compositeNode `json:"members"`
	N            int             `json:"n"`
	CountKind    string          `json:"count_kind"`
	Matcher      *nodeMatcher    `json:"matcher"`
	Waitpoints   []string        `json:"waitpoints"`
	WaitpointKey string          `json:"waitpoint_key"`
}

type nodeMatcher struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

func (m *nodeMatcher) accepts(name string) bool {
	return m == nil || m.Kind != "ByName" || m.Name == name
}

// candidates are the nodes a signal on waitpoint key can count for:
// Single nodes of the key and Count nodes listing it (upstream's DFS
// through AllOf).
func (n *compositeNode) candidates(key string) []*compositeNode {
	switch n.Kind {
	case "Single":
		if n.WaitpointKey == key {
			return []*compositeNode{n}
		}
	case "Count":
		if slices.Contains(n.Waitpoints, key) {
			return []*compositeNode{n}
		}
	case "AllOf":
		var out []*compositeNode
		for i := range n.Members {
			out = append(out, n.Members[i].candidates(key)...)
		}
		return out
	}
	return nil
}

// token is one satisfied part of a composite condition (upstream's
// satisfied_set members: leaf:<path>, wp:<waitpoint id>, sig:<signal
// id>, src:<type>:<identity>) and the first signal that made it.
type token struct {
	name string
	sig  signalRecord
}

// eval returns whether the node holds over the signals per waitpoint key
// and the tokens it counted.
func (n *compositeNode) eval(sigs map[string][]signalRecord) (bool, []token) {
	switch n.Kind {
	case "Single":
		for _, s := range sigs[n.WaitpointKey] {
			if n.Matcher.accepts(s.Name) {
				return true, []token{{"leaf:" + n.Path, s}}
			}
		}
		return false, nil
	case "Count":
		seen := map[string]bool{}
		var toks []token
		for _, key := range n.Waitpoints {
			for _, s := range sigs[key] {
				if !n.Matcher.accepts(s.Name) {
					continue
				}
				t := "wp:" + s.WaitpointID
				switch n.CountKind {
				case "DistinctSignals":
					t = "sig:" + s.SignalID
				case "DistinctSources":
					t = "src:" + s.SourceType + ":" + s.SourceIdentity
				}
				if !seen[t] {
					seen[t] = true
					toks = append(toks, token{t, s})
				}
			}
		}
		return n.N > 0 && len(toks) >= n.N, toks
	case "AllOf":
		all := len(n.Members) > 0
		var toks []token
		for i := range n.Members {
			ok, t := n.Members[i].eval(sigs)
			all = all && ok
			toks = append(toks, t...)
		}
		return all, toks
	}
	return false, nil // NeverBySignal and unknown kinds
}

// deliverComposite evaluates a signal rec, received on waitpoint key,
// against a composite tree over members (the signals recorded so far per
// key, rec not among them). It sets rec.Matched and returns the effect,
// and when the condition now holds the satisfying signal ids, oldest
// first.
func deliverComposite(tree *compositeNode, members map[string][]signalRecord, key string, rec *signalRecord) (string, bool, []string) {
	cands := tree.candidates(key)
	if len(cands) == 0 {
		return "signal_ignored_not_in_condition", false, nil
	}
	if !slices.ContainsFunc(cands, func(c *compositeNode) bool { return c.Matcher.accepts(rec.Name) }) {
		return "signal_ignored_matcher_failed", false, nil
	}
	rec.Matched = true
	_, before := tree.eval(members)
	after := map[string][]signalRecord{}
	for k, v := range members {
		after[k] = v
	}
	after[key] = append(slices.Clone(members[key]), *rec)
	ok, toks := tree.eval(after)
	if len(toks) == len(before) {
		return "appended_to_waitpoint_duplicate", false, nil
	}
	if !ok {
		return backend.EffectAppended, false, nil
	}
	sort.SliceStable(toks, func(i, j int) bool { return toks[i].sig.AcceptedAt < toks[j].sig.AcceptedAt })
	var ids []string
	for _, t := range toks {
		if !slices.Contains(ids, t.sig.SignalID) {
			ids = append(ids, t.sig.SignalID)
		}
	}
	return backend.EffectResumed, true, ids
}

// memberSignals decodes member_map's signal lists per waitpoint key (an
// entry that is not a list, a pending_wp_expiry mark, has none).
func memberSignals(members map[string]json.RawMessage) map[string][]signalRecord {
	out := make(map[string][]signalRecord, len(members))
	for key, raw := range members {
		var sigs []signalRecord
		if json.Unmarshal(raw, &sigs) == nil {
			out[key] = sigs
		}
	}
	return out
}
