package hub_test

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
	o := openReopenable(t, hub.RegistryOptions{})
	admission := func() *hub.Admission {
		a, err := hub.NewAdmission(o.r, o.db, "approve", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	a := admission()
	const id = "urn:test:v6-plug"
	const agent, neighbour = "fd00:24::a", "fd00:24::b" // one /64
	ctx := context.Background()
	// What an approval of a parked join from the agent's address writes.
	if _, err := o.r.Put(ctx, id, plainTD(id, "Plug"), hub.Origin{Source: hub.SourceMQTT, Addr: agent, Admitted: true}); err != nil {
		t.Fatal(err)
	}
	refused := func(when string) {
		t.Helper()
		before, _ := o.r.Raw(id)
		th, _ := o.r.Get(id)
		res, err := a.Join(ctx, hub.JoinRequest{ID: id, Door: hub.SourceMQTT, Addr: neighbour, TD: plainTD(id, "Neighbour's")})
		if hub.ErrorCode(err) != hub.EFORBIDDEN || !strings.Contains(err.Error(), "registered from another address") || res.Status != "rejected" || res.Password != "" {
			t.Errorf("%s: the neighbour's claim: %+v %v, want forbidden", when, res, err)
		}
		after, _ := o.r.Raw(id)
		th2, _ := o.r.Get(id)
		if string(after) != string(before) || th2.Meta != th.Meta {
			t.Errorf("%s: the refused claim changed the Thing", when)
		}
		if held, err := a.HasCredential(id); held || err != nil {
			t.Errorf("%s: the refused claim stored a credential (%v)", when, err)
		}
		if _, err := a.CheckClaim(id, agent); err != nil {
			t.Errorf("%s: the agent's own host: %v", when, err)
		}
		if _, err := a.CheckClaim(id, "[fd00:24::a]"); err != nil {
			t.Errorf("%s: the agent's own host in brackets: %v", when, err)
		}
	}
	refused("approved")
	if th, _ := o.r.Get(id); th.Meta.Anon != "fd00:24::/64" || th.Meta.Host != agent {
		t.Fatalf("stored source %q host %q", th.Meta.Anon, th.Meta.Host)
	}
	// Its credential holder's update carries no address: the host stays.
	if _, err := o.r.Put(ctx, id, plainTD(id, "Plug 2"), hub.Origin{Source: hub.SourceMQTT, Owner: true}); err != nil {
		t.Fatal(err)
	}
	refused("after the holder's update")
	o.restart()
	a = admission()
	refused("after a restart")
}

func plainTD(id, title string) []byte {
	return fmt.Appendf(nil, `{"@context":"https://www.w3.org/2022/wot/td/v1.1","id":%q,"title":%q,`+
		`"securityDefinitions":{"nosec_sc":{"scheme":"nosec"}},"security":"nosec_sc"}`, id, title)
}
