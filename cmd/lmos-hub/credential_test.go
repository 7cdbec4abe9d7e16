package main

import (
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/eclipse-lmos/lmos-hub/test/kit/tdgen"
)

// `things reset-credential`: an unsigned Thing joined over MQTT whose agent
// lost its credentials cannot join again; an admin's reset (the command,
// with a token; refused without one) deletes its credential, and its next
// join is a new one that gets new credentials. A Thing without a
// credential is a 404 the command reports.
func TestCLIThingsResetCredential(t *testing.T) {
	h := hubtest.Start(t, nil)
	const id = "urn:example:cli-reset"
	td := tdgen.MakeTD(id, "Lost")
	first := h.MQTT(nil).MustJoin(lmos.TopicKey(id), td)
	if p := h.MQTT(nil).Join(lmos.TopicKey(id), td, ""); !strings.Contains(string(p), "reset-credential") {
		t.Fatalf("a join without the credential: %s", p)
	}
	hash := func() string {
		got, err := h.Main.DB.CredentialHash(id)
		if hub.ErrorCode(err) == hub.ENOTFOUND {
			return ""
		}
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	before := hash()

	r := cli(t, nil, "", "things", "reset-credential", id, "--hub", h.URL).want(t, 1, "reset-credential without a token")
	if !strings.Contains(r.stderr, "401") || !strings.Contains(r.stderr, "--token") || hash() != before {
		t.Fatalf("without a token: stderr %q", r.stderr)
	}
	r = cli(t, nil, "", "things", "reset-credential", id, "--hub", h.URL, "--token", testToken).want(t, 0, "reset-credential")
	if !strings.Contains(r.stdout, "credential reset "+id) || hash() != "" {
		t.Fatalf("reset: stdout %q, credential %q", r.stdout, hash())
	}
	r = cli(t, nil, "", "things", "reset-credential", id, "--hub", h.URL, "--token", testToken).want(t, 1, "reset-credential again")
	if !strings.Contains(r.stderr, "404") || !strings.Contains(r.stderr, "holds no MQTT credential") {
		t.Fatalf("reset of a Thing without a credential: stderr %q", r.stderr)
	}
	again := h.MQTT(nil).MustJoin(lmos.TopicKey(id), td)
	if again.Password == first.Password || hash() == "" {
		t.Fatal("the join after the reset got no new credential")
	}
	cli(t, nil, "", "things", "reset-credential", "--hub", h.URL).want(t, 2, "reset-credential without an id")
}
