package pgflow_test

import (
	"testing"

	"github.com/fabric-host/fabric/pdk/pgflow"
)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	allOf := pgflow.DecodePolicy("all_of", 1, "")
	anyCancel := pgflow.DecodePolicy("any_of", 1, "")
	anyRun := pgflow.DecodePolicy("any_of", 1, "let_run")
	quorum2 := pgflow.DecodePolicy("quorum", 2, "let_run")
	quorum3 := pgflow.DecodePolicy("quorum", 3, "cancel_remaining")
	for _, tc := range []struct {
		name string
		p    pgflow.Policy
		c    pgflow.Counters
		want pgflow.Decision
	}{
		{"AllOfSatisfied", allOf, pgflow.Counters{Success: 3}, pgflow.Satisfied},
		{"AllOfImpossibleOnFail", allOf, pgflow.Counters{Success: 2, Fail: 1}, pgflow.Impossible},
		{"AllOfPending", allOf, pgflow.Counters{Success: 1, Running: 2}, pgflow.Pending},
		{"AllOfEmptyPending", allOf, pgflow.Counters{}, pgflow.Pending},
		{"AnyOfSatisfied", anyCancel, pgflow.Counters{Success: 1, Running: 2}, pgflow.Satisfied},
		{"AnyOfImpossibleWhenAllFail", anyCancel, pgflow.Counters{Fail: 2, Skip: 1}, pgflow.Impossible},
		{"AnyOfPending", anyRun, pgflow.Counters{Fail: 1, Running: 1}, pgflow.Pending},
		{"QuorumSatisfiedAtK", quorum2, pgflow.Counters{Success: 2, Skip: 1}, pgflow.Satisfied},
		{"QuorumImpossibleWithoutHeadroom", quorum3, pgflow.Counters{Fail: 3, Running: 2}, pgflow.Impossible},
		{"QuorumPending", quorum3, pgflow.Counters{Success: 1, Fail: 1, Running: 3}, pgflow.Pending},
	} {
		if got := pgflow.Evaluate(tc.p, tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !anyCancel.CancelRemaining || anyRun.CancelRemaining || !quorum3.CancelRemaining {
		t.Error("on_satisfied decoding")
	}
	if p := pgflow.DecodePolicy("mystery", 5, ""); p.Kind != pgflow.KindAllOf || p.CancelRemaining {
		t.Errorf("unknown kind decodes as %+v, want all_of", p)
	}
}

func TestAdvance(t *testing.T) {
	t.Parallel()
	c := pgflow.Counters{Running: 2}
	c = c.Advance(pgflow.BucketOf("success")).Advance(pgflow.BucketOf("cancelled"))
	if c != (pgflow.Counters{Success: 1, Fail: 1}) {
		t.Fatalf("%+v", c)
	}
	// running never goes negative (a duplicate event).
	if c = c.Advance(pgflow.BucketOf("skipped")); c != (pgflow.Counters{Success: 1, Fail: 1, Skip: 1}) {
		t.Fatalf("%+v", c)
	}
}
