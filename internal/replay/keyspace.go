package replay

import (
	"context"
	"fmt"
	"sort"
	"strconv"

	vk "github.com/valkey-io/valkey-go"
)

// Snapshot lists every key of the server's current database as sorted
// text lines, one per string, hash field, set or sorted-set member, list
// element and stream entry field: "KEY hash FIELD=VALUE",
// "KEY zset MEMBER SCORE", and so on. Stream entries are numbered by
// their order (#0, #1, ...) instead of their ids, which the server
// assigns from its own clock; a key with a time to live has a "KEY ttl"
// line (its remaining time runs with the real clock, so it is left out).
func Snapshot(ctx context.Context, c vk.Client) ([]string, error) {
	var keys []string
	cursor := uint64(0)
	for {
		e, err := c.Do(ctx, c.B().Scan().Cursor(cursor).Count(1000).Build()).AsScanEntry()
		if err != nil {
			return nil, fmt.Errorf("replay: scan: %w", err)
		}
		keys = append(keys, e.Elements...)
		if cursor = e.Cursor; cursor == 0 {
			break
		}
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		lines, err := keyLines(ctx, c, k)
		if err != nil {
			return nil, err
		}
		out = append(out, lines...)
	}
	sort.Strings(out)
	return out, nil
}

func keyLines(ctx context.Context, c vk.Client, k string) ([]string, error) {
	typ, err := c.Do(ctx, c.B().Type().Key(k).Build()).ToString()
	if err != nil {
		return nil, fmt.Errorf("replay: type %s: %w", k, err)
	}
	q := strconv.Quote(k)
	var out []string
	add := func(format string, a ...any) { out = append(out, q+" "+fmt.Sprintf(format, a...)) }
	switch typ {
	case "none":
		return nil, nil // expired or removed meanwhile
	case "string":
		v, err := c.Do(ctx, c.B().Get().Key(k).Build()).ToString()
		if err != nil && !vk.IsValkeyNil(err) {
			return nil, fmt.Errorf("replay: get %s: %w", k, err)
		}
		add("string %q", v)
	case "hash":
		m, err := c.Do(ctx, c.B().Hgetall().Key(k).Build()).AsStrMap()
		if err != nil {
			return nil, fmt.Errorf("replay: hgetall %s: %w", k, err)
		}
		for f, v := range m {
			add("hash %q=%q", f, v)
		}
	case "set":
		ms, err := c.Do(ctx, c.B().Smembers().Key(k).Build()).AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("replay: smembers %s: %w", k, err)
		}
		for _, m := range ms {
			add("set %q", m)
		}
	case "zset":
		zs, err := c.Do(ctx, c.B().Zrange().Key(k).Min("0").Max("-1").Withscores().Build()).AsZScores()
		if err != nil {
			return nil, fmt.Errorf("replay: zrange %s: %w", k, err)
		}
		for _, z := range zs {
			add("zset %q %s", z.Member, strconv.FormatFloat(z.Score, 'f', -1, 64))
		}
	case "list":
		vs, err := c.Do(ctx, c.B().Lrange().Key(k).Start(0).Stop(-1).Build()).AsStrSlice()
		if err != nil {
			return nil, fmt.Errorf("replay: lrange %s: %w", k, err)
		}
		for i, v := range vs {
			add("list[%06d] %q", i, v)
		}
	case "stream":
		es, err := c.Do(ctx, c.B().Xrange().Key(k).Start("-").End("+").Build()).AsXRange()
		if err != nil {
			return nil, fmt.Errorf("replay: xrange %s: %w", k, err)
		}
		for i, e := range es {
			for f, v := range e.FieldValues {
				add("stream #%06d %q=%q", i, f, v)
			}
		}
	default:
		add("%s (not rendered)", typ)
	}
	ttl, err := c.Do(ctx, c.B().Pttl().Key(k).Build()).AsInt64()
	if err == nil && ttl >= 0 {
		add("ttl")
	}
	return out, nil
}

// Diff compares two sorted snapshots: "- LINE" for a line only in before,
// "+ LINE" for one only in after, in order.
func Diff(before, after []string) []string {
	var out []string
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j >= len(after) || (i < len(before) && before[i] < after[j]):
			out = append(out, "- "+before[i])
			i++
		case i >= len(before) || after[j] < before[i]:
			out = append(out, "+ "+after[j])
			j++
		default:
			i++
			j++
		}
	}
	return out
}
