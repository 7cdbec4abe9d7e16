package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// countingIssuer issues a fake credential naming the group, the member
// and its status index, so a test sees what the registry asked it.
type countingIssuer struct {
	mu     sync.Mutex
	issued int
	fail   bool
}

func (c *countingIssuer) Issue(g *hub.Group, m *hub.Member, now time.Time) (json.RawMessage, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.fail {
		return nil, errors.New("no key")
	}
	c.issued++
	return json.Marshal(map[string]any{"group": g.ID, "thing": m.Thing, "index": m.StatusIndex})
}

func mustPut(t *testing.T, r *hub.Registry, id string) {
	t.Helper()
	if _, err := r.Put(context.Background(), id, testTD(id, "T"), hub.Origin{}); err != nil {
		t.Fatal(err)
	}
}

func code(err error) string {
	var he *hub.Error
	if errors.As(err, &he) {
		return he.Code
	}
	return ""
}

func TestGroupLifecycleRevokesAtOnce(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	iss := &countingIssuer{}
	r := newRegistry(t, s, hub.RegistryOptions{Issuer: iss})
	mustPut(t, r, "urn:a")
	mustPut(t, r, "urn:b")
	var changes []hub.MembershipChange
	var mu sync.Mutex
	r.OnMembershipChange(func(c hub.MembershipChange) { mu.Lock(); changes = append(changes, c); mu.Unlock() })
	sub, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Cancel()

	g, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "living-room", Title: "Living room", Members: []string{"urn:b", "urn:a", "urn:a"}})
	if err != nil {
		t.Fatal(err)
	}
	if ids := g.MemberIDs(); !slices.Equal(ids, []string{"urn:a", "urn:b"}) {
		t.Fatalf("members %v", ids)
	}
	if iss.issued != 2 || g.Members[0].StatusIndex == g.Members[1].StatusIndex || hub.StoredCredential(r, "living-room", "urn:a") == nil {
		t.Fatalf("credentials: issued %d, members %+v", iss.issued, g.Members)
	}
	if !r.IsMember("living-room", "urn:a") || r.IsMember("living-room", "urn:c") || r.IsMember("other", "urn:a") {
		t.Fatal("IsMember wrong")
	}
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "living-room", Title: "again"}); code(err) != hub.ECONFLICT {
		t.Fatalf("second create: %v", err)
	}
	idx := g.Members[0].StatusIndex
	if _, err := r.RemoveMember(ctx, "living-room", "urn:a"); err != nil {
		t.Fatal(err)
	}
	// The door heard of it before the removal was answered.
	mu.Lock()
	got := slices.Clone(changes)
	mu.Unlock()
	// The create's two changes are one batch, the removal the next.
	want := []hub.MembershipChange{{Group: "living-room", Thing: "urn:a", Added: true, Batch: 1}, {Group: "living-room", Thing: "urn:b", Added: true, Batch: 1}, {Group: "living-room", Thing: "urn:a", Batch: 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("changes %+v, want %+v", got, want)
	}
	if r.IsMember("living-room", "urn:a") || !r.Revoked(idx) || r.Revoked(g.Members[1].StatusIndex) {
		t.Fatal("removal not in force")
	}
	if _, err := r.RemoveMember(ctx, "living-room", "urn:a"); code(err) != hub.ENOTFOUND {
		t.Fatalf("second removal: %v", err)
	}
	// Deleting a Thing ends its memberships.
	if err := r.Delete(ctx, "urn:b"); err != nil {
		t.Fatal(err)
	}
	if r.IsMember("living-room", "urn:b") || !r.Revoked(g.Members[1].StatusIndex) {
		t.Fatal("a deleted Thing is still a member")
	}
	if err := r.DissolveGroup(ctx, "living-room"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Group("living-room"); code(err) != hub.ENOTFOUND {
		t.Fatalf("dissolved group: %v", err)
	}
	var actions []string
	for len(actions) < 6 {
		select {
		case e := <-sub.C:
			if e.Type == hub.EventGroup {
				actions = append(actions, e.Group.Action+" "+e.Group.Member)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("events so far %v", actions)
		}
	}
	wantEv := []string{"created ", "member_added urn:a", "member_added urn:b", "member_removed urn:a", "member_removed urn:b", "dissolved "}
	if !slices.Equal(actions, wantEv) {
		t.Fatalf("events %v, want %v", actions, wantEv)
	}
}

func TestGroupRefusalsChangeNothing(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	iss := &countingIssuer{}
	r := newRegistry(t, s, hub.RegistryOptions{Issuer: iss})
	mustPut(t, r, "urn:a")
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", RequireSigned: true}); err != nil {
		t.Fatal(err)
	}
	before, _ := r.Group("g")
	status := r.StatusList()
	for name, tc := range map[string]struct {
		do   func() error
		code string
	}{
		"unknown Thing": {func() error { _, err := r.AddMember(ctx, "g", "urn:nobody"); return err }, hub.ENOTFOUND},
		"unsigned Thing in a requireSigned group": {func() error { _, err := r.AddMember(ctx, "g", "urn:a"); return err }, hub.EFORBIDDEN},
		"unknown group": {func() error { _, err := r.AddMember(ctx, "nope", "urn:a"); return err }, hub.ENOTFOUND},
		"bad group id":  {func() error { _, err := r.AddMember(ctx, "a/b", "urn:a"); return err }, hub.EINVALID},
		"wildcard id":   {func() error { _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "#", Title: "x"}); return err }, hub.EINVALID},
		"no title":      {func() error { _, _, err := r.PutGroup(ctx, hub.GroupSpec{ID: "g"}); return err }, hub.EINVALID},
		"bad member id": {func() error {
			_, _, err := r.PutGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"not an id"}})
			return err
		}, hub.EINVALID},
		"put with an unsigned member": {func() error {
			_, _, err := r.PutGroup(ctx, hub.GroupSpec{ID: "g", Title: "G2", RequireSigned: true, Members: []string{"urn:a"}})
			return err
		}, hub.EFORBIDDEN},
		"issuer fails": {func() error {
			iss.mu.Lock()
			iss.fail = true
			iss.mu.Unlock()
			defer func() { iss.mu.Lock(); iss.fail = false; iss.mu.Unlock() }()
			_, _, err := r.PutGroup(ctx, hub.GroupSpec{ID: "g", Title: "G3", Members: []string{"urn:a"}})
			return err
		}, hub.EINTERNAL},
	} {
		if err := tc.do(); code(err) != tc.code {
			t.Errorf("%s: %v, want %s", name, err, tc.code)
		}
		after, _ := r.Group("g")
		if after.Title != before.Title || len(after.Members) != 0 || !after.Modified.Equal(before.Modified) {
			t.Errorf("%s changed the group: %+v", name, after)
		}
		if st := r.StatusList(); st.Next != status.Next || !slices.Equal(st.Bits, status.Bits) {
			t.Errorf("%s changed the status list", name)
		}
	}
	if len(r.Groups()) != 1 {
		t.Fatalf("groups %v", r.Groups())
	}
}

func TestGroupsSurviveRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := hub.NewRegistry(db, hub.RegistryOptions{Issuer: &countingIssuer{}})
	if err != nil {
		t.Fatal(err)
	}
	mustPut(t, r, "urn:a")
	mustPut(t, r, "urn:b")
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", SelfJoin: true, Members: []string{"urn:a", "urn:b"}}); err != nil {
		t.Fatal(err)
	}
	g, _ := r.RemoveMember(ctx, "g", "urn:a")
	revoked := r.StatusList()
	cred, err := r.MemberCredential("g", "urn:b")
	if err != nil || cred == nil {
		t.Fatalf("credential %q, %v", cred, err)
	}
	r.Close()
	db.Close()

	db, err = store.Open(dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r, err = hub.NewRegistry(db, hub.RegistryOptions{Issuer: &countingIssuer{}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	again, err := r.Group("g")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(again.MemberIDs(), g.MemberIDs()) || !again.SelfJoin {
		t.Fatalf("after restart %+v, before %+v", again, g)
	}
	if again, err := r.MemberCredential("g", "urn:b"); err != nil || string(again) != string(cred) {
		t.Fatalf("credential after restart %q, %v; before %q", again, err, cred)
	}
	if _, err := r.MemberCredential("g", "urn:a"); code(err) != hub.ENOTFOUND || hub.StoredCredential(r, "g", "urn:a") != nil {
		t.Fatalf("the removed member's credential: %v", err)
	}
	if st := r.StatusList(); st.Next != revoked.Next || !slices.Equal(st.Bits, revoked.Bits) || !r.Revoked(0) {
		t.Fatalf("status list not kept: next %d", st.Next)
	}
	// The next credential does not reuse a revoked index.
	g2, err := r.AddMember(ctx, "g", "urn:a")
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := g2.Member("urn:a"); m.StatusIndex != revoked.Next {
		t.Fatalf("new index %d, want %d", m.StatusIndex, revoked.Next)
	}
}

// Creating and dissolving a group of 1,024 members publishes over 2,000
// events in two batches, far more than a subscriber's channel holds: the
// feed keeps them for it in order instead of dropping every subscriber of
// the hub (issue 15 review: a group of 300 disconnected every /events,
// /api/events and lmos/v1/hub/events subscriber). A subscriber that does
// not read at all is still dropped once it is FeedBurst behind.
func TestGroupBurstKeepsFeedSubscribers(t *testing.T) {
	ctx := context.Background()
	r := newRegistry(t, openStore(t), hub.RegistryOptions{})
	ids := make([]string, hub.MaxGroupMembers)
	for i := range ids {
		ids[i] = fmt.Sprintf("urn:burst:%04d", i)
		mustPut(t, r, ids[i])
	}
	reader, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	idle, _, err := r.Subscribe(0, false)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []hub.Event, 1)
	go func() {
		var evs []hub.Event
		for e := range reader.C {
			evs = append(evs, e)
			if e.Group != nil && e.Group.Action == hub.GroupDissolved {
				break
			}
		}
		got <- evs
	}()
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: ids}); err != nil {
		t.Fatal(err)
	}
	if err := r.DissolveGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	evs := <-got
	if reader.Dropped() {
		t.Fatal("a reading subscriber was dropped by the burst")
	}
	// created, 1,024 member_added, 1,024 member_removed, dissolved: in order.
	if len(evs) != 2*hub.MaxGroupMembers+2 || evs[0].Group.Action != hub.GroupCreated || evs[len(evs)-1].Group.Action != hub.GroupDissolved {
		t.Fatalf("got %d events", len(evs))
	}
	for i, e := range evs[1 : 1+hub.MaxGroupMembers] {
		if e.Group.Action != hub.GroupMemberAdded || e.Group.Member != ids[i] {
			t.Fatalf("event %d: %+v", i+1, e.Group)
		}
	}
	for i, e := range evs[1+hub.MaxGroupMembers : 1+2*hub.MaxGroupMembers] {
		if e.Group.Action != hub.GroupMemberRemoved || e.Group.Member != ids[i] {
			t.Fatalf("event %d: %+v", 1+hub.MaxGroupMembers+i, e.Group)
		}
	}
	reader.Cancel()
	// The idle one holds both bursts (channel + backlog) without being
	// dropped; a third burst is beyond what it may fall behind.
	if idle.Dropped() {
		t.Fatal("the idle subscriber was dropped by two bursts within its bound")
	}
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g2", Title: "G2", Members: ids}); err != nil {
		t.Fatal(err)
	}
	if !idle.Dropped() {
		t.Fatal("a subscriber more than SubscriberBuffer + FeedBurst behind was kept")
	}
	// Its channel gives what it holds, then closes (the backlog is gone:
	// a dropped subscriber resubscribes from its last sequence).
	n := 0
	for range idle.C {
		n++
	}
	if n == 0 || n > 256+1 {
		t.Fatalf("the dropped subscriber's channel gave %d events before it closed", n)
	}
}
