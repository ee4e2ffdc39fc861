package postgres

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/fabric-host/fabric/backend"
	"github.com/fabric-host/fabric/model"
)

// SuspendParams are the inputs of SuspendExecution (Holder is not used).
// TimeoutAt ends the suspension through pg_suspension_timeout.
type SuspendParams = backend.SuspendExecutionParams

// SuspendResult is the outcome of SuspendExecution. Its Token
// authenticates signals to the waitpoint: "<kid>:<hex>", the HMAC-SHA256
// (keyed by the kid's secret in ff_waitpoint_hmac) of
// "<kid>:<execution id>:<waitpoint id>", as upstream signs it.
type SuspendResult = backend.SuspendExecutionResult

// suspendCondition is what DeliverSignal reads of the resume condition
// stored in ff_suspension_current.condition (backend.SignalSetCondition).
type suspendCondition struct {
	Type            string   `json:"condition_type"`
	Names           []string `json:"required_signal_names"`
	Mode            string   `json:"signal_match_mode"`
	MinimumCount    int      `json:"minimum_signal_count"`
	TimeoutBehavior string   `json:"timeout_behavior"`
}

func validBehavior(b string) bool {
	switch b {
	case backend.TimeoutFail, backend.TimeoutCancel, backend.TimeoutExpire, backend.TimeoutAutoResume, "escalate":
		return true
	}
	return false
}

// SuspendExecution releases the fenced lease and parks the execution on
// a new waitpoint (and p.Extra), or on a pending waitpoint of the attempt
// (p.PendingWaitpointID), in one transaction:
//
//	ff_waitpoint_hmac: a random secret under kid "fabric-1" when the keystore is empty
//	ff_waitpoint_pending: each waitpoint, state active, its token, required_signal_names,
//	  expires_at_ms = TimeoutAt, condition (a pending one is activated in place)
//	ff_suspension_current: upserted (suspension id, timeout_at_ms, timeout_behavior,
//	  reason_code, condition; satisfied_set [] and member_map reset: {} or the pending
//	  waitpoint's buffered signals under its key)
//	ff_exec_core: suspended / released / not_applicable / suspended / attempt_interrupted,
//	  blocking_reason waiting_for_signal, raw_fields current_suspension_id,
//	  current_waitpoint_id, suspension_attempt_index
//	ff_attempt: worker ids and lease NULL, lease_epoch + 1, outcome attempt_interrupted
//	ff_lease_event: revoked
//
// The condition is p.ResumeCondition: signal_set, or composite under
// AllWaitpoints / WaitpointQuorum. When a pending waitpoint's buffered
// signals already satisfy it, the waitpoint is deleted and nothing else
// is written: the result is AlreadySatisfied and the lease still holds
// (as upstream's ALREADY_SATISFIED). The fence is checked first, so a
// stale one writes nothing (CodeStaleLease, CodeLeaseExpired,
// CodeExecutionNotActive); so does a pending waitpoint that is missing,
// not pending, expired (CodeWaitpointNotFound) or of another attempt
// (CodeInvalidToken).
func (c *Client) SuspendExecution(ctx context.Context, p *SuspendParams) (*SuspendResult, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("suspend %s: %w", p.ExecutionID, err)
	}
	wpText := p.WaitpointID
	if p.PendingWaitpointID != "" {
		wpText = p.PendingWaitpointID
	}
	susp, err1 := model.ParseUUID(p.SuspensionID)
	wp, err2 := model.ParseUUID(wpText)
	behavior := p.TimeoutBehavior
	if behavior == "" {
		behavior = backend.TimeoutFail
	}
	switch {
	case err1 != nil || err2 != nil:
		return nil, fmt.Errorf("suspend %s: %w: suspension and waitpoint ids must be UUIDs", p.ExecutionID, CodeInvalidInput)
	case !validBehavior(behavior):
		return nil, fmt.Errorf("suspend %s: %w: timeout behavior %q", p.ExecutionID, CodeInvalidInput, behavior)
	case p.TimeoutAt < 0:
		return nil, fmt.Errorf("suspend %s: %w: negative timeout", p.ExecutionID, CodeInvalidInput)
	}
	if err := p.ValidateWaitpoints(); err != nil {
		return nil, fmt.Errorf("%w: %w", CodeInvalidInput, err)
	}
	names := p.SignalNames
	if names == nil {
		names = []string{}
	}
	q := *p
	q.TimeoutBehavior = behavior
	reason := p.ReasonCode
	if reason == "" {
		reason = "waiting_for_signal"
	}
	var timeout *int64
	if p.TimeoutAt > 0 {
		timeout = &p.TimeoutAt
	}
	res := &SuspendResult{}
	err = c.inTx(ctx, func(tx pgx.Tx) error {
		*res = SuspendResult{SuspensionID: susp.String(), WaitpointID: wp.String(), WaitpointKey: p.WaitpointKey}
		now := c.nowMs()
		if _, err := c.checkFence(ctx, tx, k, p.Fence, now); err != nil {
			return err
		}
		kid, secret, err := signingKey(ctx, tx, now)
		if err != nil {
			return err
		}
		members := "{}"
		var cond string
		if p.PendingWaitpointID != "" {
			pw, err := activatePending(ctx, tx, k, wp, p.Fence.AttemptIndex, now)
			if err != nil {
				return err
			}
			res.WaitpointKey, res.Token = pw.key, pw.token
			cond = q.ResumeCondition(pw.key)
			var sc suspendCondition
			_ = json.Unmarshal([]byte(cond), &sc)
			for i := range pw.buffered {
				pw.buffered[i].Matched = len(sc.Names) == 0 || slices.Contains(sc.Names, pw.buffered[i].Name)
			}
			if ok, _ := evaluateSignals(sc, pw.buffered); ok {
				res.AlreadySatisfied = true
				_, err := tx.Exec(ctx, `DELETE FROM ff_waitpoint_pending WHERE partition_key = $1 AND waitpoint_id = $2`,
					k.part, [16]byte(wp))
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE ff_waitpoint_pending SET state = 'active', activated_at_ms = $3,
    expires_at_ms = $4, condition = $5::jsonb, required_signal_names = $6
 WHERE partition_key = $1 AND waitpoint_id = $2`, k.part, [16]byte(wp), now, timeout, cond, names); err != nil {
				return err
			}
			if len(pw.buffered) > 0 {
				b, _ := json.Marshal(map[string][]signalRecord{pw.key: pw.buffered})
				members = string(b)
			}
		} else {
			cond = q.ResumeCondition(p.WaitpointKey)
			res.Token = signToken(kid, secret, k.execID(), res.WaitpointID)
			if err := insertActiveWaitpoint(ctx, tx, k, wp, kid, res.Token, now, timeout, cond, p.WaitpointKey, names); err != nil {
				return err
			}
		}
		for _, x := range p.Extra {
			xid, _ := model.ParseUUID(x.WaitpointID) // checked by ValidateWaitpoints
			tok := signToken(kid, secret, k.execID(), xid.String())
			if err := insertActiveWaitpoint(ctx, tx, k, xid, kid, tok, now, timeout, cond, x.WaitpointKey, names); err != nil {
				return err
			}
			res.Extra = append(res.Extra, backend.Waitpoint{ID: xid.String(), Key: x.WaitpointKey, Token: tok})
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ff_suspension_current (partition_key, execution_id, suspension_id, suspended_at_ms,
    timeout_at_ms, reason_code, condition, satisfied_set, member_map, timeout_behavior)
VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, '[]'::jsonb, $9::jsonb, $8)
ON CONFLICT (partition_key, execution_id) DO UPDATE SET suspension_id = EXCLUDED.suspension_id,
    suspended_at_ms = EXCLUDED.suspended_at_ms, timeout_at_ms = EXCLUDED.timeout_at_ms,
    reason_code = EXCLUDED.reason_code, condition = EXCLUDED.condition, satisfied_set = '[]'::jsonb,
    member_map = EXCLUDED.member_map, timeout_behavior = EXCLUDED.timeout_behavior`,
			k.part, [16]byte(k.uuid), [16]byte(susp), now, timeout, reason, cond, behavior, members); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_exec_core
   SET lifecycle_phase = 'suspended', ownership_state = 'released', eligibility_state = 'not_applicable',
       public_state = 'suspended', attempt_state = 'attempt_interrupted', blocking_reason = 'waiting_for_signal',
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text,
           'current_suspension_id', $4::text, 'current_waitpoint_id', $5::text, 'suspension_attempt_index', $6::int::text)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), now, res.SuspensionID, res.WaitpointID,
			p.Fence.AttemptIndex); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE ff_attempt
   SET worker_id = NULL, worker_instance_id = NULL, lease_expires_at_ms = NULL, lease_epoch = lease_epoch + 1,
       outcome = 'attempt_interrupted'
 WHERE partition_key = $1 AND execution_id = $2 AND attempt_index = $3`, k.part, [16]byte(k.uuid), p.Fence.AttemptIndex); err != nil {
			return err
		}
		return emitLeaseEvent(ctx, tx, k, LeaseEventRevoked, "suspend", now)
	})
	if err != nil {
		return nil, fmt.Errorf("suspend %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

// insertActiveWaitpoint inserts one waitpoint of a suspension, active.
func insertActiveWaitpoint(ctx context.Context, tx pgx.Tx, k execKey, wp model.UUID, kid, token string, now int64,
	timeout *int64, cond, key string, names []string) error {
	_, err := tx.Exec(ctx, `INSERT INTO ff_waitpoint_pending (partition_key, waitpoint_id, execution_id, token_kid, token,
    created_at_ms, expires_at_ms, condition, waitpoint_key, state, required_signal_names, activated_at_ms)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, 'active', $10, $6)`,
		k.part, [16]byte(wp), [16]byte(k.uuid), kid, token, now, timeout, cond, key, names)
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: waitpoint %s exists", CodeInvalidInput, wp)
	}
	return err
}

// defaultKid is the kid of the secret fabric seeds into an empty
// ff_waitpoint_hmac (upstream refuses to suspend until an operator seeds
// one).
const defaultKid = "fabric-1"

// signingKey returns the active kid and its secret, seeding a random
// 256-bit one when the keystore is empty (concurrent seeders agree: the
// insert is ON CONFLICT DO NOTHING and the row is read back).
func signingKey(ctx context.Context, tx pgx.Tx, now int64) (string, []byte, error) {
	const active = `SELECT kid, secret FROM ff_waitpoint_hmac WHERE active ORDER BY rotated_at_ms DESC LIMIT 1`
	var kid string
	var secret []byte
	err := tx.QueryRow(ctx, active).Scan(&kid, &secret)
	if !errors.Is(err, pgx.ErrNoRows) {
		return kid, secret, err
	}
	fresh := make([]byte, 32)
	if _, err := rand.Read(fresh); err != nil {
		return "", nil, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO ff_waitpoint_hmac (kid, secret, rotated_at_ms, active) VALUES ($1, $2, $3, true)
ON CONFLICT (kid) DO NOTHING`, defaultKid, fresh, now); err != nil {
		return "", nil, err
	}
	err = tx.QueryRow(ctx, `SELECT kid, secret FROM ff_waitpoint_hmac WHERE kid = $1`, defaultKid).Scan(&kid, &secret)
	return kid, secret, err
}

// signToken is "<kid>:<hex HMAC-SHA256(secret, kid:execution:waitpoint)>".
func signToken(kid string, secret []byte, id model.ExecutionID, waitpoint string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(kid + ":" + string(id) + ":" + waitpoint))
	return kid + ":" + hex.EncodeToString(m.Sum(nil))
}

// verifyToken checks that token is the HMAC its kid's secret gives the
// waitpoint wp of execution id (CodeInvalidToken when not, or when the
// kid is unknown).
func (c *Client) verifyToken(ctx context.Context, tx pgx.Tx, token string, id model.ExecutionID, wp model.UUID) error {
	kid, _, ok := strings.Cut(token, ":")
	if !ok || kid == "" {
		return fmt.Errorf("%w: malformed token", CodeInvalidToken)
	}
	var secret []byte
	err := tx.QueryRow(ctx, `SELECT secret FROM ff_waitpoint_hmac WHERE kid = $1`, kid).Scan(&secret)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: kid %q is not in the keystore", CodeInvalidToken, kid)
	}
	if err != nil {
		return fmt.Errorf("read waitpoint secret: %w", err)
	}
	if !hmac.Equal([]byte(token), []byte(signToken(kid, secret, id, wp.String()))) {
		return CodeInvalidToken
	}
	return nil
}

// DeliverSignalParams are the inputs of DeliverSignal.
type DeliverSignalParams = backend.DeliverSignalParams

// DeliverSignalResult is the outcome of DeliverSignal: Effect is
// resume_condition_satisfied, appended_to_waitpoint (a match that does
// not satisfy the condition yet), signal_ignored_not_in_condition (a
// name the condition does not list; recorded, not counted),
// buffered_for_pending_waitpoint (a pending waitpoint's), and under a
// composite condition signal_ignored_matcher_failed or
// appended_to_waitpoint_duplicate (a waitpoint already counted); on a
// duplicate (a repeated idempotency key) Effect is empty and SignalID is
// the first signal's.
type DeliverSignalResult = backend.DeliverSignalResult

// signalRecord is one signal in ff_suspension_current.member_map[waitpoint
// key] (upstream's shape, payload hex-encoded).
type signalRecord struct {
	SignalID       string  `json:"signal_id"`
	Name           string  `json:"signal_name"`
	Category       string  `json:"signal_category"`
	SourceType     string  `json:"source_type"`
	SourceIdentity string  `json:"source_identity"`
	CorrelationID  string  `json:"correlation_id"`
	AcceptedAt     int64   `json:"accepted_at"`
	PayloadHex     *string `json:"payload_hex"`
	WaitpointID    string  `json:"waitpoint_id"`
	Matched        bool    `json:"matched"`
	IdempotencyKey string  `json:"idempotency_key,omitempty"`
}

// DeliverSignal delivers a signal to a suspended execution's waitpoint,
// authenticated by its token, in one transaction that locks the
// waitpoint, the execution and its suspension. A signal to a pending
// waitpoint of an execution that neither is suspended nor ended is
// buffered in the waitpoint's row instead (bufferSignal). Otherwise the
// condition decides — signal_set on the receiving waitpoint's signals, or
// a composite tree over every waitpoint's (deliverComposite):
//
//	ff_suspension_current.member_map[waitpoint key]: the signal appended (a repeat of
//	  an idempotency key among the waitpoint's signals is a duplicate: nothing written)
//	ff_signal_event: the delivery (NOTIFY ff_signal_event)
//	satisfied: ff_exec_core runnable / eligible_now / resumable (the same attempt,
//	  claimed again as "resumed"); the execution's waitpoints deleted (but the
//	  pending ones, still to be suspended on); the
//	  suspension's timeout cleared and satisfied_set = the satisfying signal ids
//
// A token that does not verify is CodeInvalidToken, checked first (a
// forged token for an unknown waitpoint too, as on Valkey); an unknown
// waitpoint with an authentic token CodeWaitpointNotFound, an execution
// that is not suspended
// CodeExecutionNotSuspended; none of them writes anything. Unlike
// upstream, no 'resumable' completion event is written: fabric's
// CompletionInsert stamps the flow id, and the dependency dispatcher
// would count a resumed flow member as failed.
func (c *Client) DeliverSignal(ctx context.Context, p *DeliverSignalParams) (*DeliverSignalResult, error) {
	k, err := splitExecID(p.ExecutionID)
	if err != nil {
		return nil, fmt.Errorf("deliver signal to %s: %w", p.ExecutionID, err)
	}
	wp, err := model.ParseUUID(p.WaitpointID)
	if err != nil || p.Name == "" || p.SignalID == "" || p.Token == "" {
		return nil, fmt.Errorf("deliver signal to %s: %w: waitpoint id (UUID), signal id, name and token are required",
			p.ExecutionID, CodeInvalidInput)
	}
	res := &DeliverSignalResult{}
	err = c.inTxRetry(ctx, func(tx pgx.Tx) error {
		*res = DeliverSignalResult{SignalID: p.SignalID}
		now := c.nowMs()
		// The execution first, then its waitpoint: the order cancel and
		// suspend lock them in.
		var phase string
		if err := tx.QueryRow(ctx, `SELECT lifecycle_phase FROM ff_exec_core WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`,
			k.part, [16]byte(k.uuid)).Scan(&phase); err != nil {
			if errors.Is(err, pgx.ErrNoRows) {
				return CodeExecutionNotFound
			}
			return err
		}
		// Authenticate before revealing anything about the waitpoint: a
		// token that does not verify is invalid_token whether or not the
		// waitpoint exists (as ff_deliver_signal answers on Valkey).
		if err := c.verifyToken(ctx, tx, p.Token, p.ExecutionID, wp); err != nil {
			return err
		}
		var owner [16]byte
		var token, key, state string
		var wpCond []byte
		err := tx.QueryRow(ctx, `SELECT execution_id, token, waitpoint_key, state, condition
  FROM ff_waitpoint_pending WHERE partition_key = $1 AND waitpoint_id = $2 FOR UPDATE`, k.part, [16]byte(wp)).Scan(
			&owner, &token, &key, &state, &wpCond)
		if errors.Is(err, pgx.ErrNoRows) {
			return CodeWaitpointNotFound
		}
		if err != nil {
			return err
		}
		if owner != [16]byte(k.uuid) || p.Token != token {
			return CodeInvalidToken
		}
		if state == "pending" {
			// Not suspended on yet (upstream: use the buffer script); a
			// suspended or ended execution does not buffer.
			switch phase {
			case model.PhaseSuspended:
				return fmt.Errorf("%w: waitpoint %s is pending", CodeWaitpointNotFound, wp)
			case model.PhaseTerminal, "cancelled":
				return fmt.Errorf("%w: phase %s", CodeExecutionNotSuspended, phase)
			}
			return bufferSignal(ctx, tx, k, wp, wpCond, p, now, res)
		}
		var condRaw, mapRaw []byte
		err = tx.QueryRow(ctx, `SELECT condition, member_map FROM ff_suspension_current
 WHERE partition_key = $1 AND execution_id = $2 FOR UPDATE`, k.part, [16]byte(k.uuid)).Scan(&condRaw, &mapRaw)
		if errors.Is(err, pgx.ErrNoRows) || phase != model.PhaseSuspended || state != "active" {
			return fmt.Errorf("%w: phase %s, waitpoint %s", CodeExecutionNotSuspended, phase, state)
		}
		if err != nil {
			return err
		}
		var cond suspendCondition
		var comp compositeDoc
		if err := json.Unmarshal(condRaw, &cond); err != nil {
			return fmt.Errorf("suspension condition: %w", err)
		}
		if err := json.Unmarshal(condRaw, &comp); err != nil {
			return fmt.Errorf("suspension condition: %w", err)
		}
		members := map[string]json.RawMessage{}
		if err := json.Unmarshal(mapRaw, &members); err != nil {
			return fmt.Errorf("suspension member_map: %w", err)
		}
		bykey := memberSignals(members) // a non-array entry (a pending_wp_expiry mark) starts over
		sigs := bykey[key]
		if p.IdempotencyKey != "" {
			for _, x := range sigs {
				if x.IdempotencyKey == p.IdempotencyKey {
					res.SignalID, res.Duplicate = x.SignalID, true
					return nil
				}
			}
		}
		rec := newSignalRecord(p, wp, now)
		var satisfied bool
		var satisfiers []string
		if comp.Composite {
			res.Effect, satisfied, satisfiers = deliverComposite(&comp.Tree, bykey, key, &rec)
			sigs = append(sigs, rec)
		} else {
			rec.Matched = len(cond.Names) == 0 || slices.Contains(cond.Names, p.Name)
			sigs = append(sigs, rec)
			satisfied, satisfiers = evaluateSignals(cond, sigs)
			res.Effect = "signal_ignored_not_in_condition"
			switch {
			case satisfied:
				res.Effect = backend.EffectResumed
			case rec.Matched:
				res.Effect = backend.EffectAppended
			}
		}
		b, _ := json.Marshal(sigs)
		if _, err := tx.Exec(ctx, `UPDATE ff_suspension_current SET member_map = jsonb_set(member_map, ARRAY[$3::text], $4::jsonb)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), key, string(b)); err != nil {
			return err
		}
		if err := insertSignalEvent(ctx, tx, k, p, wp, now); err != nil {
			return err
		}
		if !satisfied {
			return nil
		}
		ids, _ := json.Marshal(satisfiers)
		if _, err := tx.Exec(ctx, `UPDATE ff_suspension_current SET timeout_at_ms = NULL, satisfied_set = $3::jsonb
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), string(ids)); err != nil {
			return err
		}
		// The suspension's waitpoints close; pending ones the attempt
		// created for a later suspend stay (as on Valkey).
		if _, err := tx.Exec(ctx, `DELETE FROM ff_waitpoint_pending WHERE partition_key = $1 AND execution_id = $2 AND state <> 'pending'`,
			k.part, [16]byte(k.uuid)); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE ff_exec_core
   SET lifecycle_phase = 'runnable', ownership_state = 'unowned', eligibility_state = 'eligible_now',
       public_state = 'resumable', blocking_reason = NULL,
       raw_fields = raw_fields || jsonb_build_object('last_mutation_at', $3::bigint::text)
 WHERE partition_key = $1 AND execution_id = $2`, k.part, [16]byte(k.uuid), now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("deliver signal to %s: %w", p.ExecutionID, err)
	}
	return res, nil
}

// newSignalRecord is the member_map record of signal p delivered to
// waitpoint wp at now (Matched is for the caller to decide).
func newSignalRecord(p *DeliverSignalParams, wp model.UUID, now int64) signalRecord {
	rec := signalRecord{SignalID: p.SignalID, IdempotencyKey: p.IdempotencyKey, Name: p.Name, Category: "external", SourceType: "sdk",
		SourceIdentity: p.Source, AcceptedAt: now, WaitpointID: wp.String()}
	if p.Payload != nil {
		h := hex.EncodeToString(p.Payload)
		rec.PayloadHex = &h
	}
	return rec
}

// insertSignalEvent records the delivery of p to wp in ff_signal_event
// (NOTIFY ff_signal_event).
func insertSignalEvent(ctx context.Context, tx pgx.Tx, k execKey, p *DeliverSignalParams, wp model.UUID, now int64) error {
	_, err := tx.Exec(ctx, `INSERT INTO ff_signal_event (execution_id, signal_id, waitpoint_id, source_identity,
    delivered_at_ms, partition_key, namespace, instance_tag)
SELECT $1::text, $2, $3, $4, $5, $6::int, c.raw_fields->>'namespace', c.raw_fields->'tags'->>'cairn.instance_id'
  FROM ff_exec_core c WHERE c.partition_key = $6::smallint AND c.execution_id = $1::uuid`,
		k.id(), p.SignalID, wp.String(), p.Source, now, k.part)
	return err
}

// evaluateSignals decides a signal_set condition over a waitpoint's
// signals: any (a matched signal) or all (every listed name received);
// it returns the ids of the signals that satisfy it, oldest first.
func evaluateSignals(cond suspendCondition, sigs []signalRecord) (bool, []string) {
	var ids []string
	if cond.Mode != "all" {
		for _, s := range sigs {
			if s.Matched {
				return true, []string{s.SignalID}
			}
		}
		return false, nil
	}
	seen := map[string]bool{}
	for _, s := range sigs {
		if s.Matched && !seen[s.Name] {
			seen[s.Name] = true
			ids = append(ids, s.SignalID)
		}
	}
	for _, n := range cond.Names {
		if !seen[n] {
			return false, nil
		}
	}
	return true, ids
}

// ResumeSignal is a signal that satisfied a suspension, as ResumeSignals
// reads it back.
type ResumeSignal = backend.ResumeSignal

// ResumeSignals returns the signals that satisfied the execution's last
// suspension (its satisfied_set), oldest first, when that suspension was
// of attempt; none when it has no suspension, was not resumed by signals
// or suspended another attempt.
func (c *Client) ResumeSignals(ctx context.Context, id model.ExecutionID, attempt int) ([]ResumeSignal, error) {
	k, err := splitExecID(id)
	if err != nil {
		return nil, fmt.Errorf("resume signals of %s: %w", id, err)
	}
	var satRaw, mapRaw []byte
	err = c.pool.QueryRow(ctx, `SELECT s.satisfied_set, s.member_map FROM ff_suspension_current s
  JOIN ff_exec_core c ON c.partition_key = s.partition_key AND c.execution_id = s.execution_id
 WHERE s.partition_key = $1 AND s.execution_id = $2 AND c.raw_fields->>'suspension_attempt_index' = $3::int::text`,
		k.part, [16]byte(k.uuid), attempt).Scan(&satRaw, &mapRaw)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resume signals of %s: %w", id, notMigrated(err))
	}
	var sat []string
	members := map[string]json.RawMessage{}
	if json.Unmarshal(satRaw, &sat) != nil || json.Unmarshal(mapRaw, &members) != nil || len(sat) == 0 {
		return nil, nil
	}
	byID := map[string]signalRecord{}
	for name, raw := range members {
		if strings.HasPrefix(name, "__") {
			continue
		}
		var sigs []signalRecord
		if json.Unmarshal(raw, &sigs) == nil {
			for _, s := range sigs {
				byID[s.SignalID] = s
			}
		}
	}
	var out []ResumeSignal
	for _, sid := range sat {
		s, ok := byID[sid]
		if !ok {
			continue
		}
		r := ResumeSignal{ID: s.SignalID, WaitpointID: s.WaitpointID, Name: s.Name, Category: s.Category,
			SourceType: s.SourceType, SourceIdentity: s.SourceIdentity, CorrelationID: s.CorrelationID, AcceptedAt: s.AcceptedAt}
		if s.PayloadHex != nil {
			r.Payload, _ = hex.DecodeString(*s.PayloadHex)
		}
		out = append(out, r)
	}
	return out, nil
}

// SuspendExecution implements backend.ControlDriver.
func (d *Driver) SuspendExecution(ctx context.Context, p *backend.SuspendExecutionParams) (*backend.SuspendExecutionResult, error) {
	r, err := d.c.SuspendExecution(ctx, p)
	return r, mapControlErr(err, true)
}

// DeliverSignal implements backend.ControlDriver.
func (d *Driver) DeliverSignal(ctx context.Context, p *backend.DeliverSignalParams) (*backend.DeliverSignalResult, error) {
	r, err := d.c.DeliverSignal(ctx, p)
	return r, mapControlErr(err, false)
}
