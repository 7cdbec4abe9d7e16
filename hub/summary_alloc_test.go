package hub

import (
	"testing"

	"github.com/eclipse-lmos/lmos-hub/internal/tdindex"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// TestDecodeSummaryAllocatesWhatItKeeps: reading a stored summary back
// makes the Summary and its string and nothing else (once its words are in
// the dictionary): start-up decodes 10k in a row, and transient copies
// interleaved with the kept strings fragmented the heap.
func TestDecodeSummaryAllocatesWhatItKeeps(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocations (sync.Pool drops items)")
	}
	doc, err := ParseDocument(tdgen.Generate(1)[0].Raw)
	if err != nil {
		t.Fatal(err)
	}
	r := &Registry{searchIndex: tdindex.New()}
	_, enc := r.summarize(doc)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := r.decodeSummary(enc); err != nil {
			t.Fatal(err)
		}
	}); n != 2 {
		t.Errorf("decodeSummary makes %v allocations, want 2", n)
	}
}
