package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/fabric-host/fabric/model"
)

// DefaultLane is the lane Enqueue and EnqueueJSON use without WithLane.
const DefaultLane = "default"

// IdempotencyKeyMaxBytes bounds an idempotency key.
const IdempotencyKeyMaxBytes = 512

// EnqueueOption sets one field of the execution Enqueue creates. An
// option given a bad value makes Enqueue fail with an error wrapping
// ErrInvalidInput before any network call; so does a combination the
// spec refuses (see ExecutionSpec).
type EnqueueOption func(*ExecutionSpec) error

// WithLane sets the lane (DefaultLane otherwise).
func WithLane(lane string) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if err := ValidateLane(lane); err != nil {
			return err
		}
		s.Lane = lane
		return nil
	}
}

// WithNamespace overrides the client's namespace.
func WithNamespace(ns string) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if ns == "" {
			return invalid("namespace", "must not be empty")
		}
		s.Namespace = ns
		return nil
	}
}

// WithPriority sets the claim priority, 0..MaxPriority (higher first).
func WithPriority(p int) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if p < 0 || p > MaxPriority {
			return invalid("priority", "%d is out of range 0..%d", p, MaxPriority)
		}
		s.Priority = p
		return nil
	}
}

// WithDelay postpones the first claim by d (> 0).
func WithDelay(d time.Duration) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if d <= 0 {
			return invalid("delay", "must be positive (got %s)", d)
		}
		s.Delay = d
		return nil
	}
}

// WithRunAt postpones the first claim until t; a t already past means
// now.
func WithRunAt(t time.Time) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if t.IsZero() {
			return invalid("run_at", "must not be the zero time")
		}
		s.RunAt = t
		return nil
	}
}

// WithIdempotencyKey makes the enqueue unique for 24 h: enqueueing again
// with the same key (in the same namespace and lane partition) returns the
// first execution's id and creates nothing.
func WithIdempotencyKey(key string) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if key == "" {
			return invalid("idempotency_key", "must not be empty")
		}
		s.IdempotencyKey = key
		return nil
	}
}

// WithCapabilities requires a claiming worker to advertise every one of
// caps.
func WithCapabilities(caps ...string) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if len(caps) == 0 {
			return invalid("capabilities", "at least one capability is required")
		}
		if err := validateCapabilities("capabilities", caps); err != nil {
			return err
		}
		p := s.policy()
		p.RequiredCapabilities = append(p.RequiredCapabilities, caps...)
		return nil
	}
}

// WithAttemptTimeout bounds each attempt to d (at least 1ms); the
// attempt-timeout scanner enforces it.
func WithAttemptTimeout(d time.Duration) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if d < time.Millisecond {
			return invalid("attempt_timeout", "must be at least 1ms (got %s)", d)
		}
		s.policy().AttemptTimeout = d
		return nil
	}
}

// WithDeadline fails the execution if it has not ended by t.
func WithDeadline(t time.Time) EnqueueOption {
	return func(s *ExecutionSpec) error {
		if t.IsZero() {
			return invalid("deadline", "must not be the zero time")
		}
		s.policy().Deadline = t
		return nil
	}
}

// WithRetry allows up to maxRetries retries after failed attempts, spaced
// by backoff (the zero Backoff is the library's 1 s).
func WithRetry(maxRetries int, backoff Backoff) EnqueueOption {
	return func(s *ExecutionSpec) error {
		p := s.policy()
		p.MaxRetries, p.Backoff = maxRetries, backoff
		return p.validate()
	}
}

// WithTags adds tags (stored in the execution's tags hash).
func WithTags(tags map[string]string) EnqueueOption {
	return func(s *ExecutionSpec) error {
		for k := range tags {
			if k == "" {
				return invalid("tags", "tag keys must not be empty")
			}
		}
		if s.Tags == nil {
			s.Tags = make(map[string]string, len(tags))
		}
		maps.Copy(s.Tags, tags)
		return nil
	}
}

// WithTag adds one tag.
func WithTag(key, value string) EnqueueOption {
	return WithTags(map[string]string{key: value})
}

func (s *ExecutionSpec) policy() *Policy {
	if s.Policy == nil {
		s.Policy = &Policy{}
	}
	return s.Policy
}

// BuildSpec applies opts to a spec of kind and payload on DefaultLane and
// validates it, without any network call: the spec Enqueue would create.
// Every option error is reported (joined), each wrapping ErrInvalidInput.
func BuildSpec(kind string, payload []byte, opts ...EnqueueOption) (ExecutionSpec, error) {
	spec := ExecutionSpec{Lane: DefaultLane, Kind: kind, Payload: payload}
	var errs []error
	if kind == "" {
		errs = append(errs, invalid("kind", "must not be empty"))
	}
	for _, o := range opts {
		if o == nil {
			errs = append(errs, invalid("option", "nil EnqueueOption"))
			continue
		}
		if err := o(&spec); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		if err := spec.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return spec, errors.Join(errs...)
}

// Enqueue creates an execution of kind with payload, shaped by opts (lane
// DefaultLane unless WithLane). Options are validated first: an invalid
// one returns an error wrapping ErrInvalidInput and nothing is sent.
func (c *Client) Enqueue(ctx context.Context, kind string, payload []byte, opts ...EnqueueOption) (model.ExecutionID, error) {
	spec, err := BuildSpec(kind, payload, opts...)
	if err != nil {
		return "", err
	}
	return c.CreateExecution(ctx, spec)
}

// EnqueueJSON enqueues kind with args encoded as JSON, for a handler
// registered with HandleJSON[A]. Arguments that do not encode are invalid
// input (nothing is sent).
func EnqueueJSON[A any](ctx context.Context, c *Client, kind string, args A, opts ...EnqueueOption) (model.ExecutionID, error) {
	b, err := json.Marshal(args)
	if err != nil {
		return "", invalid("args", "encode %s arguments as JSON: %v", kind, err)
	}
	return c.Enqueue(ctx, kind, b, opts...)
}

// Args is a job's argument type that names its own kind, as River's
// JobArgs does, so that the producer and the handler cannot disagree on
// it: EnqueueArgs and HandleArgs take the kind from the type. Kind is
// called on the type's zero value, so it must not depend on the value
// (define it on the value type, not on a pointer).
type Args interface {
	Kind() string
}

// EnqueueArgs enqueues args.Kind() with args encoded as JSON, for a
// handler registered with HandleArgs[A] (EnqueueJSON with the kind taken
// from the type).
func EnqueueArgs[A Args](ctx context.Context, c *Client, args A, opts ...EnqueueOption) (model.ExecutionID, error) {
	return EnqueueJSON(ctx, c, args.Kind(), args, opts...)
}
