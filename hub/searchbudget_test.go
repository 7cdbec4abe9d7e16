package hub_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
	"github.com/eclipse-lmos/lmos-hub/test/kit/testwait"
)

// heavyQuery visits every node under every node under every node and
// selects nothing, so only the budget or the context stops it.
const heavyQuery = `$..*..*..[?@=='no such value']`

// budgetRegistry holds copies Things with heavyMember: each costs
// heavyQuery ~600k nodes.
func budgetRegistry(t *testing.T, lim hub.SearchLimits, copies int) *hub.Registry {
	t.Helper()
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Search: lim})
	x := tdgen.Nested(28, 100)
	for i := range copies {
		id := fmt.Sprintf("urn:t:heavy%d", i)
		if _, err := r.Put(context.Background(), id, testTD(id, "Heavy", "x", x), hub.Origin{Source: hub.SourceHTTP}); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func wantLimit(t *testing.T, what string, err error, code, limit string) {
	t.Helper()
	var e *hub.Error
	if !errors.As(err, &e) || e.Code != code || e.Limit != limit {
		t.Errorf("%s: %v, want %s (%s)", what, err, code, limit)
	}
}

func TestSearchBudgets(t *testing.T) {
	ctx := context.Background()
	r := budgetRegistry(t, hub.SearchLimits{MaxNodes: 20_000, MaxResultBytes: 4096, MaxDescendants: 3}, 1)
	_, before := r.SearchStats()
	err := r.StreamJSONPath(ctx, "a", heavyQuery, io.Discard)
	wantLimit(t, "node budget", err, hub.EUNAVAILABLE, "search.maxNodes")
	if _, after := r.SearchStats(); after-before > 20_000+3000 {
		t.Errorf("visited %d nodes with a budget of 20000", after-before)
	}
	var buf bytes.Buffer
	wantLimit(t, "byte budget", r.StreamJSONPath(ctx, "a", `$..n`, &buf), hub.ETOOLARGE, "search.maxResultBytes")
	if buf.Len() > 4096 {
		t.Errorf("wrote %d bytes with a budget of 4096", buf.Len())
	}
	wantLimit(t, "four descendant segments", r.StreamJSONPath(ctx, "a", `$..*..*..*..*`, io.Discard), hub.EINVALID, "search.maxDescendants")
	wantLimit(t, "descendants in a filter", r.StreamJSONPath(ctx, "a", `$[?@..a]..[?@..b]..*..*`, io.Discard), hub.EINVALID, "search.maxDescendants")
	wantLimit(t, "long query", r.StreamJSONPath(ctx, "a", `$.`+strings.Repeat("a", 1100), io.Discard), hub.EINVALID, "search.maxQueryBytes")
	if err := r.StreamJSONPath(ctx, "a", `$[?@.title=='x..y..z..w']`, io.Discard); err != nil {
		t.Errorf("dots in a string literal counted: %v", err)
	}
	wantLimit(t, "text query too long", func() error {
		_, err := r.SearchTextFor(ctx, "a", strings.Repeat("word ", 300), "", 10)
		return err
	}(), hub.EINVALID, "search.maxQueryBytes")

	slow := budgetRegistry(t, hub.SearchLimits{MaxNodes: 1 << 40, MaxDescendants: 3, Timeout: 50 * time.Millisecond}, 100)
	wantLimit(t, "time budget", slow.StreamJSONPath(ctx, "a", heavyQuery, io.Discard), hub.EUNAVAILABLE, "search.timeout")
}

// TestSearchStopsWhenAbandoned: a cancelled search stops at once, and
// visits no node afterwards.
func TestSearchStopsWhenAbandoned(t *testing.T) {
	r := budgetRegistry(t, hub.SearchLimits{MaxNodes: 1 << 40, MaxDescendants: 3, Timeout: time.Hour}, 100)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.StreamJSONPath(ctx, "a", heavyQuery, io.Discard) }()
	testwait.Eventually(t, 5*time.Second, "the search is visiting nodes", func() bool { _, n := r.SearchStats(); return n > 1000 })
	cancel()
	select {
	case err := <-done:
		if hub.ErrorCode(err) != hub.EUNAVAILABLE || !errors.Is(err, context.Canceled) {
			t.Errorf("abandoned search: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the search went on after its context ended")
	}
	running, n1 := r.SearchStats()
	time.Sleep(50 * time.Millisecond)
	if _, n2 := r.SearchStats(); running != 0 || n2 != n1 {
		t.Errorf("after cancellation: %d running, %d nodes visited", running, n2-n1)
	}
}

// blockingWriter holds a search in its gate until released.
type blockingWriter struct{ release chan struct{} }

func (w blockingWriter) Write(p []byte) (int, error) { <-w.release; return len(p), nil }

func TestSearchGates(t *testing.T) {
	ctx := context.Background()
	r := budgetRegistry(t, hub.SearchLimits{MaxPerClient: 2, MaxConcurrent: 3}, 1)
	hold := blockingWriter{make(chan struct{})}
	done := make(chan error, 3)
	for _, client := range []string{"a", "a", "b"} {
		go func() { done <- r.StreamJSONPath(ctx, client, `$[*].id`, hold) }()
	}
	testwait.Eventually(t, 5*time.Second, "three searches running", func() bool { n, _ := r.SearchStats(); return n == 3 })
	// A third one from "a" is refused at once, not queued.
	wantLimit(t, "third search of one client", r.StreamJSONPath(ctx, "a", `$[*].id`, io.Discard), hub.ERATELIMIT, "search.maxConcurrentPerClient")
	_, err := r.SearchTextFor(ctx, "a", "heavy", "", 10)
	wantLimit(t, "text search beyond the client's share", err, hub.ERATELIMIT, "search.maxConcurrentPerClient")
	// "c" has its own share, but every slot is taken: it waits within its
	// time and then gets 503.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	wantLimit(t, "search beyond the global cap", r.StreamJSONPath(short, "c", `$[*].id`, io.Discard), hub.EUNAVAILABLE, "search.maxConcurrent")
	// A waiting search runs as soon as a slot is free.
	waiting := make(chan error, 1)
	go func() { waiting <- r.StreamJSONPath(ctx, "c", `$[*].id`, io.Discard) }()
	close(hold.release)
	for range 3 {
		if err := <-done; err != nil {
			t.Errorf("held search: %v", err)
		}
	}
	if err := <-waiting; err != nil {
		t.Errorf("waiting search: %v", err)
	}
	if n, _ := r.SearchStats(); n != 0 {
		t.Errorf("%d searches still running", n)
	}
	if err := r.StreamJSONPath(ctx, "a", `$[*].id`, io.Discard); err != nil {
		t.Errorf("client a after its searches ended: %v", err)
	}
}
