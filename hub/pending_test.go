package hub_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// waiter records the decision a parked join's agent was told.
type waiter struct {
	hub.JoinWaiter
	mu       sync.Mutex
	told     int
	password string
	err      error
	live     atomic.Bool
}

func newWaiter(password string) *waiter {
	w := &waiter{}
	w.live.Store(true)
	w.Live = w.live.Load
	if password != "" {
		w.Credential = func() (string, error) { return password, nil }
	}
	w.Decided = func(pw string, err error) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.told++
		w.password, w.err = pw, err
	}
	return w
}

func (w *waiter) decision() (int, string, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.told, w.password, w.err
}

// park runs a new Thing's join through Admit and Park as a door does.
func park(t *testing.T, a *hub.Admission, r *hub.Registry, id, addr string, door hub.Source, w *hub.JoinWaiter) error {
	t.Helper()
	if _, err := a.Admit(hub.JoinRequest{ID: id, Door: door, Addr: addr}); !errors.Is(err, hub.ErrJoinPending) {
		t.Fatalf("admit %s: %v, want ErrJoinPending", id, err)
	}
	p, err := r.Prepare(testTD(id, "T "+id))
	if err != nil {
		t.Fatal(err)
	}
	return a.Park(id, p, door, addr, w)
}

func storedPending(t *testing.T, db *store.DB) []string {
	t.Helper()
	var ids []string
	if err := db.LoadPending(func(p hub.PendingJoin) error { ids = append(ids, p.ID); return nil }); err != nil {
		t.Fatal(err)
	}
	return ids
}

// An approval registers the parked description, the credential issued to
// the waiting agent and the removal of the pending entry in ONE commit;
// nothing reaches the registry before; the feed says pending, created,
// approved.
func TestApproveRegistersThingCredentialAndDropsEntryInOneCommit(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", -1, 0)
	if err := a.OpenPending(s.DB); err != nil {
		t.Fatal(err)
	}
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()
	w := newWaiter("secret-pw")
	if err := park(t, a, r, "urn:p", "10.0.0.7", hub.SourceMQTT, &w.JoinWaiter); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Get("urn:p"); hub.ErrorCode(err) != hub.ENOTFOUND || r.Count() != 0 {
		t.Fatalf("a pending Thing reached the registry: %v", err)
	}
	if _, err := s.CredentialHash("urn:p"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("a pending Thing holds a credential: %v", err)
	}
	if got := storedPending(t, s.DB); len(got) != 1 || got[0] != "urn:p" {
		t.Fatalf("stored pending: %v", got)
	}
	st := a.State(true)
	if len(st.Pending) != 1 || st.Pending[0].Title != "T urn:p" || st.Pending[0].Door != hub.SourceMQTT || st.Pending[0].Addr != "10.0.0.7" {
		t.Fatalf("state: %+v", st)
	}
	before := s.commits.Load()
	if err := a.Approve(context.Background(), "urn:p"); err != nil {
		t.Fatal(err)
	}
	if n := s.commits.Load() - before; n != 1 {
		t.Errorf("the approval took %d commits, want 1", n)
	}
	th, err := r.Get("urn:p")
	if err != nil || th.Meta.Origin.Source != hub.SourceMQTT {
		t.Fatalf("approved Thing: %+v %v", th, err)
	}
	if h, err := s.CredentialHash("urn:p"); err != nil || h != hub.HashToken("secret-pw") {
		t.Fatalf("credential: %q %v", h, err)
	}
	if got := storedPending(t, s.DB); len(got) != 0 || a.PendingCount() != 0 {
		t.Fatalf("pending after approval: %v / %d", got, a.PendingCount())
	}
	if n, pw, err := w.decision(); n != 1 || pw != "secret-pw" || err != nil {
		t.Fatalf("waiter told %d times: %q %v", n, pw, err)
	}
	var types []hub.EventType
	for len(types) < 3 {
		select {
		case e := <-sub.C:
			types = append(types, e.Type)
		case <-time.After(5 * time.Second):
			t.Fatalf("events: %v", types)
		}
	}
	if fmt.Sprint(types) != fmt.Sprint([]hub.EventType{hub.EventJoinPending, hub.EventCreated, hub.EventJoinApproved}) {
		t.Fatalf("events %v", types)
	}
	// An update of the approved Thing is not approved again.
	if _, err := a.Admit(hub.JoinRequest{ID: "urn:p", Door: hub.SourceMQTT, Holder: true}); err != nil {
		t.Fatalf("update: %v", err)
	}
}

// A denial drops the entry (memory and store), stores nothing, and
// refuses the waiting agent with 403.
func TestDenyDropsPendingJoinAndRefusesWaiter(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", -1, 0)
	if err := a.OpenPending(s.DB); err != nil {
		t.Fatal(err)
	}
	w := newWaiter("")
	if err := park(t, a, r, "urn:d", "10.0.0.8", hub.SourceWS, &w.JoinWaiter); err != nil {
		t.Fatal(err)
	}
	if err := a.Deny("urn:d"); err != nil {
		t.Fatal(err)
	}
	if n, _, err := w.decision(); n != 1 || hub.ErrorCode(err) != hub.EFORBIDDEN {
		t.Fatalf("waiter told %d: %v", n, err)
	}
	if got := storedPending(t, s.DB); len(got) != 0 || a.PendingCount() != 0 || r.Count() != 0 {
		t.Fatalf("after deny: stored %v, pending %d, things %d", got, a.PendingCount(), r.Count())
	}
	for _, f := range []func() error{func() error { return a.Deny("urn:d") }, func() error { return a.Approve(context.Background(), "urn:d") }} {
		if err := f(); hub.ErrorCode(err) != hub.ENOTFOUND {
			t.Fatalf("decision on a gone entry: %v", err)
		}
	}
}

// Pending joins survive a restart; approving one whose agent is no longer
// waiting registers it without a credential, and the agent's next
// anonymous MQTT join takes it (gets credentials) without a new approval.
func TestPendingJoinsSurviveRestart(t *testing.T) {
	dir := t.TempDir()
	open := func() (*store.DB, *hub.Registry, *hub.Admission) {
		db, err := store.Open(dir, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		r, err := hub.NewRegistry(db, hub.RegistryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := hub.NewAdmission(r, db, "approve", -1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.OpenPending(db); err != nil {
			t.Fatal(err)
		}
		return db, r, a
	}
	db, r, a := open()
	for _, id := range []string{"urn:r1", "urn:r2"} {
		if err := park(t, a, r, id, "10.0.0.9", hub.SourceMQTT, &newWaiter("pw").JoinWaiter); err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	db.Close()

	db, r, a = open()
	defer db.Close()
	defer r.Close()
	st := a.State(true)
	if len(st.Pending) != 2 || st.Pending[0].ID != "urn:r1" || st.Pending[1].ID != "urn:r2" || r.Count() != 0 {
		t.Fatalf("after restart: %+v, %d things", st.Pending, r.Count())
	}
	if err := a.Approve(context.Background(), "urn:r1"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CredentialHash("urn:r1"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("credential issued with nobody waiting: %v", err)
	}
	if cred, err := a.Admit(hub.JoinRequest{ID: "urn:r1", Door: hub.SourceMQTT, Addr: "10.0.0.9"}); err != nil || cred {
		t.Fatalf("the approved agent's join: %v %v", cred, err)
	}
	if got := storedPending(t, db); len(got) != 1 || got[0] != "urn:r2" {
		t.Fatalf("stored: %v", got)
	}
}

// A flood of new Things from one address fills its share of the pending
// list and no more; others still get theirs; the whole list is bounded
// (a new source's join takes an anonymous place when it is full);
// nothing reaches the registry; another source cannot replace a pending
// id, its own source can.
func TestPendingListBoundedPerSourceAndInAll(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", -1, 0) // memory only: no fsync per park
	for i := range hub.MaxPendingPerSource {
		if err := park(t, a, r, fmt.Sprintf("urn:f%d", i), "10.0.0.1", hub.SourceMQTT, nil); err != nil {
			t.Fatalf("park %d: %v", i, err)
		}
	}
	err := park(t, a, r, "urn:f-over", "10.0.0.1", hub.SourceMQTT, nil)
	var he *hub.Error
	if !errors.As(err, &he) || he.Code != hub.EFULL || he.Limit != "join.pendingPerSource" {
		t.Fatalf("over the source's share: %v", err)
	}
	if err := park(t, a, r, "urn:f0", "10.0.0.1", hub.SourceMQTT, nil); err != nil {
		t.Fatalf("the same source sending again: %v", err)
	}
	if err := park(t, a, r, "urn:f0", "10.0.0.2", hub.SourceMQTT, nil); hub.ErrorCode(err) != hub.ECONFLICT {
		t.Fatalf("another source on a pending id: %v", err)
	}
	if err := park(t, a, r, "urn:f0", "10.0.0.1", hub.SourceWS, nil); hub.ErrorCode(err) != hub.ECONFLICT {
		t.Fatalf("another door on a pending id: %v", err)
	}
	for src := 2; a.PendingCount() < hub.MaxPending; src++ {
		for i := 0; i < hub.MaxPendingPerSource && a.PendingCount() < hub.MaxPending; i++ {
			if err := park(t, a, r, fmt.Sprintf("urn:s%d-%d", src, i), fmt.Sprintf("10.0.1.%d", src), hub.SourceWS, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	// A full list gives way to a new source (issue 24; the eviction's
	// rules: pending_evict_test.go) and stays at its bound.
	if err := park(t, a, r, "urn:last", "10.0.2.1", hub.SourceWS, nil); err != nil {
		t.Fatalf("a new source on a full list: %v", err)
	}
	if r.Count() != 0 || a.PendingCount() != hub.MaxPending {
		t.Fatalf("registry %d, pending %d", r.Count(), a.PendingCount())
	}
}

// The permit-join window admits new Things as open does, in approve and
// closed mode alike, until it expires or is closed; it is bounded.
func TestPermitJoinWindow(t *testing.T) {
	s := openStore(t)
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	r := newRegistry(t, s, hub.RegistryOptions{Now: clock})
	for _, mode := range []string{"approve", "closed"} {
		a := newAdmission(t, s, r, mode, -1, 0)
		newJoin := func() error { _, err := a.Admit(hub.JoinRequest{ID: "urn:w", Door: hub.SourceWS}); return err }
		if newJoin() == nil {
			t.Fatalf("%s: admitted without a window", mode)
		}
		until, err := a.Permit(60)
		if err != nil || !until.Equal(clock().Add(time.Minute)) {
			t.Fatalf("%s: permit %v %v", mode, until, err)
		}
		if st := a.State(false); st.Effective != "open" || st.Remaining != 60 || st.PermitUntil == nil {
			t.Fatalf("%s: state %+v", mode, st)
		}
		if err := newJoin(); err != nil {
			t.Fatalf("%s: in the window: %v", mode, err)
		}
		now.Add(int64(61 * time.Second))
		if newJoin() == nil {
			t.Fatalf("%s: admitted after the window", mode)
		}
		if st := a.State(false); st.Effective != mode || st.PermitUntil != nil || st.Remaining != 0 {
			t.Fatalf("%s: state after %+v", mode, st)
		}
		if _, err := a.Permit(30); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Permit(0); err != nil || newJoin() == nil {
			t.Fatalf("%s: closing the window: %v", mode, err)
		}
		for _, bad := range []int{-1, hub.MaxPermitSeconds + 1} {
			if _, err := a.Permit(bad); hub.ErrorCode(err) != hub.EINVALID {
				t.Fatalf("permit %d: %v", bad, err)
			}
		}
	}
}

// An id registered by other means while its join waited wins: approving
// is a conflict, the entry is dropped, the waiter told, the Thing kept.
func TestApproveOfIDRegisteredMeanwhile(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", -1, 0)
	if err := a.OpenPending(s.DB); err != nil {
		t.Fatal(err)
	}
	w := newWaiter("pw")
	if err := park(t, a, r, "urn:m", "10.0.0.3", hub.SourceMQTT, &w.JoinWaiter); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Put(context.Background(), "urn:m", testTD("urn:m", "by admin"), hub.Origin{Source: hub.SourceHTTP}); err != nil {
		t.Fatal(err)
	}
	if err := a.Approve(context.Background(), "urn:m"); hub.ErrorCode(err) != hub.ECONFLICT {
		t.Fatalf("approve: %v", err)
	}
	if n, _, err := w.decision(); n != 1 || hub.ErrorCode(err) != hub.ECONFLICT {
		t.Fatalf("waiter: %d %v", n, err)
	}
	th, err := r.Get("urn:m")
	if err != nil || th.Summary.Title != "by admin" || th.Meta.Origin.Source != hub.SourceHTTP {
		t.Fatalf("kept Thing: %+v %v", th, err)
	}
	if _, err := s.CredentialHash("urn:m"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Fatalf("credential: %v", err)
	}
	if got := storedPending(t, s.DB); len(got) != 0 || a.PendingCount() != 0 {
		t.Fatalf("pending: %v", got)
	}
}

// The pending list's descriptions are bounded in bytes too: large TDs from
// a few sources stop at join.pendingBytes before the count bounds apply.
func TestPendingListBoundedInBytes(t *testing.T) {
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{})
	a := newAdmission(t, s, r, "approve", -1, 0)
	pad := `"` + strings.Repeat("x", 240<<10) + `"`
	var err error
	n := 0
	for ; n < hub.MaxPending && err == nil; n++ {
		id := fmt.Sprintf("urn:big%d", n)
		if _, aerr := a.Admit(hub.JoinRequest{ID: id, Door: hub.SourceMQTT}); !errors.Is(aerr, hub.ErrJoinPending) {
			t.Fatal(aerr)
		}
		p, perr := r.Prepare(testTD(id, "big", "description", pad))
		if perr != nil {
			t.Fatal(perr)
		}
		err = a.Park(id, p, hub.SourceMQTT, fmt.Sprintf("10.0.3.%d", n/hub.MaxPendingPerSource), nil)
	}
	var he *hub.Error
	if !errors.As(err, &he) || he.Code != hub.EFULL || he.Limit != "join.pendingBytes" {
		t.Fatalf("after %d large joins: %v", n, err)
	}
	total := 0
	for _, p := range a.State(true).Pending {
		total += len(p.TD)
	}
	if total > hub.MaxPendingBytes || r.Count() != 0 {
		t.Fatalf("%d bytes pending, %d registered", total, r.Count())
	}
}
