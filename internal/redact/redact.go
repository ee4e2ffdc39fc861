// Package redact removes secrets from backend URLs, DSNs and the errors
// that quote them, before anything is printed, logged or served: a
// Valkey/Redis URL (redis://, rediss://, valkey://, valkeys://, the
// +cluster forms, unix://) or a Postgres URL or key=value DSN keeps its
// scheme, user, hosts, path and harmless parameters; its password becomes
// Mask.
package redact

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces every password.
const Mask = "xxxxx"

// secretParams are the query or DSN parameters whose values are secrets
// (lower case).
var secretParams = map[string]bool{
	"password":    true,
	"pass":        true,
	"passwd":      true,
	"sslpassword": true,
}

// dsnSecret matches a secret key=value pair of a libpq DSN; the value is
// a single-quoted string (with \' escapes) or a run of non-spaces.
var dsnSecret = regexp.MustCompile(`(?i)\b(password|passwd|sslpassword)(\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)`)

// URL returns s with its password replaced by Mask: the password of a
// URL's userinfo (scheme://user:password@host...) and the value of a
// password, pass, passwd or sslpassword parameter in its query or in a
// key=value DSN. The user is kept. A string without a secret comes back
// unchanged.
func URL(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || strings.ContainsAny(scheme, " =") {
		return dsnSecret.ReplaceAllString(s, "${1}${2}"+Mask)
	}
	pre, query, hasQuery := strings.Cut(rest, "?")
	at := strings.LastIndex(pre, "@")
	if at < 0 {
		// A password holding an unescaped '?' puts the '@' past the cut:
		// hide everything up to the last '@' rather than show part of it.
		at = strings.LastIndex(rest, "@")
		if at >= 0 {
			pre, query, hasQuery = rest, "", false
		}
	}
	if at >= 0 {
		user, _, hasPass := strings.Cut(pre[:at], ":")
		if hasPass {
			pre = user + ":" + Mask + pre[at:]
		}
	}
	out := scheme + "://" + pre
	if hasQuery {
		out += "?" + redactQuery(query)
	}
	return out
}

// redactQuery masks the secret parameters of a query string, leaving the
// rest of it byte for byte.
func redactQuery(q string) string {
	q, frag, hasFrag := strings.Cut(q, "#")
	parts := strings.Split(q, "&")
	for i, p := range parts {
		k, _, hasVal := strings.Cut(p, "=")
		if hasVal && secretParams[strings.ToLower(k)] {
			parts[i] = k + "=" + Mask
		}
	}
	out := strings.Join(parts, "&")
	if hasFrag {
		out += "#" + frag
	}
	return out
}

// Secrets returns the passwords s carries (see URL), for scrubbing text
// that may quote them in other forms, e.g. a driver's error message.
func Secrets(s string) []string {
	var out []string
	add := func(v string) {
		if v != "" && v != Mask && !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || strings.ContainsAny(scheme, " =") {
		for _, m := range dsnSecret.FindAllStringSubmatch(s, -1) {
			v := m[3]
			if strings.HasPrefix(v, "'") && strings.HasSuffix(v, "'") && len(v) >= 2 {
				v = strings.ReplaceAll(v[1:len(v)-1], `\'`, `'`)
			}
			add(v)
		}
		return out
	}
	pre, query, _ := strings.Cut(rest, "?")
	at := strings.LastIndex(pre, "@")
	if at < 0 {
		at = strings.LastIndex(rest, "@")
		pre = rest
	}
	if at >= 0 {
		if _, pw, hasPass := strings.Cut(pre[:at], ":"); hasPass {
			add(pw)
			add(unescape(pw))
		}
	}
	for _, p := range strings.Split(query, "&") {
		k, v, hasVal := strings.Cut(p, "=")
		if hasVal && secretParams[strings.ToLower(k)] {
			add(v)
			add(unescape(v))
		}
	}
	return out
}

// unescape undoes URL percent-encoding, or returns s when it has none or
// is malformed.
func unescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			h, ok1 := hexVal(s[i+1])
			l, ok2 := hexVal(s[i+2])
			if ok1 && ok2 {
				b.WriteByte(h<<4 | l)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func hexVal(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Text returns s with every occurrence of each secret replaced by Mask.
func Text(s string, secrets ...string) string {
	for _, sec := range secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, Mask)
		}
	}
	return s
}

// Error returns err with every secret in its message replaced by Mask,
// or err itself when its message holds none. The result unwraps to err,
// so errors.Is and errors.As still see the cause; only its text changes.
func Error(err error, secrets ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if red := Text(msg, secrets...); red != msg {
		return &redacted{msg: red, err: err}
	}
	return err
}

// redacted is an error whose text had secrets removed.
type redacted struct {
	msg string
	err error
}

func (r *redacted) Error() string { return r.msg }
func (r *redacted) Unwrap() error { return r.err }

// Handler wraps an slog.Handler so that no record it passes on holds one
// of the secrets: the message, every attribute value (groups included)
// and any error's text are scrubbed with Text. It is the last line of
// defence behind redacted URLs and errors: a secret that reached a log
// call by some other path still does not reach the log.
func Handler(h slog.Handler, secrets ...string) slog.Handler {
	var keep []string
	for _, s := range secrets {
		if s != "" {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		return h
	}
	return &handler{h: h, secrets: keep}
}

type handler struct {
	h       slog.Handler
	secrets []string
}

func (r *handler) Enabled(ctx context.Context, l slog.Level) bool { return r.h.Enabled(ctx, l) }

func (r *handler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, Text(rec.Message, r.secrets...), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

func (r *handler) WithAttrs(as []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(as))
	for i, a := range as {
		clean[i] = r.attr(a)
	}
	return &handler{h: r.h.WithAttrs(clean), secrets: r.secrets}
}

func (r *handler) WithGroup(name string) slog.Handler {
	return &handler{h: r.h.WithGroup(name), secrets: r.secrets}
}

// attr scrubs one attribute; values that are not strings are scrubbed
// as the text they would print as.
func (r *handler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, Text(v.String(), r.secrets...))
	case slog.KindGroup:
		g := v.Group()
		clean := make([]any, len(g))
		for i, ga := range g {
			clean[i] = r.attr(ga)
		}
		return slog.Group(a.Key, clean...)
	case slog.KindAny:
		s := fmt.Sprint(v.Any())
		if red := Text(s, r.secrets...); red != s {
			return slog.String(a.Key, red)
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
