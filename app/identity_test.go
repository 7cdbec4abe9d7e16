package app_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/eclipse-lmos/lmos-hub/app"
	"github.com/eclipse-lmos/lmos-hub/lmos/proof"
	"github.com/eclipse-lmos/lmos-hub/test/kit/hubtest"
)

// The hub makes its did:key on first start, keeps it (0600) and loads it
// afterwards; /api/status shows the DID and the directory TD carries a
// proof by it that verifies as served.
func TestHubKeyIsKeptAcrossRestartsAndSignsTheDirectoryTD(t *testing.T) {
	dir := t.TempDir()
	check := func(h *hubtest.Hub) string {
		t.Helper()
		var st struct {
			DID string `json:"did"`
		}
		h.GetJSON("/api/status", http.StatusOK, &st)
		if !strings.HasPrefix(st.DID, "did:key:z6Mk") || st.DID != h.Main.DID() {
			t.Fatalf("/api/status did %q, Main.DID %q", st.DID, h.Main.DID())
		}
		resp, td := h.Do(http.MethodGet, "/.well-known/wot", "", nil, "")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET /.well-known/wot: %d %s", resp.StatusCode, td)
		}
		r, err := proof.Verify(td)
		if err != nil {
			t.Fatalf("the directory TD does not verify: %v\n%s", err, td)
		}
		if r.DID != st.DID || r.Created.IsZero() {
			t.Fatalf("the directory TD is signed by %s at %v, the hub is %s", r.DID, r.Created, st.DID)
		}
		return st.DID
	}
	h := hubtest.StartIn(t, dir, nil)
	first := check(h)
	fi, err := os.Stat(filepath.Join(dir, app.HubKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("the hub's key file has mode %v, want 0600", fi.Mode().Perm())
	}
	h.Close()
	h = hubtest.StartIn(t, dir, nil)
	if again := check(h); again != first {
		t.Fatalf("the hub's DID changed across a restart: %s, then %s", first, again)
	}
}
