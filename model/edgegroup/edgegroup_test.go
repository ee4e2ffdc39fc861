package edgegroup_test

import (
	"testing"

	"github.com/fabric-host/fabric/model/edgegroup"
)

func TestEvaluate(t *testing.T) {
	t.Parallel()
	allOf := edgegroup.DecodePolicy("all_of", 1, "")
	anyCancel := edgegroup.DecodePolicy("any_of", 1, "")
	anyRun := edgegroup.DecodePolicy("any_of", 1, "let_run")
	quorum2 := edgegroup.DecodePolicy("quorum", 2, "let_run")
	quorum3 := edgegroup.DecodePolicy("quorum", 3, "cancel_remaining")
	for _, tc := range []struct {
		name string
		p    edgegroup.Policy
		c    edgegroup.Counters
		want edgegroup.Decision
	}{
		{"AllOfSatisfied", allOf, edgegroup.Counters{Success: 3}, edgegroup.Satisfied},
		{"AllOfImpossibleOnFail", allOf, edgegroup.Counters{Success: 2, Fail: 1}, edgegroup.Impossible},
		{"AllOfPending", allOf, edgegroup.Counters{Success: 1, Running: 2}, edgegroup.Pending},
		{"AllOfEmptyPending", allOf, edgegroup.Counters{}, edgegroup.Pending},
		{"AnyOfSatisfied", anyCancel, edgegroup.Counters{Success: 1, Running: 2}, edgegroup.Satisfied},
		{"AnyOfImpossibleWhenAllFail", anyCancel, edgegroup.Counters{Fail: 2, Skip: 1}, edgegroup.Impossible},
		{"AnyOfPending", anyRun, edgegroup.Counters{Fail: 1, Running: 1}, edgegroup.Pending},
		{"QuorumSatisfiedAtK", quorum2, edgegroup.Counters{Success: 2, Skip: 1}, edgegroup.Satisfied},
		{"QuorumImpossibleWithoutHeadroom", quorum3, edgegroup.Counters{Fail: 3, Running: 2}, edgegroup.Impossible},
		{"QuorumPending", quorum3, edgegroup.Counters{Success: 1, Fail: 1, Running: 3}, edgegroup.Pending},
	} {
		if got := edgegroup.Evaluate(tc.p, tc.c); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if !anyCancel.CancelRemaining || anyRun.CancelRemaining || !quorum3.CancelRemaining {
		t.Error("on_satisfied decoding")
	}
	if p := edgegroup.DecodePolicy("mystery", 5, ""); p.Kind != edgegroup.KindAllOf || p.CancelRemaining {
		t.Errorf("unknown kind decodes as %+v, want all_of", p)
	}
}

func TestAdvance(t *testing.T) {
	t.Parallel()
	c := edgegroup.Counters{Running: 2}
	c = c.Advance(edgegroup.BucketOf("success")).Advance(edgegroup.BucketOf("cancelled"))
	if c != (edgegroup.Counters{Success: 1, Fail: 1}) {
		t.Fatalf("%+v", c)
	}
	// running never goes negative (a duplicate event).
	if c = c.Advance(edgegroup.BucketOf("skipped")); c != (edgegroup.Counters{Success: 1, Fail: 1, Skip: 1}) {
		t.Fatalf("%+v", c)
	}
}
