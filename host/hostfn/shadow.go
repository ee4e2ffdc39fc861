package hostfn

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/fabric-host/fabric/abi"
)

// Action is one write a plugin made or, in a shadow run, meant to make:
// a mutating FCALL, a write op or a writing SQL statement, its arguments
// normalised (NormalizeArg) so that two versions reading the same state
// a few milliseconds apart name the same action.
type Action struct {
	// Kind is "fcall", "write" or "sql".
	Kind string `json:"kind"`
	// Name is the function, write op or statement.
	Name string `json:"name"`
	// Subject is the execution id the call names (its keys' execution,
	// else its first key; a statement's first parameter).
	Subject string `json:"subject"`
	// Args are the call's keys and arguments, normalised.
	Args string `json:"args"`
}

// String renders the action on one line: "fcall ff_promote_delayed
// {fp:3}:… keys=[…] args=[…]".
func (a Action) String() string { return a.Kind + " " + a.Name + " " + a.Subject + " " + a.Args }

// ActionLog collects the actions of one plugin call. With DryRun set
// (a shadow run) the host functions record the writes and answer them
// with StatusDryRun or CodeDryRun instead of sending them; reads go to
// the backend. Without it they record the writes they send. Safe for
// concurrent use.
type ActionLog struct {
	// DryRun: record, never send.
	DryRun bool

	mu      sync.Mutex
	actions []Action
}

func (l *ActionLog) add(a Action) {
	l.mu.Lock()
	l.actions = append(l.actions, a)
	l.mu.Unlock()
}

// Actions returns the actions recorded, sorted (the order a plugin meets
// a set's members is the server's, not the plugin's).
func (l *ActionLog) Actions() []Action {
	l.mu.Lock()
	out := append([]Action(nil), l.actions...)
	l.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

// NormalizeArg stands in for an argument that is a server time in
// milliseconds (13 digits): "<ms>". Two versions read the clock at
// different moments; the time they pass is not what they decided.
func NormalizeArg(s string) string {
	if len(s) == 13 && s[0] != '0' {
		if _, err := strconv.ParseInt(s, 10, 64); err == nil {
			return "<ms>"
		}
	}
	return s
}

func normalized(keys, args []string) string {
	var b strings.Builder
	b.WriteString("keys=[")
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(k))
	}
	b.WriteString("] args=[")
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(NormalizeArg(a)))
	}
	b.WriteByte(']')
	return b.String()
}

// subjectOf is the execution a call's keys name ("{fp:N}:<uuid>" from
// ff:exec:{fp:N}:<uuid>:core and the like), else its first key.
func subjectOf(keys []string) string {
	for _, k := range keys {
		if tag := abi.HashTag(k); tag != "" {
			i := strings.LastIndex(k, tag) // ff:exec:{fp:N}:{fp:N}:<uuid>:core
			rest := k[i+len(tag):]
			if strings.HasPrefix(rest, ":") && len(rest) >= 37 && rest[9] == '-' && rest[14] == '-' {
				return tag + rest[:37]
			}
		}
	}
	if len(keys) > 0 {
		return keys[0]
	}
	return ""
}

func fcallAction(call abi.Call) Action {
	return Action{Kind: "fcall", Name: call.Function, Subject: subjectOf(call.Keys), Args: normalized(call.Keys, call.Args)}
}

func writeAction(req *abi.CommandRequest) Action {
	return Action{Kind: "write", Name: req.Op, Subject: subjectOf([]string{req.Key}), Args: normalized([]string{req.Key}, req.Args)}
}

// sqlWrites reports whether a statement text may write: anything but a
// SELECT (or WITH ... SELECT) without a data-modifying part or a
// sequence or session-lock call. A row lock (FOR UPDATE, FOR SHARE) is
// not a write: a shadow's transaction is rolled back when its call ends.
func sqlWrites(text string) bool {
	t := strings.ToUpper(strings.TrimSpace(text))
	if !strings.HasPrefix(t, "SELECT") && !strings.HasPrefix(t, "WITH") {
		return true
	}
	t = sqlRowLock.ReplaceAllString(t, " ")
	return sqlModifies.MatchString(t)
}

var (
	sqlRowLock  = regexp.MustCompile(`\bFOR\s+(NO\s+KEY\s+UPDATE|UPDATE|KEY\s+SHARE|SHARE)\b`)
	sqlModifies = regexp.MustCompile(`\b(INSERT|UPDATE|DELETE|MERGE|TRUNCATE|NEXTVAL|SETVAL|PG_ADVISORY_LOCK|PG_NOTIFY)\b`)
)

// dryRun reports whether c's call runs as a shadow.
func (c *Caller) dryRun() bool { return c.Actions != nil && c.Actions.DryRun }

// ReadOnlyTracker lets a shadow consult the live plugin's failure
// tracker (an item the live version skips, the candidate skips too)
// without recording outcomes in it.
type ReadOnlyTracker struct{ T Tracker }

// ShouldSkip implements Tracker.
func (r ReadOnlyTracker) ShouldSkip(item string) bool { return r.T != nil && r.T.ShouldSkip(item) }

// RecordSuccess implements Tracker; it records nothing.
func (ReadOnlyTracker) RecordSuccess(string) {}

// RecordFailure implements Tracker; it records nothing.
func (ReadOnlyTracker) RecordFailure(string) {}

// recordSQL records the writing statements of r; in a shadow run a batch
// with one is not sent and answered CodeDryRun (its reads with it: a
// batch runs as one unit).
func recordSQL(c *Caller, r *sqlRequest) error {
	n := 0
	for i, def := range r.stmts {
		if !sqlWrites(def.SQL) {
			continue
		}
		n++
		st := r.req.Statements[i]
		params := make([]string, len(st.Params))
		for j, v := range st.Params {
			params[j] = fmt.Sprint(v)
		}
		subject := ""
		if len(params) > 0 {
			subject = params[0]
		}
		c.Actions.add(Action{Kind: "sql", Name: st.Name, Subject: subject, Args: normalized(nil, params)})
	}
	if n > 0 && c.dryRun() {
		return abi.Errorf(abi.CodeDryRun, fmt.Sprintf("sql batch with %d writing statements recorded by a shadow run, not sent", n))
	}
	return nil
}
