package mcpdoor_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestResourceListChangesAsThingsComeAndGo: the door advertises
// resources.listChanged, so a Thing joining or leaving, which adds or
// removes its TD in resources/list, is announced with
// notifications/resources/list_changed, at both revisions.
func TestResourceListChangesAsThingsComeAndGo(t *testing.T) {
	h := startHub(t, nil)
	type listener struct {
		cs      *mcp.ClientSession
		changed chan struct{}
	}
	clients := map[string]listener{}
	for _, v := range versions {
		l := listener{changed: make(chan struct{}, 64)}
		cl := mcp.NewClient(&mcp.Implementation{Name: "lmos-test", Version: "0"}, &mcp.ClientOptions{
			ResourceListChangedHandler: func(context.Context, *mcp.ResourceListChangedRequest) {
				select {
				case l.changed <- struct{}{}:
				default:
				}
			},
		})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cs, err := cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.URL + "/mcp", MaxRetries: -1}, &mcp.ClientSessionOptions{ProtocolVersion: v})
		cancel()
		if err != nil {
			t.Fatalf("connect %s: %v", v, err)
		}
		t.Cleanup(func() { cs.Close() })
		caps := cs.InitializeResult().Capabilities
		if caps.Resources == nil || !caps.Resources.ListChanged {
			t.Fatalf("%s: resources capability %+v, want listChanged", v, caps.Resources)
		}
		l.cs = cs
		clients[v] = l
	}
	const id = "urn:test:res-joiner"
	uri := "lmos://things/urn%3Atest%3Ares-joiner"
	wait := func(what string, want bool) {
		t.Helper()
		for v, l := range clients {
			select {
			case <-l.changed:
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: no notifications/resources/list_changed after %s", v, what)
			}
			res, err := l.cs.ListResources(context.Background(), nil)
			if err != nil {
				t.Fatalf("%s: resources/list: %v", v, err)
			}
			found := false
			for _, r := range res.Resources {
				found = found || r.URI == uri
			}
			if found != want {
				t.Errorf("%s: after %s, %s listed: %v, want %v", v, what, uri, found, want)
			}
		}
	}
	a := simpleAgent(t, h, id, "Resource joiner")
	wait("the Thing joined", true)
	for _, l := range clients {
		for len(l.changed) > 0 {
			<-l.changed
		}
	}
	a.Close()
	if resp, b := h.Do(http.MethodDelete, "/things/"+id, "", nil, hubtest.Token); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete %s: %d %s", id, resp.StatusCode, b)
	}
	wait("the Thing left", false)
}
