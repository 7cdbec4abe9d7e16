package hub_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// failingIssuer signs until its n-th credential, which it refuses.
type failingIssuer struct {
	mu     sync.Mutex
	issued int
	failAt int
}

func (f *failingIssuer) Issue(g *hub.Group, m *hub.Member, now time.Time) (json.RawMessage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.issued++
	if f.issued == f.failAt {
		return nil, errors.New("no key")
	}
	return json.RawMessage(fmt.Sprintf(`{"n":%d,"thing":%q}`, f.issued, m.Thing)), nil
}

// Membership credentials live in the store only: each is there while its
// membership is, gone with a removal, a dissolution or the Thing's
// deletion, and a write that fails after signing some leaves none behind.
func TestMemberCredentialsFollowMemberships(t *testing.T) {
	ctx := context.Background()
	iss := &failingIssuer{failAt: 2}
	r := newRegistry(t, openStore(t), hub.RegistryOptions{Issuer: iss})
	for _, id := range []string{"urn:a", "urn:b", "urn:c"} {
		mustPut(t, r, id)
	}
	// The second credential cannot be signed: the group is not created,
	// and the first one signed is not stored.
	if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a", "urn:b"}}); code(err) != hub.EINTERNAL {
		t.Fatalf("create with a failing issuer: %v", err)
	}
	if _, err := r.Group("g"); code(err) != hub.ENOTFOUND {
		t.Fatalf("the group exists: %v", err)
	}
	if c := hub.StoredCredential(r, "g", "urn:a"); c != nil {
		t.Fatalf("a credential of a failed write was stored: %s", c)
	}
	for _, gid := range []string{"g", "h"} {
		if _, err := r.CreateGroup(ctx, hub.GroupSpec{ID: gid, Title: gid, Members: []string{"urn:a", "urn:b", "urn:c"}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, gid := range []string{"g", "h"} {
		for _, id := range []string{"urn:a", "urn:b", "urn:c"} {
			c, err := r.MemberCredential(gid, id)
			if err != nil || !json.Valid(c) || string(c) != string(hub.StoredCredential(r, gid, id)) {
				t.Fatalf("%s in %s: %s, %v", id, gid, c, err)
			}
		}
	}
	gone := func(gid, thing string) {
		t.Helper()
		if _, err := r.MemberCredential(gid, thing); code(err) != hub.ENOTFOUND {
			t.Errorf("%s in %s: %v", thing, gid, err)
		}
		if c := hub.StoredCredential(r, gid, thing); c != nil {
			t.Errorf("%s in %s is still stored: %s", thing, gid, c)
		}
	}
	if _, err := r.RemoveMember(ctx, "g", "urn:a"); err != nil {
		t.Fatal(err)
	}
	gone("g", "urn:a")
	if err := r.Delete(ctx, "urn:b"); err != nil {
		t.Fatal(err)
	}
	gone("g", "urn:b")
	gone("h", "urn:b")
	if err := r.DissolveGroup(ctx, "h"); err != nil {
		t.Fatal(err)
	}
	gone("h", "urn:a")
	gone("h", "urn:c")
	if c, err := r.MemberCredential("g", "urn:c"); err != nil || c == nil {
		t.Fatalf("the remaining member: %s, %v", c, err)
	}
	// A new membership of the same Thing has a new credential.
	before := hub.StoredCredential(r, "g", "urn:c")
	if _, err := r.RemoveMember(ctx, "g", "urn:c"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.AddMember(ctx, "g", "urn:c"); err != nil {
		t.Fatal(err)
	}
	if after, err := r.MemberCredential("g", "urn:c"); err != nil || string(after) == string(before) {
		t.Fatalf("after re-adding: %s (before %s), %v", after, before, err)
	}
}

// A group write that fails after signing a credential, committed in one
// batch with a write that succeeds, leaves no credential stored.
func TestFailedGroupWriteInBatchStoresNoCredential(t *testing.T) {
	ctx := context.Background()
	s := openStore(t)
	r := newRegistry(t, s, hub.RegistryOptions{Issuer: &failingIssuer{failAt: 2}})
	mustPut(t, r, "urn:a")
	mustPut(t, r, "urn:b")
	before := s.commits.Load()
	errs := queueBehindGate(t, s, r,
		func() error {
			_, err := r.CreateGroup(ctx, hub.GroupSpec{ID: "g", Title: "G", Members: []string{"urn:a", "urn:b"}})
			return err
		},
		func() error { _, err := r.Put(ctx, "urn:c", testTD("urn:c", "C"), hub.Origin{}); return err },
	)
	if errs[0] != nil || code(errs[1]) != hub.EINTERNAL || errs[2] != nil {
		t.Fatalf("errs = %v", errs)
	}
	if got := s.commits.Load() - before; got != 2 {
		t.Fatalf("%d commits, want 2 (the blocker, then one batch)", got)
	}
	if _, err := r.Group("g"); code(err) != hub.ENOTFOUND {
		t.Fatalf("the group exists: %v", err)
	}
	if c := hub.StoredCredential(r, "g", "urn:a"); c != nil {
		t.Fatalf("a credential of the failed write was stored: %s", c)
	}
}
