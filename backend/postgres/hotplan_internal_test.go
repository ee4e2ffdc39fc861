package postgres

import (
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
