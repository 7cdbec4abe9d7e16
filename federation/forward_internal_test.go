package federation

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/store"
)

// TestForwardToAHubThatIsGone: an interaction with a Thing whose paired
// home hub refuses connections fails at once with EUNAVAILABLE naming
// that hub, not after its context's deadline.
func TestForwardToAHubThatIsGone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	home := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now
	db, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	_, self, _ := ed25519.GenerateKey(rand.Reader)
	_, other, _ := ed25519.GenerateKey(rand.Reader)
	peers, err := hub.NewPeers(db, proof.DID(self.Public().(ed25519.PublicKey)), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := peers.Add(home, proof.DID(other.Public().(ed25519.PublicKey))); err != nil {
		t.Fatal(err)
	}
	f := NewForwarder(self, peers)
	thing := &hub.Thing{ID: "urn:example:x", Meta: hub.ThingMeta{Origin: hub.Origin{Source: hub.SourceRemote, Hub: home}}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = f.Deliver(ctx, hub.Interaction{ThingID: thing.ID, Op: hub.OpInvokeAction, Name: "go", Thing: thing}, func(hub.Result) error { return nil })
	if hub.ErrorCode(err) != hub.EUNAVAILABLE || !strings.Contains(err.Error(), home) || ctx.Err() != nil {
		t.Fatalf("forward to a hub that is gone: %v (ctx %v)", err, ctx.Err())
	}
}
