package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// WoT Discovery tdd-things-list-pagination-header-canonicallink: the etag
// of a page names the state of the collection. A Thing whose expiry passes
// between two page reads leaves the collection before its purge commits,
// so the tag must change at once, not when the purge does.
func TestTDD_things_list_pagination_header_canonicallink_ExpiryChangesTag(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	now := base
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock})
	ctx := context.Background()
	exp := `{"expires":"` + base.Add(time.Hour).Format(time.RFC3339) + `"}`
	for _, id := range []string{"urn:ex:a", "urn:ex:b", "urn:ex:c"} {
		extra := []string{}
		if id == "urn:ex:b" {
			extra = []string{"registration", exp}
		}
		if _, err := r.Put(ctx, id, testTD(id, "t", extra...), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	p1 := r.Page(0, 1)
	if p1.Total != 3 || p1.Things[0].ID != "urn:ex:a" {
		t.Fatalf("page 1: total %d, %v", p1.Total, p1.Things)
	}
	// The purge cannot commit: the collection changes by expiry alone.
	s.gate = make(chan struct{})
	mu.Lock()
	now = base.Add(2 * time.Hour)
	mu.Unlock()
	p2 := r.Page(1, 1)
	if p2.Total != 2 || len(p2.Things) != 1 || p2.Things[0].ID != "urn:ex:c" {
		t.Fatalf("page 2: total %d, %v", p2.Total, p2.Things)
	}
	if p1.Tag() == p2.Tag() {
		t.Errorf("tag %q names both the collection with and without urn:ex:b", p1.Tag())
	}
	if p2.Rev != p1.Rev {
		t.Errorf("revision moved without a commit: %d -> %d", p1.Rev, p2.Rev)
	}
	// The page's documents come from the store state it names.
	var got []string
	if err := r.PageJSON(&p2, 0, len(p2.Things), func(doc []byte) error {
		var d struct{ ID string }
		_ = json.Unmarshal(doc, &d)
		got = append(got, d.ID)
		return nil
	}); err != nil || len(got) != 1 || got[0] != "urn:ex:c" {
		t.Errorf("PageJSON = %v, %v", got, err)
	}
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	close(s.gate)
	// The next write wakes the write loop, which then purges urn:ex:b;
	// events are published after the index is installed.
	if _, err := r.Put(ctx, "urn:ex:d", testTD("urn:ex:d", "t"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
	timeout := time.After(5 * time.Second)
	for purged := false; !purged; {
		select {
		case ev := <-sub.C:
			purged = ev.Type == hub.EventDeleted && ev.ID == "urn:ex:b"
		case <-timeout:
			t.Fatal("urn:ex:b was never purged")
		}
	}
	p3 := r.Page(0, 0)
	if p3.Hidden != 0 || p3.Total != 3 || p3.Tag() == p2.Tag() || p3.Tag() == p1.Tag() {
		t.Errorf("after the purge: tag %q total %d hidden %d (before %q, %q)", p3.Tag(), p3.Total, p3.Hidden, p1.Tag(), p2.Tag())
	}
}

// A page's documents are read only from the store state its tag names: a
// write committed after the index was read makes PageJSON refuse rather
// than mix two states (or drop a deleted Thing under the old total).
func TestTDD_things_list_pagination_header_canonicallink_StaleRead(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	ctx := context.Background()
	for _, id := range []string{"urn:ex:a", "urn:ex:b"} {
		if _, err := r.Put(ctx, id, testTD(id, "t"), hub.Origin{}); err != nil {
			t.Fatal(err)
		}
	}
	p := r.Page(0, 0)
	if err := r.Delete(ctx, "urn:ex:b"); err != nil {
		t.Fatal(err)
	}
	called := false
	err := r.PageJSON(&p, 0, len(p.Things), func([]byte) error { called = true; return nil })
	if !errors.Is(err, hub.ErrStale) || called {
		t.Errorf("PageJSON after a delete = %v (fn called: %v), want ErrStale and no documents", err, called)
	}
	p = r.Page(0, 0)
	n := 0
	if err := r.PageJSON(&p, 0, len(p.Things), func([]byte) error { n++; return nil }); err != nil || n != 1 || p.Total != 1 {
		t.Errorf("fresh page: %v, %d documents, total %d", err, n, p.Total)
	}
}
