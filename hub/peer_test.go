package hub_test

import (
	"testing"

	"github.com/eclipse-lmos/lmos-hub/hub"
)

// TestPeerPrincipalRights: a paired hub has an operate token's rights on
// every Thing, secured ones included, and manages neither the hub nor
// groups.
func TestPeerPrincipalRights(t *testing.T) {
	a, err := hub.NewAccess(hub.AnonymousNone, "open", nil)
	if err != nil {
		t.Fatal(err)
	}
	p := hub.PeerPrincipal("did:key:z6MkhaXgBZDvotDkL5257faiztiGiC2QtKLGpbnnEGta2doK", "127.0.0.1")
	if !p.Authenticated() {
		t.Fatal("a peer is not authenticated")
	}
	for _, op := range []hub.Op{hub.OpReadDirectory, hub.OpReadProperty, hub.OpObserveProperty, hub.OpSubscribeEvent, hub.OpWriteProperty, hub.OpInvokeAction} {
		if err := a.Allow(p, op, nil); err != nil {
			t.Errorf("%s: %v", op, err)
		}
	}
	for _, op := range []hub.Op{hub.OpManage, hub.OpManageGroups} {
		if err := a.Allow(p, op, nil); hub.ErrorCode(err) != hub.EFORBIDDEN {
			t.Errorf("%s: %v, want forbidden", op, err)
		}
	}
}
