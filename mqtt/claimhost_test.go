package mqtt

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// Issue 24, point 1, over IPv6: a Thing without a credential (approved
// while its agent was gone, or reset) was resumed by an anonymous join from
// any address of the /64 it was registered from (hub.SourceOf), which is
// every host of a home LAN. Only its exact host resumes it now, also after
// its credential holder's own updates (which bring no address) and after a
// restart; another host of the /64 is refused and changes nothing.
func TestClaimNeedsTheExactIPv6Host(t *testing.T) {
	e := newEnvJoin(t, joinPolicy{mode: "approve"}, nil)
	const id = "urn:test:v6-plug"
	const agent, neighbour = "fd00:24::a", "fd00:24::b" // one /64
	ctx := context.Background()
	// What an approval of a parked join from the agent's address writes.
	if _, err := e.reg.Put(ctx, id, plainTD(id, "Plug"), hub.Origin{Source: hub.SourceMQTT, Addr: agent, Admitted: true}); err != nil {
		t.Fatal(err)
	}
	refused := func(when string) {
		t.Helper()
		before, _ := e.reg.Raw(id)
		th, _ := e.reg.Get(id)
		_, err := e.b.checkClaim(id, neighbour)
		if hub.ErrorCode(err) != hub.EFORBIDDEN || !strings.Contains(err.Error(), "registered from another address") {
			t.Errorf("%s: the neighbour's claim: %v, want forbidden", when, err)
		}
		after, _ := e.reg.Raw(id)
		th2, _ := e.reg.Get(id)
		if string(after) != string(before) || th2.Meta != th.Meta {
			t.Errorf("%s: the refused claim changed the Thing", when)
		}
		if _, err := e.b.checkClaim(id, agent); err != nil {
			t.Errorf("%s: the agent's own host: %v", when, err)
		}
		if _, err := e.b.checkClaim(id, "[fd00:24::a]"); err != nil {
			t.Errorf("%s: the agent's own host in brackets: %v", when, err)
		}
	}
	refused("approved")
	if th, _ := e.reg.Get(id); th.Meta.Anon != "fd00:24::/64" || th.Meta.Host != agent {
		t.Fatalf("stored source %q host %q", th.Meta.Anon, th.Meta.Host)
	}
	// Its credential holder's update carries no address: the host stays.
	if _, err := e.reg.Put(ctx, id, plainTD(id, "Plug 2"), hub.Origin{Source: hub.SourceMQTT, Owner: true}); err != nil {
		t.Fatal(err)
	}
	refused("after the holder's update")
	e.restart()
	refused("after a restart")
}

func plainTD(id, title string) []byte {
	return fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":%q,`+
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`, id, title)
}
