package app_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/hub"
	"github.com/eclipse-lmos/lmos-hub/lmos"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// sync.pull on a hub started as main starts it mirrors the matching
// Things of another hub, read-only; Close stops the Puller.
func TestSyncPullMirrorsARemoteHub(t *testing.T) {
	remote := hubtest.Start(t, nil)
	remote.Put("urn:s:lamp", hubtest.BareTD("urn:s:lamp", "Lamp"))
	remote.Put("urn:s:fan", hubtest.BareTD("urn:s:fan", "Fan"))
	local := hubtest.Start(t, func(c *app.Config) {
		c.Sync.URL, c.Sync.Token, c.Sync.Pull = remote.URL, hubtest.Token, "$[?@.title == 'Lamp']"
	})
	if local.Main.Pull == nil {
		t.Fatal("sync.pull set, no Puller")
	}
	select {
	case <-local.Main.Pull.Synced():
	case <-time.After(30 * time.Second):
		t.Fatalf("no first sync: %+v", local.Main.Pull.State())
	}
	var td map[string]any
	local.GetJSON(lmos.ThingPath("urn:s:lamp"), http.StatusOK, &td)
	origin, _ := json.Marshal(td["lmos:origin"])
	if string(origin) != `{"hub":"`+remote.URL+`","source":"remote"}` {
		t.Fatalf("lmos:origin %s", origin)
	}
	local.GetJSON(lmos.ThingPath("urn:s:fan"), http.StatusNotFound, nil)
	resp, body := local.Do(http.MethodPut, lmos.ThingPath("urn:s:lamp"), "application/td+json", hubtest.BareTD("urn:s:lamp", "X"), hubtest.Token)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "read-only mirror") || !strings.Contains(string(body), remote.URL) {
		t.Fatalf("PUT on the mirror: %d %s", resp.StatusCode, body)
	}
	if st := local.Main.Pull.State(); st.Kind != hub.LinkPull || st.URL != remote.URL || st.State != hub.LinkConnected || st.Things != 1 {
		t.Fatalf("state %+v", st)
	}
	// The link in the hub's status.
	resp, body = local.Do(http.MethodGet, "/api/status", "", nil, hubtest.Token)
	var status struct{ Links []hub.LinkState }
	// Two links: the pull, and the push sync.url starts too.
	if err := json.Unmarshal(body, &status); err != nil || resp.StatusCode != http.StatusOK || len(status.Links) != 2 ||
		status.Links[0].Kind != hub.LinkPull || status.Links[0].Name != remote.URL || status.Links[0].Things != 1 ||
		status.Links[1].Kind != hub.LinkSync {
		t.Fatalf("/api/status links: %d %s", resp.StatusCode, body)
	}
	// Without sync.pull there is no Puller.
	if plain := hubtest.Start(t, func(c *app.Config) { c.Sync.URL = remote.URL }); plain.Main.Pull != nil {
		t.Fatal("a Puller without sync.pull")
	}
	// sync.pull removed: the hub drops that directory's mirrors when it
	// starts (nobody else can: they are read-only); its own Thing stays.
	local.Put("urn:s:own", hubtest.BareTD("urn:s:own", "Own"))
	dir := local.Main.Config.DataDir
	local.Close()
	again := hubtest.StartIn(t, dir, nil)
	again.GetJSON(lmos.ThingPath("urn:s:lamp"), http.StatusNotFound, nil)
	again.GetJSON(lmos.ThingPath("urn:s:own"), http.StatusOK, nil)
	if src := again.Main.Registry.MirrorSources(); len(src) != 0 {
		t.Fatalf("mirror sources after sync.pull was removed: %v", src)
	}
}
