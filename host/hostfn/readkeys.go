package hostfn

import (
	"fmt"
	"path"
	"strings"

	"github.com/fabric-host/fabric/abi"
)

// This file names every key a read-batch command touches, for authorize:
// the key of each op, every further key of a multi-key command (EXISTS
// k1 k2 ...), and the keys the BY and GET patterns of a SORT_RO expand
// to. A command whose arguments the host cannot account for is refused
// before anything is sent.

// keyPattern is a SORT_RO BY or GET pattern as Valkey expands it
// (lookupKeyByPattern in sort.c): the first '*' is replaced by each
// element sorted, so the keys it reads are Prefix + element + Suffix,
// element being any string the sorted key holds. A "->field" after the
// '*' names a hash field and is not part of the key; any later '*' is a
// literal character.
type keyPattern struct {
	Prefix, Suffix string
}

// String is the pattern as a glob ("prefix*suffix"), for messages.
func (p keyPattern) String() string { return p.Prefix + "*" + p.Suffix }

// batchReadArity is how many arguments each read-batch command takes
// after its key (min, max; -1: any), none of them a key except for
// EXISTS, whose arguments are all keys, and SORT_RO, parsed by
// sortROPatterns.
var batchReadArity = map[string][2]int{
	"GET": {0, 0}, "HGET": {1, 1}, "HMGET": {1, -1}, "HGETALL": {0, 0}, "EXISTS": {0, -1},
	"ZSCORE": {1, 1}, "ZCARD": {0, 0}, "ZCOUNT": {2, 2}, "SCARD": {0, 0}, "SISMEMBER": {1, 1},
	"SMEMBERS": {0, 0}, "ZRANGE": {2, -1}, "SORT_RO": {0, -1},
}

// readOpSubjects returns the keys op reads (its own first) and the key
// patterns it expands, or why the host will not send it: a command not
// in abi.BatchReadCommands, an arity the command does not take, or a
// SORT_RO the host cannot parse or whose pattern is not provably on the
// key's hash tag.
func readOpSubjects(o abi.ReadOp) (keys []string, patterns []keyPattern, err error) {
	arity, ok := batchReadArity[o.Cmd]
	if !ok || !abi.ValidBatchReadCommand(o.Cmd) {
		return nil, nil, fmt.Errorf("read: command %q is not one of %v", o.Cmd, abi.BatchReadCommands)
	}
	if n := len(o.Args); n < arity[0] || (arity[1] >= 0 && n > arity[1]) {
		return nil, nil, fmt.Errorf("read: %s %q: %d arguments after the key", o.Cmd, o.Key, n)
	}
	keys = []string{o.Key}
	switch o.Cmd {
	case "EXISTS":
		keys = append(keys, o.Args...) // EXISTS key [key ...]: every one is read
	case "SORT_RO":
		patterns, err = sortROPatterns(o.Args)
		if err != nil {
			return nil, nil, fmt.Errorf("read: SORT_RO %q: %w", o.Key, err)
		}
		tag := abi.HashTag(o.Key)
		for _, p := range patterns {
			// The tag must be closed before the '*': a tag the element
			// could open or close is no tag the host can check (nor one
			// Valkey Cluster accepts).
			if t := abi.HashTag(p.Prefix); t == "" || t != tag {
				return nil, nil, fmt.Errorf("read: SORT_RO pattern %q is not on the hash tag of %q (its tag must close before the '*')", p, o.Key)
			}
		}
	}
	return keys, patterns, nil
}

// sortROPatterns parses the options of SORT_RO key as Valkey does
// (sortCommandGeneric, read-only: no STORE) and returns the patterns
// that read keys: BY and GET patterns holding a '*'. GET # (the element
// itself), and BY or GET patterns without '*' (no sort; a nil reply) read
// nothing. Anything Valkey would answer with a syntax error is refused
// here, so that what is checked is what runs.
func sortROPatterns(args []string) ([]keyPattern, error) {
	var out []keyPattern
	for j := 0; j < len(args); j++ {
		left := len(args) - j - 1
		switch opt := args[j]; {
		case strings.EqualFold(opt, "ASC"), strings.EqualFold(opt, "DESC"), strings.EqualFold(opt, "ALPHA"):
		case strings.EqualFold(opt, "LIMIT") && left >= 2:
			j += 2
		case (strings.EqualFold(opt, "BY") || strings.EqualFold(opt, "GET")) && left >= 1:
			j++
			if p, ok := expandPattern(args[j]); ok {
				out = append(out, p)
			}
		default:
			return nil, fmt.Errorf("option %q at argument %d is not one the host accepts (ASC, DESC, ALPHA, LIMIT off n, BY pattern, GET pattern)", opt, j+1)
		}
	}
	return out, nil
}

// expandPattern splits a BY or GET pattern as Valkey's lookupKeyByPattern
// does; ok is false for one that reads no key ("#", or no '*').
func expandPattern(pat string) (keyPattern, bool) {
	if pat == "#" {
		return keyPattern{}, false
	}
	star := strings.IndexByte(pat, '*')
	if star < 0 {
		return keyPattern{}, false
	}
	rest := pat[star+1:]
	if f := strings.Index(rest, "->"); f >= 0 && f+2 < len(rest) {
		rest = rest[:f] // "->field": a hash field of the key
	}
	return keyPattern{Prefix: pat[:star], Suffix: rest}, true
}

// allowReadPattern returns nil when every key p can expand to is within
// one read glob of caps, else a CodeDenied *Error.
//
// A glob of literals and '*' only (as host.Grant's globCovered requires)
// covers p when it matches p's text with the element written as one '*':
// whatever the element, the glob's '*' that matched it matches it too.
// Globs with '?', '[' or '\' are never taken to cover a pattern.
//
// # Notes
//
//   - Read globs are matched with path.Match, whose '*' stops at '/': an
//     element holding a '/' forms a key that the glob's family (its
//     literal prefix and suffix) still holds but GET of that very key
//     would be refused. Keys of the fabric keyspace hold no '/'.
func allowReadPattern(caps *abi.Capabilities, p keyPattern) error {
	glob := p.String()
	for _, g := range caps.Read {
		if strings.ContainsAny(g, `?[\`) {
			continue
		}
		if ok, _ := path.Match(g, glob); ok {
			return nil
		}
	}
	return abi.Errorf(abi.CodeDenied, "read of pattern "+glob+" is not granted: not every key it can expand to is within capabilities.read ["+strings.Join(caps.Read, " ")+"]")
}
