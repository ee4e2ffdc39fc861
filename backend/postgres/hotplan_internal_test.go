package postgres

import (
	"errors"
	"strconv"
	"strings"
	"testing"
)

// The first hotPartitionCap partitions get literal texts, with no
// partition parameter left; later ones keep the parameter form.
func TestHotPlansCap(t *testing.T) {
	var h hotPlans
	for p := range int16(hotPartitionCap) {
		text, literal := h.text(sqlGrantNext, p*3)
		if !literal || strings.Contains(text, "$8") || !strings.Contains(text, "partition_key = "+strconv.Itoa(int(p*3))+"::smallint") {
			t.Fatalf("partition %d: literal=%v\n%s", p*3, literal, text)
		}
		if again, _ := h.text(sqlGrantNext, p*3); again != text {
			t.Fatalf("partition %d: a second text", p*3)
		}
	}
	if text, literal := h.text(sqlCompleteMany, 3); !literal || strings.Contains(text, "$6") {
		t.Fatalf("a known partition, another statement: literal=%v", literal)
	}
	if text, literal := h.text(sqlGrantNext, 1000); literal || text != sqlGrantNext.sql {
		t.Fatalf("partition beyond the cap: literal=%v", literal)
	}
	off := hotPlans{off: true}
	if _, literal := off.text(sqlGrantNext, 1); literal {
		t.Fatal("plan_cache_mode set by the URL: literal text")
	}
}

// A literal text inserts into the child the resolver names, for each
// table the statement inserts into; a statement without a partition
// parameter keeps its parameters; a partition's child is resolved once
// for every statement, and a failed resolution is not kept.
func TestHotPlansChild(t *testing.T) {
	calls := 0
	fail := true
	h := hotPlans{child: func(part int16) (int, bool, error) {
		calls++
		if fail {
			return 0, false, errors.New("down")
		}
		return int(part) + 100, true, nil
	}}
	text, literal := h.text(sqlGrantNext, 7)
	if !literal || !strings.Contains(text, "INSERT INTO ff_attempt AS a (") {
		t.Fatalf("resolution failed: literal=%v, want the partitioned table\n%s", literal, text)
	}
	fail = false
	text, _ = h.text(sqlGrantNext, 7)
	if !strings.Contains(text, "INSERT INTO ff_attempt_p107 AS a (") || strings.Contains(text, "$8") {
		t.Fatalf("claim text:\n%s", text)
	}
	if again, _ := h.text(sqlGrantNext, 7); again != text || calls != 2 {
		t.Fatalf("a resolved text is kept: %d resolutions", calls)
	}
	text, _ = h.text(sqlCreate, 7)
	if !strings.Contains(text, "INSERT INTO ff_exec_core_p107 (") || !strings.Contains(text, "$1::smallint") {
		t.Fatalf("create text:\n%s", text)
	}
	if calls != 2 {
		t.Fatalf("the partition's child resolved %d times, want once after the failure", calls)
	}
	if text, _ = h.text(sqlCompleteMany, 7); !strings.Contains(text, "INSERT INTO ff_completion_event (") {
		t.Fatalf("complete text (its identity column is the partitioned table's):\n%s", text)
	}
	// Every reference names the child: no statement reads the partitioned
	// table's bounds.
	for _, s := range []*hotStmt{sqlGrantNext, sqlCompleteMany, sqlCreate} {
		text, _ := h.text(s, 7)
		for _, table := range []string{"ff_exec_core", "ff_attempt"} {
			if tableName(table).MatchString(text) {
				t.Fatalf("a literal text names %s:\n%s", table, text)
			}
		}
	}
	// Caps are per statement: a create on partitions the claim never saw
	// leaves the claim's literal texts to the claim's partitions.
	for p := range int16(hotPartitionCap) {
		h.text(sqlCreate, 200+p)
	}
	if _, literal := h.text(sqlGrantNext, 8); !literal {
		t.Fatal("creates on other partitions took the claim's literal texts")
	}
}
