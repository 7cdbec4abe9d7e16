package mqtt

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// TestAnonymousJoinsAreRateLimited: each anonymous join of a new Thing is
// a durable write, so one address gets a bounded number of them.
func TestAnonymousJoinsAreRateLimited(t *testing.T) {
	e := newEnvJoin(t, joinPolicy{rate: 0.001, burst: 2}, nil)
	anon := mustDial(t, e.addr, nil)
	var creds *credentials
	for i, id := range []string{"urn:j:1", "urn:j:2"} {
		res := anon.join(id, tdgen.MakeTD(id, id), "")
		if res.Status != "accepted" {
			t.Fatalf("join %d: %+v", i, res)
		}
		creds = res.Credentials
	}
	res := anon.join("urn:j:3", tdgen.MakeTD("urn:j:3", "j3"), "")
	if res.Status != "rejected" || res.Problem == nil || res.Problem.Status != 429 || !strings.Contains(res.Problem.Detail, "too many new Things") {
		t.Fatalf("third join = %+v", res)
	}
	if _, err := e.reg.Get("urn:j:3"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("rate-limited Thing registered: %v", err)
	}
	if _, err := e.db.CredentialHash("urn:j:3"); hub.ErrorCode(err) != hub.ENOTFOUND {
		t.Errorf("rate-limited Thing got a credential: %v", err)
	}
	// A Thing re-joining with its own credentials is not limited.
	owner := mustDial(t, e.addr, withCreds(creds))
	if res := owner.join("urn:j:2", tdgen.MakeTD("urn:j:2", "renamed"), ""); res.Status != "accepted" {
		t.Errorf("re-join by the owner: %+v", res)
	}
}
