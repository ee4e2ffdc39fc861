package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// jsonRetention is what retention did with encoding/json, the reference
// policyTTL must match.
func jsonRetention(policy string, def int64) int64 {
	if policy == "" {
		return def
	}
	var p struct {
		StreamPolicy struct {
			RetentionTTLMs *json.Number `json:"retention_ttl_ms"`
		} `json:"stream_policy"`
	}
	if json.Unmarshal([]byte(policy), &p) != nil || p.StreamPolicy.RetentionTTLMs == nil {
		return def
	}
	n, err := p.StreamPolicy.RetentionTTLMs.Int64()
	if err != nil || n < 0 {
		return def
	}
	return n
}

var policyCases = []string{
	``, `null`, `{}`, `[]`, `"x"`, `1`, `true`, ` {"stream_policy":{"retention_ttl_ms":5000}} `,
	`{"stream_policy":{"retention_ttl_ms":5000}}`,
	`{"stream_policy":{"retention_ttl_ms":0}}`,
	`{"stream_policy":{"retention_ttl_ms":-1}}`,
	`{"stream_policy":{"retention_ttl_ms":1.5}}`,
	`{"stream_policy":{"retention_ttl_ms":1e3}}`,
	`{"stream_policy":{"retention_ttl_ms":"7000"}}`,
	`{"stream_policy":{"retention_ttl_ms":"\u0037000"}}`,
	`{"stream_policy":{"retention_ttl_ms":"7x"}}`,
	`{"stream_policy":{"retention_ttl_ms":""}}`,
	`{"stream_policy":{"retention_ttl_ms":null}}`,
	`{"stream_policy":{"retention_ttl_ms":true}}`,
	`{"stream_policy":{"retention_ttl_ms":[1]}}`,
	`{"stream_policy":{"retention_ttl_ms":{"a":1}}}`,
	`{"stream_policy":{"retention_ttl_ms":99999999999999999999}}`,
	`{"stream_policy":{"retention_ttl_ms":9223372036854775807}}`,
	`{"stream_policy":{"retention_ttl_ms":01}}`,
	`{"stream_policy":{"retention_ttl_ms":-0}}`,
	`{"stream_policy":{"retention_ttl_ms":5,}}`,
	`{"stream_policy":{"retention_ttl_ms":5}`,
	`{"stream_policy":{"retention_ttl_ms":5}}x`,
	`{"stream_policy":{"retention_ttl_ms":5}} {}`,
	`{"stream_policy":null}`,
	`{"stream_policy":3}`,
	`{"stream_policy":"s"}`,
	`{"stream_policy":[]}`,
	`{"Stream_Policy":{"RETENTION_TTL_MS":42}}`,
	`{"stream_polic\u0079":{"retention_ttl_ms":43}}`,
	"{\"stream_policy\":{\"retention_ttl_\u212a\":1}}",
	"{\"\u017ftream_policy\":{\"retention_ttl_ms\":44}}",
	`{"stream_policy":{"retention_ttl_ms":1},"stream_policy":{"other":2}}`,
	`{"stream_policy":{"retention_ttl_ms":1},"stream_policy":{"retention_ttl_ms":null}}`,
	`{"stream_policy":{"retention_ttl_ms":1},"stream_policy":null}`,
	`{"stream_policy":{"retention_ttl_ms":1},"stream_policy":2}`,
	`{"stream_policy":{"retention_ttl_ms":1},"x":[1,2,{"y":"z"}],"z":-1.5e-3}`,
	`{"a":"\ud83d\ude00","b":"\ud83d","c":"\x01"}`,
	`{"a":"\q","stream_policy":{"retention_ttl_ms":1}}`,
	`{"a":"\u12G4","stream_policy":{"retention_ttl_ms":1}}`,
	`{"a":tru,"stream_policy":{"retention_ttl_ms":1}}`,
	`{"a":1.,"stream_policy":{"retention_ttl_ms":1}}`,
	`{"a":.5,"stream_policy":{"retention_ttl_ms":1}}`,
	`{"a":1e,"stream_policy":{"retention_ttl_ms":1}}`,
	`{"a":1E+2,"stream_policy":{"retention_ttl_ms":8}}`,
	`{"a" : [ ] , "stream_policy" : { "retention_ttl_ms" : 9 } }`,
	"{\"a\":\"\xff\",\"stream_policy\":{\"retention_ttl_ms\":10}}",
	`{"max_retries":3,"stream_policy":{"durability":"durable","retention_ttl_ms":3600000,"max_len":null}}`,
	`{1:2}`, `{"a"}`, `{"a":}`, `{,}`, `[1,]`, `{"a":1 "b":2}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	`{"x":` + strings.Repeat("[", 9999) + strings.Repeat("]", 9999) + `,"stream_policy":{"retention_ttl_ms":11}}`,
	`{"x":` + strings.Repeat("[", 10000) + strings.Repeat("]", 10000) + `,"stream_policy":{"retention_ttl_ms":11}}`,
}

// TestRetentionMatchesEncodingJSON checks that the hand-written policy
// reader gives what encoding/json gave on valid, invalid and odd
// documents.
func TestRetentionMatchesEncodingJSON(t *testing.T) {
	for _, c := range policyCases {
		if got, want := retention(c, -7), jsonRetention(c, -7); got != want {
			t.Errorf("retention(%.80q) = %d, encoding/json gives %d", c, got, want)
		}
	}
}

// FuzzRetention compares the two readers on generated documents.
func FuzzRetention(f *testing.F) {
	for _, c := range policyCases {
		f.Add(c)
	}
	f.Fuzz(func(t *testing.T, c string) {
		if got, want := retention(c, -7), jsonRetention(c, -7); got != want {
			t.Errorf("retention(%q) = %d, encoding/json gives %d", c, got, want)
		}
	})
}
