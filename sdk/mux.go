package sdk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"time"
)

// Middleware wraps a Handler: it may act before and after the call, change
// the context, or turn the result into another one. Middlewares compose in
// the order they are added to a Mux: the first added is the outermost.
type Middleware func(next Handler) Handler

// ErrUnknownKind is wrapped by the (permanent) error a Mux returns for a
// job whose kind has no handler: retrying cannot help, so the execution
// fails terminally and its failure reason names the kind.
var ErrUnknownKind = errors.New("sdk: no handler for execution kind")

// Mux routes jobs to handlers by execution kind (ExecutionSpec.Kind), the
// way an HTTP mux routes requests by path, and wraps every call in its
// middlewares. Pass its ServeJob method to Worker.Run:
//
//	mux := sdk.NewMux()
//	mux.Use(sdk.Recover(logger), sdk.Logging(logger))
//	mux.Handle("email.send", sendEmail)
//	sdk.HandleJSON(mux, "invoice.render", func(ctx context.Context, job *sdk.Job, a InvoiceArgs) error { ... })
//	err := worker.Run(ctx, mux.ServeJob)
//
// A job whose kind has no handler fails permanently with an error wrapping
// ErrUnknownKind (middlewares still see it). A Mux is safe for concurrent
// use; handlers and middlewares added while it serves apply to the next
// job.
type Mux struct {
	mu       sync.RWMutex
	handlers map[string]Handler
	mw       []Middleware
	chains   map[string]Handler // kind → handler wrapped in mw; rebuilt on change
	fallback Handler
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{handlers: map[string]Handler{}} }

// Handle registers h for kind.
//
// # Notes
//
//   - Panics on an empty kind, a nil handler or a kind registered twice:
//     all three are wiring mistakes, as with http.ServeMux.
func (m *Mux) Handle(kind string, h Handler) {
	if kind == "" {
		panic("sdk: Mux.Handle: empty kind")
	}
	if h == nil {
		panic("sdk: Mux.Handle: nil handler for kind " + kind)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.handlers[kind]; dup {
		panic("sdk: Mux.Handle: kind " + kind + " registered twice")
	}
	m.handlers[kind] = h
	m.chains = nil
}

// Fallback sets the handler of kinds nothing else handles (instead of the
// permanent ErrUnknownKind failure).
func (m *Mux) Fallback(h Handler) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fallback = h
	m.chains = nil
}

// Use appends middlewares; they wrap every handler, including the
// unknown-kind failure and the fallback.
func (m *Mux) Use(mw ...Middleware) {
	for _, x := range mw {
		if x == nil {
			panic("sdk: Mux.Use: nil middleware")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mw = append(m.mw, mw...)
	m.chains = nil
}

// Kinds returns the registered kinds, sorted.
func (m *Mux) Kinds() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.handlers))
	for k := range m.handlers {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// ServeJob runs the handler of job.Kind through the middlewares; it is a
// Handler, for Worker.Run.
func (m *Mux) ServeJob(ctx context.Context, job *Job) error {
	return m.chain(job.Kind)(ctx, job)
}

func unknownKind(_ context.Context, job *Job) error {
	return Permanent(fmt.Errorf("%w %q (execution %s)", ErrUnknownKind, job.Kind, job.ID))
}

// chain returns kind's handler wrapped in the middlewares, cached per kind
// until the next Handle, Use or Fallback.
func (m *Mux) chain(kind string) Handler {
	m.mu.RLock()
	h, ok := m.chains[kind]
	m.mu.RUnlock()
	if ok {
		return h
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.chains[kind]; ok {
		return h
	}
	h, ok = m.handlers[kind]
	if !ok {
		h = m.fallback
		if h == nil {
			h = unknownKind
		}
	}
	for i := len(m.mw) - 1; i >= 0; i-- {
		h = m.mw[i](h)
	}
	if m.chains == nil {
		m.chains = map[string]Handler{}
	}
	if len(m.chains) < 4096 { // unknown kinds must not grow it without bound
		m.chains[kind] = h
	}
	return h
}

// HandleJSON registers a typed handler for kind: the job's payload is
// decoded from JSON into A before fn runs. A payload that does not decode
// fails the execution permanently (retrying the same bytes cannot
// succeed). Produce such jobs with EnqueueJSON.
func HandleJSON[A any](m *Mux, kind string, fn func(ctx context.Context, job *Job, args A) error) {
	if fn == nil {
		panic("sdk: HandleJSON: nil handler for kind " + kind)
	}
	m.Handle(kind, func(ctx context.Context, job *Job) error {
		var args A
		if err := json.Unmarshal(job.Payload, &args); err != nil {
			return Permanent(fmt.Errorf("sdk: decode %s arguments of %s: %w", kind, job.ID, err))
		}
		return fn(ctx, job, args)
	})
}

// HandleArgs registers a typed handler for the kind A names (HandleJSON
// with the kind taken from A's zero value's Kind). Produce such jobs with
// EnqueueArgs.
func HandleArgs[A Args](m *Mux, fn func(ctx context.Context, job *Job, args A) error) {
	var zero A
	HandleJSON(m, zero.Kind(), fn)
}

// Recover turns a handler panic into an ordinary error (the attempt fails
// and is retried as the execution's policy says) and logs the panic with
// its stack. Worker.Run recovers panics too; Recover makes the panic an
// error that the middlewares outside it (Logging, Observe) see. A nil
// logger means slog.Default().
func Recover(logger *slog.Logger) Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	return func(next Handler) Handler {
		return func(ctx context.Context, job *Job) (err error) {
			defer func() {
				if r := recover(); r != nil {
					logger.Error("handler panicked", "execution_id", job.ID, "kind", job.Kind,
						"panic", r, "stack", string(debug.Stack()))
					err = fmt.Errorf("handler panic: %v", r)
				}
			}()
			return next(ctx, job)
		}
	}
}

// Logging logs every job at its end: kind, execution id, attempt, how long
// the handler ran and its outcome (at Info on success, Warn on an error).
// Payloads are never logged. A nil logger means slog.Default().
func Logging(logger *slog.Logger) Middleware {
	if logger == nil {
		logger = slog.Default()
	}
	return Observe(func(ctx context.Context, job *Job, err error, took time.Duration) {
		attrs := []any{"kind", job.Kind, "execution_id", job.ID, "lane", job.Lane,
			"attempt", job.Attempt, "attempt_type", job.AttemptType, "duration", took, "outcome", Outcome(err)}
		if err != nil {
			logger.WarnContext(ctx, "job ended", append(attrs, "error", err)...)
			return
		}
		logger.InfoContext(ctx, "job ended", attrs...)
	})
}

// Observe calls done after every handler call with its error and
// duration: the hook for metrics and tracing (start a span in a
// middleware of your own, or count outcomes here).
func Observe(done func(ctx context.Context, job *Job, err error, took time.Duration)) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, job *Job) error {
			start := time.Now()
			err := next(ctx, job)
			done(ctx, job, err, time.Since(start))
			return err
		}
	}
}

// Timeout bounds each handler call to d: the handler's context ends with
// context.DeadlineExceeded after d (a handler that ignores its context is
// not stopped). The returned error is the handler's.
func Timeout(d time.Duration) Middleware {
	return func(next Handler) Handler {
		return func(ctx context.Context, job *Job) error {
			ctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			return next(ctx, job)
		}
	}
}

// Outcome names what a handler result makes of the attempt: "complete",
// "error" (an ordinary error: the attempt fails and is retried if the
// policy allows), "fail" (a Permanent error: no retry), "delay" (DelayFor
// / DelayUntil).
func Outcome(err error) string {
	var pe *permanentError
	var de *DelayError
	var df *delayFor
	switch {
	case err == nil:
		return "complete"
	case errors.As(err, &de), errors.As(err, &df):
		return "delay"
	case errors.As(err, &pe):
		return "fail"
	default:
		return "error"
	}
}
