package hub_test

import (
	"context"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Conditional writes queued into one batch (RFC 9110 If-Match /
// If-None-Match, issue 11 point 7): each is checked against what the
// earlier writes of the batch left, not against the stored state, so of
// two writes carrying the same If-Match only the first is applied.
func TestConditionalWritesInOneBatch(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	if _, err := r.Put(ctx, "urn:t:x", testTD("urn:t:x", "v1"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	raw, err := s.ThingRaw("urn:t:x")
	if err != nil {
		t.Fatal(err)
	}
	tag := hub.VersionTag(raw)
	ifMatch := hub.Precondition{IfMatch: true, MatchTags: []string{tag}}
	createOnly := hub.Precondition{IfNoneMatch: true, IfNoneMatchAny: true}
	before := s.commits.Load()
	errs := queueBehindGate(t, s, r,
		func() error { return r.PatchIf(ctx, "urn:t:x", []byte(`{"title":"A"}`), ifMatch) },
		func() error { return r.PatchIf(ctx, "urn:t:x", []byte(`{"title":"B"}`), ifMatch) },
		func() error { return r.DeleteIf(ctx, "urn:t:x", ifMatch) },
		func() error {
			_, err := r.PutIf(ctx, "urn:t:z", testTD("urn:t:z", "first"), hub.Origin{}, createOnly)
			return err
		},
		func() error {
			_, err := r.PutIf(ctx, "urn:t:z", testTD("urn:t:z", "second"), hub.Origin{}, createOnly)
			return err
		},
	)
	if got := s.commits.Load() - before; got != 2 {
		t.Fatalf("%d commits, want 2 (the blocker, then one batch)", got)
	}
	want := []string{"", "", hub.EPRECONDITION, hub.EPRECONDITION, "", hub.EPRECONDITION}
	for i, err := range errs {
		if hub.ErrorCode(err) != want[i] {
			t.Errorf("op %d: %v, want code %q", i, err, want[i])
		}
	}
	for id, title := range map[string]string{"urn:t:x": "A", "urn:t:z": "first"} {
		doc, err := r.Document(id)
		if err != nil || doc["title"] != title {
			t.Errorf("%s: %v, %v; want title %q (the first write)", id, doc["title"], err, title)
		}
	}
}
